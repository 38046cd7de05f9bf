// Package cgtest gives kernel-tier tests a private cgroup sandbox on the
// real host: a parent named cgpilot-test-<random> below the test process's
// own cgroup in every hierarchy a test needs (each v1 controller the test
// names, plus the cgroup2 tree when mounted), kubelet-style sub-trees inside
// it, and child processes (re-executions of the test binary) placed in
// those cgroups.
//
// Cleanup kills the children it started (by PID), moves any task still left
// in the sandbox back to the test's own cgroup, and removes every directory
// it made, deepest first. Outside its parent it writes only the test's own
// cgroup: the tasks it moves back and, on a unified host, the controllers
// it enables in its cgroup.subtree_control.
//
// Tests that use Start must call Main from TestMain.
//
// Errors make the test fail (t.Fatal); a host that cannot give a sandbox
// (no such hierarchy, v2 controllers that cannot be enabled) skips the test
// with the reason. KubeletTree (kubelet.go) lays out a kubelet-style
// kubepods tree in a sandbox and reads back cpusets, quotas and the tasks'
// allowed CPUs. Of cgpilot, cgtest imports only package cgroup (the
// cgroup.Mounts that AsRoots returns), and of Kubernetes only
// k8s.io/utils/cpuset.
//
// # Files
//
// All three build only on Linux. cgtest.go is the sandbox: finding the
// hierarchies in /proc/self/mountinfo and the test's own cgroups, making
// the directories (a v1 cpuset seeded from its parent), the kubelet's pod
// paths, and the cleanup. proc.go holds the child processes: Main's child
// roles (busy, sleep, memory hog), Start placing a child in the sandbox
// before it runs, and killing and waiting for it. kubelet.go is
// KubeletTree, its pods with a busy process and a CFS quota per
// container and what it reads back, and the sandbox presented as the
// hierarchy roots (AsRoots) and as a procfs root with a matching
// mountinfo (ProcRoot).
package cgtest
