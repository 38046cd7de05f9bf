package agent

import (
	"errors"
	"fmt"
	"math"

	"k8s.io/utils/cpuset"
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
)

// Reason returns the short machine-readable reason of an error.
func Reason(err error) string {
	for _, r := range []struct {
		err    error
		reason string
	}{
		{ErrTooManyCPUs, "TooManyCPUs"}, {ErrCapExceeded, "CapExceeded"}, {ErrInsufficientCPUs, "InsufficientCPUs"},
		{ErrCPUTaken, "CPUsTaken"}, {ErrReservedOverlap, "ReservedOverlap"}, {ErrCPUOffline, "CPUsNotOnNode"},
		{ErrNoCPUDemand, "NoCPUCount"}, {ErrNoFit, "TopologyNoFit"}, {ErrInvalidAnnotation, "InvalidAnnotation"}, {ErrCheckpointWrite, "CheckpointWriteFailed"},
	} {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return "Error"
}

// AllocOptions are the topology options of an exclusive request.
type AllocOptions struct {
	Policy   string // full-cores | spread | bind-all; "" = allocator default
	NUMA     string
	IOQueues string
}

// cpuAllocator picks n CPUs out of available. Implementations are pure.
type cpuAllocator interface {
	Allocate(available cpuset.CPUSet, n int, opts AllocOptions) (cpuset.CPUSet, error)
}

// firstFit takes the lowest CPU ids: the allocator used when no topology is
// known (tests, or a discovery failure reported at start).
type firstFit struct{}

func (firstFit) Allocate(available cpuset.CPUSet, n int, _ AllocOptions) (cpuset.CPUSet, error) {
	if n > available.Size() {
		return cpuset.New(), fmt.Errorf("%w: want %d, %d free", ErrInsufficientCPUs, n, available.Size())
	}
	return cpuset.New(available.List()[:n]...), nil
}

// exclusiveRequest is one pod's validated exclusive demand.
type exclusiveRequest struct {
	UID, Namespace, Name string
	CPUs                 int            // wanted count (always set)
	CPUSet               *cpuset.CPUSet // explicit set, validated here
	Opts                 AllocOptions
	ReleaseIsolation     bool
}

// policy decides exclusive sets. It holds no state: each method receives the
// state and is idempotent (the same request twice changes nothing).
type policy struct {
	alloc cpuAllocator
	// capFraction of the allocatable CPUs that exclusive pods may hold.
	capFraction float64
	// sellable, when set, returns the sellable-rule limit given the
	// allocatable count (see Config.OvercommitRatio); nil = rule off.
	sellable func(allocatable int) int
}

// cap is the largest number of exclusive CPUs for this state.
func (p policy) cap(s PoolReader) int {
	allocatable := s.All().Difference(s.Reserved()).Size()
	c := int(math.Floor(float64(allocatable)*p.capFraction + 1e-9))
	if p.sellable != nil {
		c = min(c, p.sellable(allocatable))
	}
	return max(c, 0)
}

// Allocate gives the pod its exclusive set, growing or shrinking an existing
// one in place (kept CPUs stay), and records it in s. On error s is unchanged.
func (p policy) Allocate(s PoolState, r exclusiveRequest) (cpuset.CPUSet, error) {
	allocatable := s.All().Difference(s.Reserved())
	cur, had := s.Assignment(r.UID)
	others := s.KubeletTaken()
	heldByOthers := 0
	for _, a := range s.Assignments() {
		if a.UID != r.UID {
			others = others.Union(a.CPUs)
			heldByOthers += a.CPUs.Size()
		}
	}
	limit := p.cap(s)
	var want cpuset.CPUSet
	switch {
	case r.CPUSet != nil:
		set := *r.CPUSet
		if off := set.Difference(s.All()); !off.IsEmpty() {
			return cpuset.New(), fmt.Errorf("%w: %s (node has %s)", ErrCPUOffline, off, s.All())
		}
		if ov := set.Intersection(s.Reserved()); !ov.IsEmpty() {
			return cpuset.New(), fmt.Errorf("%w: %s", ErrReservedOverlap, ov)
		}
		if ov := set.Intersection(others); !ov.IsEmpty() {
			return cpuset.New(), fmt.Errorf("%w: %s", ErrCPUTaken, ov)
		}
		want = set
	case r.CPUs > allocatable.Size():
		return cpuset.New(), fmt.Errorf("%w: want %d, node allocates %d (%s)", ErrTooManyCPUs, r.CPUs, allocatable.Size(), allocatable)
	case had && cur.CPUs.Size() == r.CPUs:
		want = cur.CPUs
	case had && cur.CPUs.Size() > r.CPUs:
		// Shrink: keep the best r.CPUs of what the pod already has.
		keep, err := p.alloc.Allocate(cur.CPUs, r.CPUs, r.Opts)
		if err != nil {
			return cpuset.New(), err
		}
		want = keep
	default:
		base := cpuset.New()
		if had {
			base = cur.CPUs
		}
		if heldByOthers+r.CPUs > limit {
			return cpuset.New(), fmt.Errorf("%w: %d held + %d wanted > cap %d", ErrCapExceeded, heldByOthers, r.CPUs, limit)
		}
		free := allocatable.Difference(others).Difference(base)
		extra, err := p.alloc.Allocate(free, r.CPUs-base.Size(), r.Opts)
		if err != nil {
			return cpuset.New(), fmt.Errorf("%w: want %d more, free %s: %v", ErrInsufficientCPUs, r.CPUs-base.Size(), free, err)
		}
		want = base.Union(extra)
	}
	if heldByOthers+want.Size() > limit {
		return cpuset.New(), fmt.Errorf("%w: %d held + %d wanted > cap %d", ErrCapExceeded, heldByOthers, want.Size(), limit)
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
func (p policy) Release(s PoolState, uid string) error {
	return s.deleteAssignment(uid)
}
