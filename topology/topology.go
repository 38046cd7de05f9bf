package topology

import (
	"errors"
	"fmt"
	"sort"

	"k8s.io/utils/cpuset"
)

// Sentinel errors. Every discovery error wraps one of them and names the file
// and the offending value.
var (
	// ErrRead: a required file exists but could not be read.
	ErrRead = errors.New("topology: read failed")
	// ErrParse: a file holds a value that does not parse.
	ErrParse = errors.New("topology: malformed value")
	// ErrNoCPUs: the tree has no cpuN directory at all.
	ErrNoCPUs = errors.New("topology: no CPUs found")
)

// Unknown marks an id that the tree does not provide.
const Unknown = -1

// CPU is one logical CPU (hardware thread).
type CPU struct {
	ID       int
	Online   bool
	Isolated bool // isolcpus or /sys/devices/system/cpu/isolated
	// Core is a machine-unique physical core id (dense, in order of the
	// lowest CPU id of each core): the CPUs the kernel's core_cpus_list
	// (thread_siblings_list) groups; Unknown for offline CPUs.
	Core int
	// RawCoreID is sysfs core_id, a label only: it repeats per socket (or
	// per cluster) and differs between the threads of an AMD compute unit.
	RawCoreID int
	// Socket is a machine-unique package id (dense): the CPUs the kernel's
	// package_cpus_list (core_siblings_list) groups, else those with the
	// same physical_package_id. POWER reports -1 for every package and ia64
	// repeats ids across packages, so the list is what separates them.
	Socket int
	// RawPackageID is sysfs physical_package_id; Unknown when absent or -1.
	RawPackageID int
	Die          int // die_id; Unknown when absent
	NUMA         int // NUMA node id; Unknown when the tree does not say
	// L3 is a machine-unique last-level-cache group id (dense); Unknown when
	// the tree has no cache information for this CPU.
	L3       int
	Siblings cpuset.CPUSet // thread siblings, including the CPU itself

	// Raw sysfs facts used to derive Core and Socket.
	pkgCPUs               cpuset.CPUSet // package_cpus_list (core_siblings_list)
	cluster, book, drawer int
	hasTopology           bool // cpuN/topology exists
}

// NUMANode is one NUMA node that has a sysfs directory.
type NUMANode struct {
	ID   int
	CPUs cpuset.CPUSet
	// Distances maps a node id to the distance from this node (node*/distance);
	// nil when the file is absent or does not match the node list.
	Distances map[int]int
}

// CacheGroup is a set of CPUs that share one last-level cache.
type CacheGroup struct {
	ID    int
	Level int // the cache level used (3 on most servers, 2 on some ARM)
	CPUs  cpuset.CPUSet
}

// Topology is the discovered machine. CPUs is sorted by id.
type Topology struct {
	CPUs      []CPU
	Nodes     []NUMANode   // sorted by id
	LLCGroups []CacheGroup // sorted by id
	IRQs      []IRQ        // sorted by number
	BlockMQ   []BlockQueue // sorted by device, then queue
	// Reserved are housekeeping CPUs: when the kernel isolates CPUs, the
	// online CPUs it does not isolate are kept for the system (the
	// Node Tuning Operator model); empty when nothing is isolated.
	Reserved cpuset.CPUSet
	index    map[int]int // CPU id -> position in CPUs
	ai       *allocIndex // cores for the allocator, built once
}

// Warning describes a degraded part of a topology that is still usable.
type Warning struct {
	Path string // the file or directory involved
	Msg  string
}

func (w Warning) String() string { return w.Path + ": " + w.Msg }

// CPU returns the CPU with the given id.
func (t *Topology) CPU(id int) (CPU, bool) {
	i, ok := t.index[id]
	if !ok {
		return CPU{}, false
	}
	return t.CPUs[i], true
}

func (t *Topology) filter(keep func(CPU) bool) cpuset.CPUSet {
	var ids []int
	for _, c := range t.CPUs {
		if keep(c) {
			ids = append(ids, c.ID)
		}
	}
	return cpuset.New(ids...)
}

// AllCPUs returns every CPU with a sysfs directory, online or not.
func (t *Topology) AllCPUs() cpuset.CPUSet { return t.filter(func(CPU) bool { return true }) }

// Online returns the online CPUs.
func (t *Topology) Online() cpuset.CPUSet { return t.filter(func(c CPU) bool { return c.Online }) }

// Isolated returns the isolated CPUs.
func (t *Topology) Isolated() cpuset.CPUSet { return t.filter(func(c CPU) bool { return c.Isolated }) }

// CoreCPUs returns the CPUs of machine-unique core id.
func (t *Topology) CoreCPUs(core int) cpuset.CPUSet {
	return t.filter(func(c CPU) bool { return c.Core == core && core != Unknown })
}

// NUMACPUs returns the CPUs of NUMA node id.
func (t *Topology) NUMACPUs(node int) cpuset.CPUSet {
	return t.filter(func(c CPU) bool { return c.NUMA == node })
}

// IOCPUs returns the CPUs that serve NVMe, NIC or virtio queue interrupts:
// the effective affinity of each queue IRQ when the kernel exposes it, else
// its configured affinity. blk-mq maps (BlockMQ) are not counted: every CPU
// submits to some hardware queue, so they say where IO is issued, not where
// its interrupts land.
func (t *Topology) IOCPUs() cpuset.CPUSet {
	out := cpuset.New()
	for _, q := range t.IRQs {
		if q.ServesIOQueue() {
			out = out.Union(q.CPUs())
		}
	}
	return out
}

// IOQueuesByCPU maps each CPU to the names of the IO queues whose interrupts
// it serves.
func (t *Topology) IOQueuesByCPU() map[int][]string {
	m := map[int][]string{}
	for _, q := range t.IRQs {
		if !q.ServesIOQueue() {
			continue
		}
		for _, c := range q.CPUs().UnsortedList() {
			m[c] = append(m[c], q.Queue)
		}
	}
	return m
}

// Counts summarises the shape of the online part of the machine.
type Counts struct {
	CPUs, Online, Sockets, NUMANodes, Cores, LLCGroups int
}

// Counts returns the number of distinct sockets, NUMA nodes, cores and LLC
// groups among online CPUs (Unknown ids are not counted).
func (t *Topology) Counts() Counts {
	s, n, c, l := map[int]bool{}, map[int]bool{}, map[int]bool{}, map[int]bool{}
	out := Counts{CPUs: len(t.CPUs)}
	for _, cpu := range t.CPUs {
		if !cpu.Online {
			continue
		}
		out.Online++
		for _, p := range []struct {
			m  map[int]bool
			id int
		}{{s, cpu.Socket}, {n, cpu.NUMA}, {c, cpu.Core}, {l, cpu.L3}} {
			if p.id != Unknown {
				p.m[p.id] = true
			}
		}
	}
	out.Sockets, out.NUMANodes, out.Cores, out.LLCGroups = len(s), len(n), len(c), len(l)
	return out
}

// New builds a Topology from CPUs (for example a literal machine in a test or
// a topology rebuilt from a checkpoint). It checks that ids are unique and in
// range and that siblings exist, and fills in missing Siblings from Core.
func New(cpus []CPU, nodes []NUMANode, llc []CacheGroup, irqs []IRQ) (*Topology, error) {
	t := &Topology{CPUs: append([]CPU(nil), cpus...), Nodes: nodes, LLCGroups: llc, IRQs: irqs, Reserved: cpuset.New()}
	if err := t.finish(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Topology) finish() error {
	sort.Slice(t.CPUs, func(i, j int) bool { return t.CPUs[i].ID < t.CPUs[j].ID })
	t.index = make(map[int]int, len(t.CPUs))
	byCore := map[int][]int{}
	for i, c := range t.CPUs {
		if c.ID < 0 || c.ID > MaxCPUID {
			return fmt.Errorf("%w: cpu id %d out of range", ErrParse, c.ID)
		}
		if _, dup := t.index[c.ID]; dup {
			return fmt.Errorf("%w: cpu %d listed twice", ErrParse, c.ID)
		}
		t.index[c.ID] = i
		if c.Core != Unknown {
			byCore[c.Core] = append(byCore[c.Core], c.ID)
		}
	}
	for i := range t.CPUs {
		c := &t.CPUs[i]
		if c.Siblings.IsEmpty() {
			if c.Core != Unknown {
				c.Siblings = cpuset.New(byCore[c.Core]...)
			} else {
				c.Siblings = cpuset.New(c.ID)
			}
		}
	}
	sort.Slice(t.Nodes, func(i, j int) bool { return t.Nodes[i].ID < t.Nodes[j].ID })
	sort.Slice(t.LLCGroups, func(i, j int) bool { return t.LLCGroups[i].ID < t.LLCGroups[j].ID })
	sort.Slice(t.IRQs, func(i, j int) bool { return t.IRQs[i].Number < t.IRQs[j].Number })
	if t.Reserved.IsEmpty() {
		t.Reserved = cpuset.New()
	}
	t.ai = buildAllocIndex(t)
	return nil
}

// Flat is a machine of which only the CPU ids are known: every CPU online,
// a core of its own, one socket, one NUMA node. The agent allocates on it
// when discovery failed, so the allocation rules (cap, sellable, explicit
// sets) stay those of Allocate.
func Flat(cpus cpuset.CPUSet) (*Topology, error) {
	list := make([]CPU, 0, cpus.Size())
	for i, id := range cpus.List() {
		list = append(list, CPU{ID: id, Online: true, Core: i, RawCoreID: Unknown, Socket: 0, RawPackageID: Unknown, Die: Unknown, NUMA: 0, L3: Unknown})
	}
	return New(list, []NUMANode{{ID: 0, CPUs: cpus}}, nil, nil)
}
