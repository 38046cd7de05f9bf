//go:build linux

package topology

import (
	"path/filepath"

	"k8s.io/utils/cpuset"
)

// Discover reads the machine's topology from sysRoot (where sysfs is
// mounted, "/sys" in production) and procRoot (where procfs is mounted,
// "/proc"). It returns an error for unreadable or garbled required files and
// a degraded topology plus warnings when optional sources are missing.
func Discover(sysRoot, procRoot string) (*Topology, []Warning, error) {
	return DiscoverWith(Roots{Sys: sysRoot, Proc: procRoot})
}

// Roots are where Discover reads.
type Roots struct {
	Sys, Proc string
	// Interrupts is the interrupts file when it is not <Proc>/interrupts:
	// an unprivileged container sees its runtime's masked copy there, so a
	// node agent mounts the host's file alone (and reads irq/ from Proc).
	Interrupts string
}

// DiscoverWith is Discover with every root given.
func DiscoverWith(r Roots) (*Topology, []Warning, error) {
	sysRoot, procRoot := r.Sys, r.Proc
	interrupts := r.Interrupts
	if interrupts == "" {
		interrupts = filepath.Join(procRoot, "interrupts")
	}
	cpus, warns, err := readCPUs(sysRoot)
	if err != nil {
		return nil, nil, err
	}
	index := make(map[int]int, len(cpus))
	for i, c := range cpus {
		index[c.ID] = i
	}
	assignCores(cpus)
	nodes, w, err := readNodes(sysRoot, cpus, index)
	if err != nil {
		return nil, nil, err
	}
	warns = append(warns, w...)
	llc, w, err := readLLC(sysRoot, cpus)
	if err != nil {
		return nil, nil, err
	}
	warns = append(warns, w...)
	iso, err := readIsolated(sysRoot, procRoot)
	if err != nil {
		return nil, nil, err
	}
	var onlineIDs []int
	for i := range cpus {
		cpus[i].Isolated = iso.Contains(cpus[i].ID)
		if cpus[i].Online {
			onlineIDs = append(onlineIDs, cpus[i].ID)
		}
	}
	irqs, w, err := readIRQs(procRoot, interrupts)
	if err != nil {
		return nil, nil, err
	}
	warns = append(warns, w...)
	mq, err := readBlockMQ(sysRoot)
	if err != nil {
		return nil, nil, err
	}
	t := &Topology{CPUs: cpus, Nodes: nodes, LLCGroups: llc, IRQs: irqs, BlockMQ: mq, Reserved: cpuset.New()}
	online := cpuset.New(onlineIDs...)
	if isoOnline := iso.Intersection(online); !isoOnline.IsEmpty() {
		t.Reserved = online.Difference(isoOnline)
	}
	if err := t.finish(); err != nil {
		return nil, nil, err
	}
	return t, warns, nil
}

// DiscoverRoot reads a captured tree (or "/") holding sys/ and proc/.
func DiscoverRoot(root string) (*Topology, []Warning, error) {
	return Discover(filepath.Join(root, "sys"), filepath.Join(root, "proc"))
}

// assignCores gives every online CPU a machine-unique socket and core id,
// dense and in order of each group's lowest CPU id, from the kernel's
// sibling lists: the CPUs that a CPU's core_cpus_list (thread_siblings_list)
// names share its core, and those its package_cpus_list (core_siblings_list)
// names share its package. The lists are what the scheduler, lscpu and
// sched_setaffinity users see; core_id and physical_package_id stay labels
// (RawCoreID, RawPackageID), because they repeat per package, per node or
// per cluster, and differ between the threads of an AMD compute unit or a
// VMware guest's virtual core. Only a CPU without a list falls back to its
// id, within its package (and die, cluster, book, drawer).
//
// Lists are united, not trusted one by one: a CPU that another names as a
// sibling shares its core even if its own list omits it, so an
// inconsistent tree can only make cores larger, never let the full-cores
// policy split one. Offline CPUs and CPUs without a topology directory in
// a list are ignored. A core never spans two packages: packages holding
// threads of one core are united. Siblings is then rewritten to the CPUs
// of the core.
func assignCores(cpus []CPU) {
	index := make(map[int]int, len(cpus)) // CPU id -> position, CPUs with topology only
	for i, c := range cpus {
		if c.Online && c.hasTopology {
			index[c.ID] = i
		}
	}
	pkg, core := newUnionFind(len(cpus)), newUnionFind(len(cpus))
	hasPkg, hasCore := make([]bool, len(cpus)), make([]bool, len(cpus))
	uniteLevel(cpus, index, pkg, hasPkg, func(c *CPU) cpuset.CPUSet { return c.pkgCPUs },
		func(_ int, c *CPU) (int, bool) { return c.RawPackageID, c.RawPackageID != Unknown })
	type coreKey struct{ pkg, die, cluster, book, drawer, core int }
	uniteLevel(cpus, index, core, hasCore, func(c *CPU) cpuset.CPUSet { return c.Siblings },
		func(i int, c *CPU) (coreKey, bool) {
			p := Unknown
			if hasPkg[i] {
				p = pkg.find(i)
			}
			return coreKey{p, c.Die, c.cluster, c.book, c.drawer, c.RawCoreID}, c.RawCoreID != Unknown
		})
	firstInCore := map[int]int{} // core root -> a member with a package
	for i := range cpus {
		if !hasCore[i] || !hasPkg[i] {
			continue
		}
		if j, ok := firstInCore[core.find(i)]; ok {
			pkg.union(i, j)
		} else {
			firstInCore[core.find(i)] = i
		}
	}
	sockets, cores := map[int]int{}, map[int]int{}
	members := map[int][]int{}
	for i := range cpus {
		c := &cpus[i]
		if hasPkg[i] {
			r := pkg.find(i)
			if _, ok := sockets[r]; !ok {
				sockets[r] = len(sockets)
			}
			c.Socket = sockets[r]
		}
		if hasCore[i] {
			r := core.find(i)
			if _, ok := cores[r]; !ok {
				cores[r] = len(cores)
			}
			c.Core = cores[r]
			members[c.Core] = append(members[c.Core], c.ID)
		}
	}
	for i := range cpus {
		if cpus[i].Core != Unknown {
			cpus[i].Siblings = cpuset.New(members[cpus[i].Core]...)
		} else {
			cpus[i].Siblings = cpuset.New(cpus[i].ID)
		}
	}
}

// uniteLevel unites in uf the CPUs of index (CPU id -> position) that share
// one package or core, by the one rule of both levels: a CPU's list when
// it gives one, else its raw id (key; false: none), united with the first
// CPU of the same key. has marks the CPUs that gave either.
func uniteLevel[K comparable](cpus []CPU, index map[int]int, uf unionFind, has []bool,
	list func(c *CPU) cpuset.CPUSet, key func(i int, c *CPU) (K, bool)) {
	first := map[K]int{}
	for i := range cpus {
		c := &cpus[i]
		if _, ok := index[c.ID]; !ok {
			continue
		}
		if l := list(c); !l.IsEmpty() {
			has[i] = true
			for _, id := range l.UnsortedList() {
				if j, ok := index[id]; ok {
					uf.union(i, j)
				}
			}
			continue
		}
		k, ok := key(i, c)
		if !ok {
			continue
		}
		has[i] = true
		if j, ok := first[k]; ok {
			uf.union(i, j)
		} else {
			first[k] = i
		}
	}
}

// unionFind partitions positions 0..n-1 (path halving, union by index so
// that the root of a group is its lowest position).
type unionFind []int

func newUnionFind(n int) unionFind {
	uf := make(unionFind, n)
	for i := range uf {
		uf[i] = i
	}
	return uf
}

func (uf unionFind) find(i int) int {
	for uf[i] != i {
		uf[i] = uf[uf[i]]
		i = uf[i]
	}
	return i
}

func (uf unionFind) union(i, j int) {
	a, b := uf.find(i), uf.find(j)
	if a == b {
		return
	}
	if b < a {
		a, b = b, a
	}
	uf[b] = a
}
