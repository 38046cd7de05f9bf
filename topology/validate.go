package topology

import (
	"k8s.io/utils/cpuset"
)

// validateExplicit checks a cpuset chosen elsewhere against the rules
// Allocate applies, and names the first rule it breaks.
func validateExplicit(topo *Topology, st State, reserved cpuset.CPUSet, lim Limits, req Request) (cpuset.CPUSet, error) {
	set := req.Explicit
	n := set.Size()
	if req.CPUs != 0 && req.CPUs != n {
		return cpuset.New(), refuse(ReasonCountMismatch, set, "%d CPUs requested, explicit set has %d", req.CPUs, n)
	}
	if unknown := set.Difference(topo.AllCPUs()); !unknown.IsEmpty() {
		return cpuset.New(), refuse(ReasonUnknownCPU, unknown, "not on this machine")
	}
	if off := set.Difference(topo.Online()); !off.IsEmpty() {
		return cpuset.New(), refuse(ReasonOfflineCPU, off, "offline")
	}
	if r := set.Intersection(reserved); !r.IsEmpty() {
		return cpuset.New(), refuse(ReasonReservedCPU, r, "reserved")
	}
	if tk := set.Intersection(st.Taken); !tk.IsEmpty() {
		return cpuset.New(), refuse(ReasonTakenCPU, tk, "already granted to another instance")
	}
	free := topo.Online().Difference(reserved).Difference(st.Taken)
	if req.Policy == BindAll {
		if !set.Equals(free) {
			return cpuset.New(), refuse(ReasonCountMismatch, free.Difference(set), "bind-all must cover every free allocatable CPU")
		}
		return set, nil
	}
	if err := checkLimits(lim, n); err != nil {
		return cpuset.New(), err
	}
	ix := topo.allocIndex()
	switch req.Policy {
	case FullCores:
		// A core is split when the set holds some of its threads and leaves
		// another free one out. A count that is not a multiple of the core
		// size may split one core.
		var split []int
		for _, c := range ix.cores {
			in, outFree := 0, 0
			for _, i := range c.cpus {
				id := topo.CPUs[i].ID
				if set.Contains(id) {
					in++
				} else if free.Contains(id) {
					outFree++
				}
			}
			if in > 0 && outFree > 0 {
				split = append(split, topo.CPUs[c.cpus[0]].ID)
			}
		}
		allowed := 0
		if n%ix.smt != 0 {
			allowed = 1
		}
		if len(split) > allowed {
			return cpuset.New(), refuse(ReasonSplitsCore, cpuset.New(split...), "full-cores: %d cores split (first CPU of each listed), %d allowed", len(split), allowed)
		}
	case Spread:
		for _, c := range ix.cores {
			var in []int
			for _, i := range c.cpus {
				if id := topo.CPUs[i].ID; set.Contains(id) || st.Taken.Contains(id) {
					in = append(in, id)
				}
			}
			if len(in) > 1 {
				return cpuset.New(), refuse(ReasonSharesCore, cpuset.New(in...), "spread: two exclusive threads on one core")
			}
		}
	}
	nodes := map[int]bool{}
	for _, id := range set.UnsortedList() {
		c, _ := topo.CPU(id)
		nodes[c.NUMA] = true
	}
	switch req.NUMA {
	case NUMASingle:
		if len(nodes) > 1 {
			return cpuset.New(), refuse(ReasonNUMASpan, set, "spans %d NUMA nodes, policy single", len(nodes))
		}
	case NUMAPreferSingle:
		if least := fewestNodes(topo, free, n); len(nodes) > least {
			return cpuset.New(), refuse(ReasonNUMASpan, set, "spans %d NUMA nodes where %d would do", len(nodes), least)
		}
	}
	if req.IOQueues == IOAvoid {
		io := topo.IOCPUs()
		if hit := set.Intersection(io); !hit.IsEmpty() && free.Difference(io).Size() >= n {
			return cpuset.New(), refuse(ReasonIOQueueCPU, hit, "serve IO-queue interrupts while %d other CPUs are free", free.Difference(io).Size())
		}
	}
	return set, nil
}

// fewestNodes is the least number of NUMA nodes whose free CPUs hold n.
func fewestNodes(topo *Topology, free cpuset.CPUSet, n int) int {
	count := map[int]int{}
	for _, id := range free.UnsortedList() {
		c, _ := topo.CPU(id)
		count[c.NUMA]++
	}
	sizes := make([]int, 0, len(count))
	for _, v := range count {
		sizes = append(sizes, v)
	}
	// Largest first.
	for i := range sizes {
		for j := i + 1; j < len(sizes); j++ {
			if sizes[j] > sizes[i] {
				sizes[i], sizes[j] = sizes[j], sizes[i]
			}
		}
	}
	k, sum := 0, 0
	for _, s := range sizes {
		if sum >= n {
			break
		}
		sum += s
		k++
	}
	return max(k, 1)
}
