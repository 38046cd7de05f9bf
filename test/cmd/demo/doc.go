// Command demo is `make demo`:
//
//	go run ./test/cmd/demo up [--dir DIR] [--bins DIR] [--runtime-bins DIR]
//	go run ./test/cmd/demo down [--dir DIR]
//	go run ./test/cmd/demo images --dir DIR
//
// up starts the test bed's single-node cluster in DIR ($CGPILOT_DEMO_DIR,
// default /tmp/cgpilot-demo), deploys the agent with kubectl apply -k of
// deploy/kustomize and a locally built image, and shows the whole agent in
// numbered steps (see package test/demo): CPU pools, in-place right-sizing
// and an OOM bump, through cgpilotctl beside the cgroup files; it fails if
// an unexpected Warning Event appeared, and leaves the cluster running.
// down (make demo-down) deletes the agent DaemonSet, then removes the test
// bed as `testbed down` does.
// images builds (or finds in the cache) the agent and aggregator images and
// cgpilotctl and puts them in DIR, for make demo-v2 (test/v2node/run.sh
// packs them into the cgroup v2 VM, which has no Go toolchain).
// The Kubernetes binaries come from --bins, $CGPILOT_K8S_BINS or
// test/k8sbins/build.sh --check; the node's container runtime (containerd
// 2 and runc) from --runtime-bins, $CGPILOT_RUNTIME_BINS or
// test/runtimebins/build.sh --check. up must run inside the cgpilot checkout
// (it renders deploy/kustomize and builds the agent). Errors go to stderr
// with exit status 1.
//
// main.go, built only on Linux, is all of it: it parses the subcommand and
// its flags, finds the checkout and the binaries, and calls package demo
// (and package images, for the cache directory of images).
package main
