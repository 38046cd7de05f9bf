// Package v2 proves the cgroup v2 test tier: its test writes cpu.max and
// memory.max in a real cgroup v2 hierarchy, reads them back, and watches the
// kernel OOM-kill a memory hog through memory.events.
//
// It holds tests only. They run in the VM of test/v2vm (make test-v2), and
// skip elsewhere unless /sys/fs/cgroup is a unified cgroup2 mount, the kernel
// tier is enabled and the process may enable controllers in its own cgroup.
// Inside the VM a missing prerequisite is a failure, not a skip. The tests
// create one cgroup named cgpilot-test-* below their own and remove it.
// It imports nothing of cgpilot except test/tier.
package v2
