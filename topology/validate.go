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
		if req.NUMA == NUMASpread {
			// Each node's share may end in a partial core.
			allowed = max(allowed, len(numaSpan(topo, set)))
		}
		if len(split) > allowed {
			return cpuset.New(), refuse(ReasonSplitsCore, cpuset.New(split...), "full-cores: %d cores split (first CPU of each listed), %d allowed", len(split), allowed)
		}
	case Spread:
		for _, c := range ix.cores {
			var in []int
			mine := false
			for _, i := range c.cpus {
				id := topo.CPUs[i].ID
				mine = mine || set.Contains(id)
				if set.Contains(id) || st.Taken.Contains(id) {
					in = append(in, id)
				}
			}
			if mine && len(in) > 1 {
				return cpuset.New(), refuse(ReasonSharesCore, cpuset.New(in...), "spread: two exclusive threads on one core")
			}
		}
	}
	nodes := numaSpan(topo, set)
	switch req.NUMA {
	case NUMASingle:
		if len(nodes) > 1 {
			return cpuset.New(), refuse(ReasonNUMASpan, set, "spans %d NUMA nodes, policy single", len(nodes))
		}
	case NUMAPreferSingle:
		// Allocate keeps a request in one node whenever one holds it;
		// beyond that it trades nodes for whole cores, so only the
		// one-node case is a rule.
		m := buildMasks(topo, st)
		if req.IOQueues == IOAvoid && set.Intersection(coresOf(topo, topo.IOCPUs())).IsEmpty() {
			// A set off the IO cores is judged among the CPUs Allocate's
			// first attempt would consider.
			for i, onIO := range ix.ioCore {
				m.free[i] = m.free[i] && !onIO
			}
		}
		if len(nodes) > 1 && fitsOneNode(topo, ix, m, req, n) {
			return cpuset.New(), refuse(ReasonNUMASpan, set, "spans %d NUMA nodes while one node has %d free CPUs", len(nodes), n)
		}
	}
	if req.IOQueues == IOAvoid {
		// The rule is Allocate's first attempt: if a choice off the cores
		// serving IO queues exists, a set on them is refused.
		io := coresOf(topo, topo.IOCPUs())
		if hit := set.Intersection(io); !hit.IsEmpty() {
			m := buildMasks(topo, st)
			p := newPicker(topo, ix, m, req)
			for i, onIO := range ix.ioCore {
				p.free[i] = p.free[i] && !onIO
			}
			if alt, err := p.allocate(n); err == nil {
				return cpuset.New(), refuse(ReasonIOQueueCPU, hit, "on cores serving IO-queue interrupts while %s would avoid them", alt)
			}
		}
	}
	return set, nil
}

// fitsOneNode reports whether one NUMA node can give n CPUs under the
// request's core policy, as Allocate counts them.
func fitsOneNode(topo *Topology, ix *allocIndex, m masks, req Request, n int) bool {
	p := newPicker(topo, ix, m, req)
	all := make([]int, len(ix.cores))
	for i := range all {
		all[i] = i
	}
	for _, g := range p.groupBy(all, func(c coreInfo) int { return c.numa }) {
		if g.total >= n {
			return true
		}
	}
	return false
}

func numaSpan(topo *Topology, set cpuset.CPUSet) map[int]bool {
	nodes := map[int]bool{}
	for _, id := range set.UnsortedList() {
		c, _ := topo.CPU(id)
		nodes[c.NUMA] = true
	}
	return nodes
}
