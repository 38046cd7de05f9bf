// Package topology reads a node's CPU, cache, NUMA and IO-queue topology from
// sysfs and procfs, and picks exclusive CPUs for a request.
//
// Discovery: Discover(sysRoot, procRoot) reads the sysfs and procfs mounted at
// the given roots ("/sys" and "/proc" in production, a captured tree in
// tests) and returns plain data whose queries return cpuset.CPUSet. One file
// per source: cpu.go (cpu*/topology, online, isolated), node.go (NUMA nodes
// and distances), cache.go (last-level cache groups), irq.go
// (/proc/interrupts and /proc/irq/*), blkmq.go (/sys/block/*/mq/*/cpu_list).
// Each reader does one bounded read and hands the bytes to a pure parseX
// function that is fuzzed.
//
// Allocation: Allocate(topo, state, request) is a pure function with no I/O.
//
// Error contract: malformed files give an error wrapping ErrParse that names
// the file and the value; unreadable required files wrap ErrRead; a tree with
// no CPUs wraps ErrNoCPUs. Missing optional sources (cache, NUMA, IRQ, blk-mq
// files) are not errors: Discover returns a degraded topology and a Warning
// for each. Allocation failures are *AllocError values carrying a
// machine-readable Reason; errors.Is(err, ErrAllocation) matches all of them.
// Nothing in this package panics on input.
//
// Imports: no k8s.io/* package except k8s.io/utils/cpuset, and none of
// cgroup, recommend or agent. Roots are parameters, never globals.
package topology
