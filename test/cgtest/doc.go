// Package cgtest gives kernel-tier tests a private cgroup sandbox on the
// real host: a parent named cgpilot-test-<random> below the test process's
// own cgroup in every hierarchy a test needs (each v1 controller the test
// names, plus the cgroup2 tree when mounted), kubelet-style sub-trees inside
// it, and child processes (re-executions of the test binary) placed in
// those cgroups.
//
// Cleanup kills the children it started (by PID), moves any task still left
// in the sandbox back to the test's own cgroup, and removes every directory
// it made, deepest first. It never touches a cgroup outside its parent.
//
// Tests that use Start must call Main from TestMain.
//
// Errors make the test fail (t.Fatal); a host that cannot give a sandbox
// (no such hierarchy, v2 controllers that cannot be enabled) skips the test
// with the reason. KubeletTree (kubelet.go) lays out a kubelet-style
// kubepods tree in a sandbox and reads back cpusets, quotas and the tasks'
// allowed CPUs. cgtest imports nothing of cgpilot and nothing of
// Kubernetes but k8s.io/utils/cpuset.
package cgtest
