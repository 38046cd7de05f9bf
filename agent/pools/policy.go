package pools

import (
	"errors"
	"fmt"

	"k8s.io/utils/cpuset"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/topology"
)

// Refusals: an exclusive request that is well-formed but cannot be granted.
// Each wraps ErrRefused; Reason gives the short name used in the status
// annotation, the Event and the refusals metric.
var (
	ErrRefused          = errors.New("exclusive request refused")
	ErrTooManyCPUs      = fmt.Errorf("%w: more CPUs than the node can allocate", ErrRefused)
	ErrCapExceeded      = fmt.Errorf("%w: exclusive cap exceeded", ErrRefused)
	ErrInsufficientCPUs = fmt.Errorf("%w: not enough free CPUs", ErrRefused)
	ErrCPUTaken         = fmt.Errorf("%w: cpus already held by another pod", ErrRefused)
	ErrReservedOverlap  = fmt.Errorf("%w: cpus overlap the reserved set", ErrRefused)
	ErrCPUOffline       = fmt.Errorf("%w: cpus not on this node", ErrRefused)
	ErrNoCPUDemand      = fmt.Errorf("%w: no cpu count: set cgpilot.io/cpus or a CPU limit or request", ErrRefused)
	ErrNoFit            = fmt.Errorf("%w: topology constraints cannot be met", ErrRefused)
)

// ErrCgroupWrite is wrapped by every failed cgroup write the pools report.
var ErrCgroupWrite = errors.New("cgroup write failed")

// Reason returns the wire reason (local.Reason*) of an error.
func Reason(err error) string {
	for _, r := range []struct {
		err    error
		reason string
	}{
		{ErrTooManyCPUs, local.ReasonTooManyCPUs}, {ErrCapExceeded, local.ReasonCapExceeded}, {ErrInsufficientCPUs, local.ReasonInsufficientCPUs},
		{ErrCPUTaken, local.ReasonCPUsTaken}, {ErrReservedOverlap, local.ReasonReservedOverlap}, {ErrCPUOffline, local.ReasonCPUsNotOnNode},
		{ErrNoCPUDemand, local.ReasonNoCPUCount}, {ErrNoFit, local.ReasonTopologyNoFit}, {local.ErrInvalidAnnotation, local.ReasonInvalidAnnotation},
		{ErrCheckpointWrite, local.ReasonCheckpointWrite}, {ErrCgroupWrite, local.ReasonCgroupWrite},
	} {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return local.ReasonError
}

// refusal maps the allocator's reason onto the pools' refusals.
func refusal(err error, n, allocatable int) error {
	var ae *topology.AllocError
	if !errors.As(err, &ae) {
		return err
	}
	var kind error
	switch ae.Reason {
	case topology.ReasonNotEnoughCPUs:
		kind = ErrInsufficientCPUs
		if n > allocatable {
			kind = ErrTooManyCPUs
		}
	case topology.ReasonOverCap, topology.ReasonNotSellable:
		kind = ErrCapExceeded
	case topology.ReasonTakenCPU:
		kind = ErrCPUTaken
	case topology.ReasonReservedCPU:
		kind = ErrReservedOverlap
	case topology.ReasonUnknownCPU, topology.ReasonOfflineCPU:
		kind = ErrCPUOffline
	default:
		kind = ErrNoFit
	}
	return fmt.Errorf("%w: %v", kind, ae)
}

// exclusiveRequest is one pod's exclusive demand.
type exclusiveRequest struct {
	UID, Namespace, Name string
	CPUs                 int            // wanted count (always set)
	CPUSet               *cpuset.CPUSet // explicit set
	Policy, NUMA, IO     string         // allocator options; "" = defaults
	ReleaseIsolation     bool
}

// policy decides exclusive sets with package topology, which owns every
// rule (cap, sellable, core, NUMA and IO-queue placement, explicit-set
// validation). It holds no state: each method receives the state and is
// idempotent (the same request twice changes nothing).
type policy struct {
	topo *topology.Topology
	// outside are online CPUs of topo the pools do not manage (a smaller
	// configured set): never allocated, like reserved ones.
	outside cpuset.CPUSet
	// capRatio of the allocatable CPUs that exclusive CPUs may take.
	capRatio float64
	// overcommit > 0 turns the sellable rule on (Config.OvercommitRatio).
	overcommit float64
}

// topoState is the allocator's view of s for pod uid: every CPU held by
// someone else is taken (the kubelet's static ones too: they are not
// shared either, so they count against the cap).
func (p policy) topoState(s Reader, uid string, shared []int64) topology.State {
	taken := s.KubeletTaken()
	for _, a := range s.Assignments() {
		if a.UID != uid {
			taken = taken.Union(a.CPUs)
		}
	}
	ratio := p.capRatio
	if ratio == 0 {
		ratio = topology.NoExclusiveCap
	}
	st := topology.State{Taken: taken, Reserved: s.Reserved().Union(p.outside), CapRatio: ratio}
	if p.overcommit > 0 {
		st.SharedMilliCPUs, st.Overcommit = shared, p.overcommit
	}
	return st
}

// limits are the node's bounds on exclusive CPUs for the summary.
func (p policy) limits(s Reader, shared []int64) topology.Limits {
	l, err := topology.ComputeLimits(p.topo, p.topoState(s, "", shared))
	if err != nil {
		return topology.Limits{}
	}
	return l
}

// Allocate gives the pod its exclusive set, growing or shrinking an
// existing one in place (kept CPUs stay), and records it in s. On error s
// is unchanged. shared are the shared pods' sizes in millicores (for the
// sellable rule).
func (p policy) Allocate(s state, r exclusiveRequest, shared []int64) (cpuset.CPUSet, error) {
	if r.Policy == string(topology.BindAll) {
		return cpuset.New(), fmt.Errorf("%w: cpu-policy bind-all grants no exclusive cores; use %s: true for the shared pool and the pod's own CPUs", ErrNoFit, local.AnnotationReleaseIsolation)
	}
	allocatable := s.All().Difference(s.Reserved()).Size()
	if r.CPUSet == nil && r.CPUs > allocatable {
		return cpuset.New(), fmt.Errorf("%w: want %d, node allocates %d (%s)", ErrTooManyCPUs, r.CPUs, allocatable, s.All().Difference(s.Reserved()))
	}
	cur, had := s.Assignment(r.UID)
	req := topology.Request{CPUs: r.CPUs, Policy: topology.Policy(r.Policy), NUMA: topology.NUMAPolicy(r.NUMA), IOQueues: topology.IOPolicy(r.IO)}
	switch {
	case r.CPUSet != nil:
		req.Explicit, req.CPUs = *r.CPUSet, r.CPUSet.Size()
	case had:
		req.Keep = cur.CPUs
	}
	want, err := topology.Allocate(p.topo, p.topoState(s, r.UID, shared), req)
	if err != nil {
		return cpuset.New(), refusal(err, r.CPUs, allocatable)
	}
	if !want.IsSubsetOf(s.All()) || want.Size() != req.CPUs {
		// Never trust a picker with the no-double-allocation rule.
		return cpuset.New(), fmt.Errorf("%w: allocator returned %s for %d of %s", ErrNoFit, want, req.CPUs, s.All())
	}
	next := Assignment{UID: r.UID, Namespace: r.Namespace, Name: r.Name, CPUs: want, ReleaseIsolation: r.ReleaseIsolation}
	if had && cur.CPUs.Equals(next.CPUs) && cur.ReleaseIsolation == next.ReleaseIsolation && cur.Name == next.Name && cur.Namespace == next.Namespace {
		return want, nil
	}
	if err := s.setAssignment(next); err != nil {
		return cpuset.New(), err
	}
	return want, nil
}

// Release frees the pod's CPUs. Releasing an unknown pod is a no-op.
func (p policy) Release(s state, uid string) error {
	return s.deleteAssignment(uid)
}
