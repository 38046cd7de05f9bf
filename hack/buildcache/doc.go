// Package buildcache holds cache.sh, the one home of how cgpilot caches a
// binary built at a pin (test/k8sbins, test/runtimebins and test/deschedbin's
// build.sh and hack/tool.sh source it), and its tests. It has no Go code:
// the tests run cache.sh with fake builds in a temporary cache, and the real
// build.sh scripts only against fake cached binaries, so nothing is built.
package buildcache
