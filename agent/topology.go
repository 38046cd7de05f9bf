package agent

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/topology"
)

// ErrNoFit: the topology constraints of the request (NUMA single, the
// bind-all policy) cannot be met.
var ErrNoFit = fmt.Errorf("%w: topology constraints cannot be met", ErrRefused)

// topologyAllocator picks exclusive CPUs with the topology package: whole
// cores, NUMA and L3 locality, away from IO-queue interrupts. The pool
// policy keeps the cap and the taken sets; the allocator only sees which
// CPUs are available, so everything else counts as taken for it.
type topologyAllocator struct {
	topo *topology.Topology
	// ioAny: discovery found no IRQs (/proc/interrupts absent, masked or
	// unreadable), so no CPU is known to serve IO queues; every io-queues
	// policy is treated as any (logged once at start).
	ioAny bool
}

// noIRQReason names why the topology has no IRQs, from the discovery
// warnings.
func noIRQReason(warns []topology.Warning) string {
	for _, w := range warns {
		if strings.HasSuffix(w.Path, "interrupts") {
			return w.String()
		}
	}
	return "the interrupts file lists no IRQs"
}

func (a topologyAllocator) Allocate(available cpuset.CPUSet, n int, o AllocOptions) (cpuset.CPUSet, error) {
	if a.ioAny {
		o.IOQueues = string(topology.IOAny)
	}
	if o.Policy == string(topology.BindAll) {
		return cpuset.New(), fmt.Errorf("%w: cpu-policy bind-all grants no exclusive cores; use %s: true for all non-reserved CPUs", ErrNoFit, AnnotationReleaseIsolation)
	}
	st := topology.State{Taken: a.topo.Online().Difference(available), CapRatio: 1} // the policy enforces the cap
	got, err := topology.Allocate(a.topo, st, topology.Request{
		CPUs: n, Policy: topology.Policy(o.Policy), NUMA: topology.NUMAPolicy(o.NUMA), IOQueues: topology.IOPolicy(o.IOQueues),
	})
	if err != nil {
		var ae *topology.AllocError
		if errors.As(err, &ae) && ae.Reason == topology.ReasonNotEnoughCPUs {
			return cpuset.New(), fmt.Errorf("%w: %v", ErrInsufficientCPUs, err)
		}
		return cpuset.New(), fmt.Errorf("%w: %v", ErrNoFit, err)
	}
	if !got.IsSubsetOf(available) || got.Size() != n {
		// Never trust a picker with the no-double-allocation rule.
		return cpuset.New(), fmt.Errorf("%w: allocator returned %s for %d of %s", ErrNoFit, got, n, available)
	}
	return got, nil
}

// topologySummary is the topology part of the local API.
func topologySummary(t *topology.Topology) string {
	if t == nil {
		return ""
	}
	c := t.Counts()
	return fmt.Sprintf("%d cpus (%d online), %d sockets, %d NUMA nodes, %d cores, %d L3 groups, %d IO-queue cpus %s",
		c.CPUs, c.Online, c.Sockets, c.NUMANodes, c.Cores, c.LLCGroups, t.IOCPUs().Size(), t.IOCPUs())
}
