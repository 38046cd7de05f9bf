//go:build linux

package topology

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/cgpilot/cgpilot/test/tier"
	"k8s.io/utils/cpuset"
)

// firstFit is the baseline: the first n free CPUs in id order, with no
// topology at all, on the same per-position masks Allocate starts from.
func firstFit(topo *Topology, st State, n int) cpuset.CPUSet {
	m := buildMasks(topo, st)
	ids := make([]int, 0, n)
	for i, f := range m.free {
		if f && len(ids) < n {
			ids = append(ids, topo.CPUs[i].ID)
		}
	}
	if len(ids) < n {
		return cpuset.New()
	}
	return cpuset.New(ids...)
}

// busyState takes about a quarter of the CPUs, as a node with running
// exclusive pods would have.
func busyState(topo *Topology) State {
	rng := rand.New(rand.NewPCG(7, 7))
	var taken []int
	for _, id := range topo.Online().List() {
		if rng.IntN(4) == 0 {
			taken = append(taken, id)
		}
	}
	return State{Taken: cpuset.New(taken...), Reserved: cpuset.New(0)}
}

func benchMachines(b *testing.B) map[string]*Topology {
	m := map[string]*Topology{"epyc7742-literal-256": topoDualSocketMultiNumaPerSocketHTLarge(b)}
	dir := tier.SharedData(b, "hwloc-linux-sysfs")
	m["hwloc-256ppc-8n8s4t"] = discoverArchive(b, filepath.Join(dir, "tarballs", "256ppc-8n8s4t.tar.bz2"))
	// Every CPU of this node serves NVMe queues, so IO avoid always takes
	// its fallback path (two attempts, least-loaded cores).
	nto := tier.SharedData(b, "nto-mustgather-irq-sysinfo")
	m["nto-master-112-io"] = discoverArchive(b, filepath.Join(nto, "bare-metal-master.internal.sysinfo.tgz"))
	return m
}

// BenchmarkAllocate measures one 8-CPU allocation (full-cores,
// prefer-single, IO avoid) on the largest real machine in the shared data
// (POWER7, 256 CPUs, SMT4, 8 NUMA nodes) and on the kubelet's 256-CPU EPYC
// literal, with a quarter of the CPUs taken; BenchmarkFirstFit is the
// baseline on the same states.
func BenchmarkAllocate(b *testing.B) {
	for name, topo := range benchMachines(b) {
		st := busyState(topo)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Allocate(topo, st, Request{CPUs: 8}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkFirstFit(b *testing.B) {
	for name, topo := range benchMachines(b) {
		st := busyState(topo)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if firstFit(topo, st, 8).Size() != 8 {
					b.Fatal("first fit failed")
				}
			}
		})
	}
}
