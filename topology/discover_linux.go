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
// dense and in order of each group's lowest CPU id.
//
// A socket is (physical_package_id, core_siblings_list). A core is the
// CPUs that list each other as thread siblings and share core_id within the
// same socket, die, cluster, book and drawer: core_id alone repeats per
// socket and, on multi-node AMD packages, per node; thread_siblings alone
// pairs the two cores of an AMD Bulldozer compute unit (hwloc and cadvisor,
// hence the kubelet, count those as two cores). Siblings is then rewritten
// to the CPUs of the core.
func assignCores(cpus []CPU) {
	type socketKey struct {
		pkg  int
		cpus string
	}
	type coreKey struct {
		socket, die, cluster, book, drawer, core int
		siblings                                 string
	}
	sockets := map[socketKey]int{}
	cores := map[coreKey]int{}
	members := map[int][]int{}
	for i := range cpus {
		c := &cpus[i]
		if !c.Online {
			continue
		}
		if c.RawPackageID != Unknown || c.pkgCPUs != "" {
			k := socketKey{c.RawPackageID, c.pkgCPUs}
			id, ok := sockets[k]
			if !ok {
				id = len(sockets)
				sockets[k] = id
			}
			c.Socket = id
		}
		if c.RawCoreID == Unknown && c.Siblings.IsEmpty() {
			continue
		}
		k := coreKey{c.Socket, c.Die, c.cluster, c.book, c.drawer, c.RawCoreID, c.Siblings.String()}
		id, ok := cores[k]
		if !ok {
			id = len(cores)
			cores[k] = id
		}
		c.Core = id
		members[id] = append(members[id], c.ID)
	}
	for i := range cpus {
		if cpus[i].Core != Unknown {
			cpus[i].Siblings = cpuset.New(members[cpus[i].Core]...)
		} else {
			cpus[i].Siblings = cpuset.New(cpus[i].ID)
		}
	}
}
