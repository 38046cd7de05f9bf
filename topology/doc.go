// Package topology reads a node's CPU, cache, NUMA and IO-queue topology from
// sysfs and procfs, and picks exclusive CPUs for a request.
//
// # Discovery
//
// Discover(sysRoot, procRoot) reads the sysfs and procfs mounted at the given
// roots ("/sys" and "/proc" in production; DiscoverRoot(dir) for a captured
// tree holding dir/sys and dir/proc, DiscoverWith for an interrupts file
// mounted apart) and returns plain data whose queries return
// cpuset.CPUSet. One file per source, named after what it reads:
// cpu_linux.go (cpu*/topology, online, isolated, /proc/cmdline isolcpus),
// node_linux.go (NUMA nodes: node*/cpulist, else cpumap, else cpu*/node*
// links; distances), cache_linux.go (last-level cache groups),
// irq_linux.go (/proc/interrupts, /proc/irq/N/{smp,effective}_affinity_list)
// and blkmq_linux.go (/sys/block/*/mq/*/cpu_list); fsread_linux.go holds
// what they share (the bounded read, optional files, the cpuN and nodeN
// directory listing). Each reader does one bounded read and hands the
// text to a pure parseX function that is fuzzed. The parsers build on
// every platform: cpulist.go (the cpu list and hex mask formats), cpu.go
// (isolcpus= of the kernel command line), node.go (a distance row),
// irq.go (/proc/interrupts, the IRQ type, and the naming rules that tell
// NVMe, NIC and virtio queues apart) and blkmq.go (blk-mq cpu_list and
// the BlockQueue type).
// The fuzz targets of the /proc/interrupts, distance, IRQ-name, isolcpus
// and blk-mq cpu_list parsers also hold every parse to a CPU-time and heap
// bound (10 ms and 1 MiB per 256 KiB of input; 2 MiB for /proc/interrupts,
// whose result grows with it), as TestParserBounds does for crafted worst
// cases.
//
// discover_linux.go holds the entry points, which call the readers in
// turn, and assignCores. topology.go holds the data (Topology, CPU,
// NUMANode, CacheGroup, Warning), its queries, the discovery errors, New
// and Flat; summary.go its stable JSON view (Summarize), which
// `cgpilotctl topology` prints and the golden files record.
//
// Cores and packages are the kernel's sibling lists (core_cpus_list or
// thread_siblings_list, package_cpus_list or core_siblings_list), the
// grouping the scheduler and lscpu use; sysfs core_id and
// physical_package_id are kept only as labels, since they repeat per
// socket, are -1 on some architectures, and differ between the threads of
// an AMD compute unit or a VMware guest's virtual core (see assignCores).
// Core, Socket and L3 are machine-unique dense ids; Unknown (-1) marks what
// the tree does not say. Results are checked against hwloc's expected
// output for its 40-odd captured machines (where hwloc splits a Bulldozer
// compute unit into two cores, against its L2 caches instead), cadvisor's
// view of two real nodes and lscpu's view of a VMware guest.
//
// # Allocation
//
// Allocate(topo, state, request) is a pure function with no I/O: the agent
// passes the CPUs it has already granted (State.Taken), reserved CPUs and
// the sizes of its shared instances, and gets a cpuset or an *AllocError
// with a machine-readable Reason. It is the one home of the allocation
// rules: the cap and the sellable rule (Limits), explicit-set validation,
// and resizes in place (Request.Keep: a grown set keeps its CPUs, a shrunk
// one is the best part of them); the agent's CPU pools and `cgpilotctl
// alloc` both call it and decide the same. Flat builds a machine from CPU
// ids alone, for when discovery failed. A Topology is immutable once built by
// Discover or New, so Allocate may run concurrently. With a request that no
// NUMA node holds, prefer-single uses the fewest nodes that split no more
// cores than the machine must (whole cores before fewer nodes), nearest
// nodes (node*/distance) first. alloc.go holds Allocate, its inputs,
// limits and refusals; allocpick.go the picker that chooses NUMA nodes,
// cache groups and cores and orders cores by the IO queues they serve;
// validate.go the check of an explicit set against the same rules.
//
// # Errors
//
// Malformed files give an error wrapping ErrParse that names the file and
// the value; unreadable required files wrap ErrRead; a tree with no CPUs
// wraps ErrNoCPUs. Missing optional sources (cache, NUMA, IRQ, blk-mq files)
// are not errors: Discover returns a degraded topology and a Warning for
// each, except blk-mq files, which are skipped without one.
// errors.Is(err, ErrAllocation) matches every *AllocError. Nothing in this
// package panics on input.
//
// # Imports
//
// No k8s.io/* package except k8s.io/utils/cpuset, internal/* (cpulist),
// and none of cgroup, recommend, api or agent. Roots are parameters, never
// globals.
package topology
