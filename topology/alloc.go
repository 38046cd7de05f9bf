package topology

import (
	"errors"
	"fmt"
	"math"

	"k8s.io/utils/cpuset"
)

// Policy says how a request is laid out on physical cores.
type Policy string

// Core policies.
const (
	// FullCores takes whole physical cores, threads of one core together
	// (the default).
	FullCores Policy = "full-cores"
	// Spread takes one thread per physical core on cores that hold no other
	// exclusive CPU; the siblings stay in the shared pool.
	Spread Policy = "spread"
	// BindAll returns every allocatable CPU that is not taken. It binds a
	// workload to the shared pool; it is not an exclusive grant, so the cap
	// does not apply and the agent must not add the result to Taken.
	BindAll Policy = "bind-all"
)

// NUMAPolicy says how a request may span NUMA nodes.
type NUMAPolicy string

// NUMA policies.
const (
	NUMASingle       NUMAPolicy = "single"        // one node, or fail
	NUMAPreferSingle NUMAPolicy = "prefer-single" // fewest nodes (the default)
	NUMASpread       NUMAPolicy = "spread"        // balance across nodes
)

// IOPolicy says how a request treats CPUs that serve IO-queue interrupts.
type IOPolicy string

// IO-queue policies.
const (
	// IOAvoid keeps off CPUs serving NVMe, NIC or virtio queue interrupts
	// whenever enough other CPUs exist (the default).
	IOAvoid IOPolicy = "avoid"
	// IOSpread prefers CPUs serving queues that no taken CPU serves, so each
	// exclusive instance gets its own queues.
	IOSpread IOPolicy = "spread"
	IOAny    IOPolicy = "any"
)

// Request is one allocation request. The zero values of Policy, NUMA and
// IOQueues mean the defaults (full-cores, prefer-single, avoid).
type Request struct {
	CPUs     int
	Policy   Policy
	NUMA     NUMAPolicy
	IOQueues IOPolicy
	// Explicit, when not empty, is a cpuset chosen elsewhere (a central
	// scheduler): Allocate validates it against the same rules and returns
	// it, or refuses it with a precise Reason. CPUs may then be 0.
	Explicit cpuset.CPUSet
	// Keep, when not empty, is the instance's current exclusive set, which
	// the caller leaves out of State.Taken: a resize in place. The result
	// is Keep when CPUs equals its size, the best CPUs of Keep when it
	// shrinks, and Keep plus the best free CPUs when it grows, so running
	// threads never move. The cap counts the result.
	Keep cpuset.CPUSet
}

// State is what is already decided on the node.
type State struct {
	Taken    cpuset.CPUSet // CPUs granted exclusively to other instances
	Reserved cpuset.CPUSet // never allocated; united with Topology.Reserved
	// SharedMilliCPUs is the size of each shared instance, in millicores.
	SharedMilliCPUs []int64
	// Overcommit is the shared pool's overcommit ratio; 0 means 1.
	Overcommit float64
	// CapRatio is the largest fraction of allocatable CPUs that may be
	// exclusive; 0 means 2/3.
	CapRatio float64
}

// DefaultCapRatio is the default cap on exclusive CPUs.
const DefaultCapRatio = 2.0 / 3.0

// NoExclusiveCap is a CapRatio that allows no exclusive CPU at all (0
// means DefaultCapRatio).
const NoExclusiveCap = math.SmallestNonzeroFloat64

// Reason is a machine-readable cause of a refused allocation.
type Reason string

// Reasons.
const (
	ReasonInvalidRequest Reason = "invalid-request"
	ReasonNotEnoughCPUs  Reason = "not-enough-cpus"
	ReasonOverCap        Reason = "over-cap"
	ReasonNotSellable    Reason = "not-sellable"
	ReasonNUMANoFit      Reason = "numa-no-fit"
	ReasonUnknownCPU     Reason = "unknown-cpu"
	ReasonOfflineCPU     Reason = "offline-cpu"
	ReasonReservedCPU    Reason = "reserved-cpu"
	ReasonTakenCPU       Reason = "taken-cpu"
	ReasonCountMismatch  Reason = "count-mismatch"
	ReasonSplitsCore     Reason = "splits-core"
	ReasonSharesCore     Reason = "shares-core"
	ReasonNUMASpan       Reason = "numa-span"
	ReasonIOQueueCPU     Reason = "io-queue-cpu"
)

// ErrAllocation matches every *AllocError with errors.Is.
var ErrAllocation = errors.New("topology: allocation refused")

// AllocError is a refused allocation.
type AllocError struct {
	Reason Reason
	Detail string
	CPUs   cpuset.CPUSet // the offending CPUs, when there are some
}

func (e *AllocError) Error() string {
	s := "allocation refused (" + string(e.Reason) + "): " + e.Detail
	if e.CPUs.Size() > 0 {
		s += ": cpus " + e.CPUs.String()
	}
	return s
}

// Is makes errors.Is(err, ErrAllocation) true.
func (e *AllocError) Is(target error) bool { return target == ErrAllocation }

func refuse(r Reason, cpus cpuset.CPUSet, format string, args ...any) error {
	return &AllocError{Reason: r, Detail: fmt.Sprintf(format, args...), CPUs: cpus}
}

// Limits are the node-wide bounds on exclusive CPUs.
type Limits struct {
	Allocatable int // online CPUs minus reserved ones
	Cap         int // floor(CapRatio × Allocatable)
	// Sellable is min(a, b): a = Allocatable − 2 × the largest shared
	// instance, b = (Allocatable − CPUs sold to shared instances) /
	// Overcommit, each rounded down and never below 0.
	Sellable int
	Max      int // min(Cap, Sellable)
	Taken    int // exclusive CPUs already granted among allocatable ones
}

// ComputeLimits returns the limits for state on topo.
func ComputeLimits(topo *Topology, st State) (Limits, error) {
	if err := checkState(st); err != nil {
		return Limits{}, err
	}
	m := buildMasks(topo, st)
	return limits(m, st), nil
}

// masks is a State resolved against a Topology, per CPU position: the hot
// path of Allocate works on these instead of map-based sets.
type masks struct {
	free        []bool // online, not reserved, not taken
	taken       []bool
	allocatable int // online and not reserved
	takenAlloc  int // taken among allocatable
}

func buildMasks(topo *Topology, st State) masks {
	n := len(topo.CPUs)
	m := masks{free: make([]bool, n), taken: make([]bool, n)}
	reserved := make([]bool, n)
	for _, set := range []cpuset.CPUSet{st.Reserved, topo.Reserved} {
		for _, id := range set.UnsortedList() {
			if i, ok := topo.index[id]; ok {
				reserved[i] = true
			}
		}
	}
	for _, id := range st.Taken.UnsortedList() {
		if i, ok := topo.index[id]; ok {
			m.taken[i] = true
		}
	}
	for i, c := range topo.CPUs {
		if !c.Online || reserved[i] {
			continue
		}
		m.allocatable++
		if m.taken[i] {
			m.takenAlloc++
		} else {
			m.free[i] = true
		}
	}
	return m
}

func limits(m masks, st State) Limits {
	n := m.allocatable
	ratio := st.CapRatio
	if ratio == 0 {
		ratio = DefaultCapRatio
	}
	over := st.Overcommit
	if over == 0 {
		over = 1
	}
	var largest, sold int64
	for _, v := range st.SharedMilliCPUs {
		largest = max(largest, v)
		sold += v
	}
	// Shared sizes are rounded up to whole CPUs: a 1.5-CPU instance needs 2.
	a := float64(n) - 2*math.Ceil(float64(largest)/1000)
	b := (float64(n) - math.Ceil(float64(sold)/1000)) / over
	l := Limits{Allocatable: n, Cap: int(math.Floor(ratio*float64(n) + 1e-9)), Taken: m.takenAlloc}
	l.Sellable = max(0, int(math.Floor(min(a, b)+1e-9)))
	l.Max = min(l.Cap, l.Sellable)
	return l
}

func checkState(st State) error {
	if st.CapRatio < 0 || st.CapRatio > 1 || math.IsNaN(st.CapRatio) {
		return refuse(ReasonInvalidRequest, cpuset.New(), "cap ratio %v outside [0,1]", st.CapRatio)
	}
	if st.Overcommit < 0 || math.IsNaN(st.Overcommit) || math.IsInf(st.Overcommit, 0) {
		return refuse(ReasonInvalidRequest, cpuset.New(), "overcommit ratio %v is negative or not finite", st.Overcommit)
	}
	for i, m := range st.SharedMilliCPUs {
		if m < 0 || m > 1<<40 {
			return refuse(ReasonInvalidRequest, cpuset.New(), "shared instance %d has size %dm", i, m)
		}
	}
	return nil
}

// CheckRequest validates the policy values and the count of req, as
// Allocate does first.
func CheckRequest(req Request) error {
	_, err := req.withDefaults()
	return err
}

func (r Request) withDefaults() (Request, error) {
	if r.Policy == "" {
		r.Policy = FullCores
	}
	if r.NUMA == "" {
		r.NUMA = NUMAPreferSingle
	}
	if r.IOQueues == "" {
		r.IOQueues = IOAvoid
	}
	switch r.Policy {
	case FullCores, Spread, BindAll:
	default:
		return r, refuse(ReasonInvalidRequest, cpuset.New(), "unknown policy %q (want full-cores, spread or bind-all)", r.Policy)
	}
	switch r.NUMA {
	case NUMASingle, NUMAPreferSingle, NUMASpread:
	default:
		return r, refuse(ReasonInvalidRequest, cpuset.New(), "unknown NUMA policy %q (want single, prefer-single or spread)", r.NUMA)
	}
	switch r.IOQueues {
	case IOAvoid, IOSpread, IOAny:
	default:
		return r, refuse(ReasonInvalidRequest, cpuset.New(), "unknown IO-queue policy %q (want avoid, spread or any)", r.IOQueues)
	}
	if r.CPUs < 0 {
		return r, refuse(ReasonInvalidRequest, cpuset.New(), "negative CPU count %d", r.CPUs)
	}
	if r.CPUs == 0 && r.Explicit.IsEmpty() && r.Policy != BindAll {
		return r, refuse(ReasonInvalidRequest, cpuset.New(), "zero CPUs requested")
	}
	return r, nil
}

// Allocate picks CPUs for req on topo given st, or validates req.Explicit.
// It is a pure function: no I/O, no mutation of its arguments, the same
// answer for the same input. The rules, in order of precedence:
//
//   - never a reserved, offline or taken CPU;
//   - never more exclusive CPUs than Limits.Max (the cap and the sellable
//     rule);
//   - IOAvoid: no CPU serving an IO queue when the request can be met
//     without one;
//   - NUMA: NUMASingle fits one node or fails; NUMAPreferSingle uses the
//     fewest nodes; NUMASpread balances across nodes;
//   - inside each node, the fewest last-level-cache groups;
//   - FullCores: whole free cores first, then threads of already split
//     cores, then one newly split core; Spread: one thread per untaken core;
//   - among equally good choices, the most-used node and cache group (best
//     fit), which keeps the largest blocks free.
func Allocate(topo *Topology, st State, req Request) (cpuset.CPUSet, error) {
	req, err := req.withDefaults()
	if err != nil {
		return cpuset.New(), err
	}
	if err := checkState(st); err != nil {
		return cpuset.New(), err
	}
	m := buildMasks(topo, st)
	lim := limits(m, st)
	if !req.Explicit.IsEmpty() {
		return validateExplicit(topo, st, st.Reserved.Union(topo.Reserved), lim, req)
	}
	if req.Policy == BindAll {
		var ids []int
		for i, f := range m.free {
			if f {
				ids = append(ids, topo.CPUs[i].ID)
			}
		}
		if len(ids) == 0 {
			return cpuset.New(), refuse(ReasonNotEnoughCPUs, cpuset.New(), "no allocatable CPU is free")
		}
		return cpuset.New(ids...), nil
	}
	if err := checkLimits(lim, req.CPUs); err != nil {
		return cpuset.New(), err
	}
	if !req.Keep.IsEmpty() {
		return resize(topo, st, req)
	}
	return pick(topo, m, req, req.CPUs)
}

// resize is Allocate for an instance that holds req.Keep already.
func resize(topo *Topology, st State, req Request) (cpuset.CPUSet, error) {
	keep := req.Keep
	if off := keep.Difference(topo.Online()); !off.IsEmpty() {
		return cpuset.New(), refuse(ReasonOfflineCPU, off, "held CPUs are not online")
	}
	if r := keep.Intersection(st.Reserved.Union(topo.Reserved)); !r.IsEmpty() {
		return cpuset.New(), refuse(ReasonReservedCPU, r, "held CPUs are reserved")
	}
	if tk := keep.Intersection(st.Taken); !tk.IsEmpty() {
		return cpuset.New(), refuse(ReasonTakenCPU, tk, "held CPUs are granted to another instance too")
	}
	n := req.CPUs
	switch {
	case n == keep.Size():
		return keep, nil
	case n < keep.Size():
		// The best n of what the instance holds: everything else is taken.
		only := State{Taken: topo.Online().Difference(keep), Reserved: st.Reserved}
		return pick(topo, buildMasks(topo, only), req, n)
	}
	grown := st
	grown.Taken = st.Taken.Union(keep)
	extra, err := pick(topo, buildMasks(topo, grown), req, n-keep.Size())
	if err != nil {
		return cpuset.New(), err
	}
	return keep.Union(extra), nil
}

// pick chooses n CPUs among the free ones of m by the request's rules.
func pick(topo *Topology, m masks, req Request, n int) (cpuset.CPUSet, error) {
	ix := topo.allocIndex()
	p := newPicker(topo, ix, m, req)
	if req.IOQueues == IOAvoid {
		hit := false
		for i, io := range ix.ioCore {
			hit = hit || io && m.free[i]
		}
		if hit {
			// A sibling of an interrupt-serving CPU shares its core with
			// the interrupt work, so avoid whole cores.
			for i, io := range ix.ioCore {
				p.free[i] = p.free[i] && !io
			}
			got, err := p.allocate(n)
			if err == nil {
				return got, nil
			}
			p = newPicker(topo, ix, m, req)
			// Not enough CPUs without queues: prefer the cores serving
			// the fewest.
			p.ioScore = ix.ioLoad
		}
	}
	return p.allocate(n)
}

// coresOf returns set plus the thread siblings of its CPUs.
func coresOf(topo *Topology, set cpuset.CPUSet) cpuset.CPUSet {
	out := set
	for _, id := range set.UnsortedList() {
		if c, ok := topo.CPU(id); ok {
			out = out.Union(c.Siblings)
		}
	}
	return out
}

func checkLimits(lim Limits, n int) error {
	if lim.Taken+n <= lim.Max {
		return nil
	}
	if lim.Taken+n > lim.Allocatable {
		return refuse(ReasonNotEnoughCPUs, cpuset.New(), "%d taken + %d requested exceeds the %d allocatable CPUs", lim.Taken, n, lim.Allocatable)
	}
	if lim.Taken+n > lim.Cap {
		return refuse(ReasonOverCap, cpuset.New(), "%d taken + %d requested exceeds the cap of %d exclusive CPUs (of %d allocatable)", lim.Taken, n, lim.Cap, lim.Allocatable)
	}
	return refuse(ReasonNotSellable, cpuset.New(), "%d taken + %d requested exceeds the %d sellable exclusive CPUs (of %d allocatable)", lim.Taken, n, lim.Sellable, lim.Allocatable)
}
