package topology

import (
	"testing"

	"k8s.io/utils/cpuset"
)

// literalMachine builds a topology from per-CPU functions, the way the
// kubelet's CPU manager tests write machines as literals.
func literalMachine(t testing.TB, n int, core, numa, llc func(id int) int) *Topology {
	t.Helper()
	cpus := make([]CPU, n)
	for id := range cpus {
		cpus[id] = CPU{ID: id, Online: true, Core: core(id), RawCoreID: core(id), Socket: numa(id), RawPackageID: numa(id),
			Die: Unknown, NUMA: numa(id), L3: llc(id)}
	}
	topo, err := New(cpus, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// topoDualSocketHT is the kubelet's 12-CPU machine: sockets (= NUMA nodes,
// = L3 groups) interleave, even CPUs on socket 0; siblings are N and N+6.
func topoDualSocketHT(t testing.TB) *Topology {
	return literalMachine(t, 12,
		func(id int) int { return id % 6 },
		func(id int) int { return id % 2 },
		func(id int) int { return id % 2 })
}

// topoSingleSocketHT: 8 CPUs, 4 cores, siblings N and N+4, one node.
func topoSingleSocketHT(t testing.TB) *Topology {
	return literalMachine(t, 8,
		func(id int) int { return id % 4 },
		func(int) int { return 0 },
		func(int) int { return 0 })
}

// topoDualUncoreCacheSingleSocketHT: 16 CPUs, 8 cores (siblings N, N+8),
// one node, two L3 groups of 4 cores.
func topoDualUncoreCacheSingleSocketHT(t testing.TB) *Topology {
	return literalMachine(t, 16,
		func(id int) int { return id % 8 },
		func(int) int { return 0 },
		func(id int) int { return id % 8 / 4 })
}

// topoDualSocketMultiNumaPerSocketHT: the kubelet's dual Xeon Gold 6230 with
// SNC2: node k holds 10k..10k+9 and 40+10k..; siblings N and N+40; one L3
// per socket (nodes 0-1, 2-3).
func topoDualSocketMultiNumaPerSocketHT(t testing.TB) *Topology {
	return literalMachine(t, 80,
		func(id int) int { return id % 40 },
		func(id int) int { return id % 40 / 10 },
		func(id int) int { return id % 40 / 20 })
}

// topoDualSocketMultiNumaPerSocketHTLarge: the kubelet's dual EPYC 7742 with
// NPS4: 256 CPUs, node k holds 16k..16k+15 and 128+16k..; siblings N and
// N+128; one L3 (CCX) per 4 cores.
func topoDualSocketMultiNumaPerSocketHTLarge(t testing.TB) *Topology {
	return literalMachine(t, 256,
		func(id int) int { return id % 128 },
		func(id int) int { return id % 128 / 16 },
		func(id int) int { return id % 128 / 4 })
}

// withIRQs returns topo with queue interrupts landing on the given CPUs.
func withIRQs(t testing.TB, topo *Topology, queues map[string]cpuset.CPUSet) *Topology {
	t.Helper()
	var irqs []IRQ
	n := 100
	for name, cpus := range queues {
		q := IRQ{Number: n, Name: name, SMPAffinity: cpus, EffectiveAffinity: cpus, HasEffective: true}
		q.Kind, q.Queue = classifyIRQ(name)
		irqs = append(irqs, q)
		n++
	}
	out, err := New(topo.CPUs, topo.Nodes, topo.LLCGroups, irqs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
