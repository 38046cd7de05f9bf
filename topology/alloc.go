package topology

import (
	"errors"
	"fmt"
	"math"
	"sort"

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
	alloc := topo.Online().Difference(st.Reserved).Difference(topo.Reserved)
	n := alloc.Size()
	ratio := st.CapRatio
	if ratio == 0 {
		ratio = DefaultCapRatio
	}
	over := st.Overcommit
	if over == 0 {
		over = 1
	}
	var largest, sold int64
	for _, m := range st.SharedMilliCPUs {
		largest = max(largest, m)
		sold += m
	}
	// Shared sizes are rounded up to whole CPUs: a 1.5-CPU instance needs 2.
	a := float64(n) - 2*math.Ceil(float64(largest)/1000)
	b := (float64(n) - math.Ceil(float64(sold)/1000)) / over
	l := Limits{Allocatable: n, Cap: int(math.Floor(ratio*float64(n) + 1e-9))}
	l.Sellable = max(0, int(math.Floor(min(a, b)+1e-9)))
	l.Max = min(l.Cap, l.Sellable)
	l.Taken = st.Taken.Intersection(alloc).Size()
	return l, nil
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
	lim, err := ComputeLimits(topo, st)
	if err != nil {
		return cpuset.New(), err
	}
	reserved := st.Reserved.Union(topo.Reserved)
	if !req.Explicit.IsEmpty() {
		return validateExplicit(topo, st, reserved, lim, req)
	}
	free := topo.Online().Difference(reserved).Difference(st.Taken)
	if req.Policy == BindAll {
		if free.IsEmpty() {
			return cpuset.New(), refuse(ReasonNotEnoughCPUs, cpuset.New(), "no allocatable CPU is free")
		}
		return free, nil
	}
	if err := checkLimits(lim, req.CPUs); err != nil {
		return cpuset.New(), err
	}
	ix := topo.allocIndex()
	p := newPicker(topo, ix, free, st.Taken, req)
	if req.IOQueues == IOAvoid {
		io := topo.IOCPUs()
		if !io.Intersection(free).IsEmpty() {
			p.exclude(io)
			got, err := p.allocate(req.CPUs)
			if err == nil {
				return got, nil
			}
			p = newPicker(topo, ix, free, st.Taken, req)
		}
	}
	return p.allocate(req.CPUs)
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

// coreInfo is one physical core (or one CPU of unknown core) for the
// allocator: positions of its CPUs in Topology.CPUs.
type coreInfo struct {
	cpus []int
	numa int
	llc  int
}

type allocIndex struct {
	cores []coreInfo
	smt   int // the most threads of any core
}

func (t *Topology) allocIndex() *allocIndex {
	if t.ai != nil {
		return t.ai
	}
	return buildAllocIndex(t)
}

func buildAllocIndex(t *Topology) *allocIndex {
	ix := &allocIndex{smt: 1}
	byCore := map[int]int{}
	for i, c := range t.CPUs {
		if !c.Online {
			continue
		}
		if c.Core == Unknown {
			ix.cores = append(ix.cores, coreInfo{cpus: []int{i}, numa: c.NUMA, llc: c.L3})
			continue
		}
		k, ok := byCore[c.Core]
		if !ok {
			k = len(ix.cores)
			byCore[c.Core] = k
			ix.cores = append(ix.cores, coreInfo{numa: c.NUMA, llc: c.L3})
		}
		ix.cores[k].cpus = append(ix.cores[k].cpus, i)
		ix.smt = max(ix.smt, len(ix.cores[k].cpus))
	}
	return ix
}

// picker holds one allocation's working state, as flags per CPU position.
type picker struct {
	t       *Topology
	ix      *allocIndex
	free    []bool // candidate CPUs
	taken   []bool // CPUs granted exclusively to others
	policy  Policy
	numa    NUMAPolicy
	ioScore []int // per core: IO queues it would newly cover (IOSpread), or nil
}

func newPicker(t *Topology, ix *allocIndex, free, taken cpuset.CPUSet, req Request) *picker {
	p := &picker{t: t, ix: ix, free: make([]bool, len(t.CPUs)), taken: make([]bool, len(t.CPUs)), policy: req.Policy, numa: req.NUMA}
	for _, id := range free.UnsortedList() {
		if i, ok := t.index[id]; ok {
			p.free[i] = true
		}
	}
	for _, id := range taken.UnsortedList() {
		if i, ok := t.index[id]; ok {
			p.taken[i] = true
		}
	}
	if req.IOQueues == IOSpread {
		p.ioScore = ioSpreadScores(t, ix, taken)
	}
	return p
}

func (p *picker) exclude(set cpuset.CPUSet) {
	for _, id := range set.UnsortedList() {
		if i, ok := p.t.index[id]; ok {
			p.free[i] = false
		}
	}
}

// ioSpreadScores counts, per core, the IO queues its CPUs serve that no
// taken CPU serves.
func ioSpreadScores(t *Topology, ix *allocIndex, taken cpuset.CPUSet) []int {
	used := map[string]bool{}
	byCPU := t.IOQueuesByCPU()
	for _, id := range taken.UnsortedList() {
		for _, q := range byCPU[id] {
			used[q] = true
		}
	}
	scores := make([]int, len(ix.cores))
	for k, c := range ix.cores {
		for _, i := range c.cpus {
			for _, q := range byCPU[t.CPUs[i].ID] {
				if !used[q] {
					scores[k]++
				}
			}
		}
	}
	return scores
}

// coreFree returns how many of core k's CPUs are candidates, and whether
// the whole core is.
func (p *picker) coreFree(k int) (n int, whole bool) {
	for _, i := range p.ix.cores[k].cpus {
		if p.free[i] {
			n++
		}
	}
	return n, n == len(p.ix.cores[k].cpus)
}

// eligible says whether Spread may use core k: it has a candidate CPU and no
// CPU granted to another exclusive instance.
func (p *picker) eligible(k int) bool {
	has := false
	for _, i := range p.ix.cores[k].cpus {
		if p.taken[i] {
			return false
		}
		has = has || p.free[i]
	}
	return has
}

// capacity returns how many CPUs the cores can give under the policy, and
// how many of those come from whole cores.
func (p *picker) capacity(cores []int) (total, whole int) {
	for _, k := range cores {
		if p.policy == Spread {
			if p.eligible(k) {
				total++
				whole++
			}
			continue
		}
		n, w := p.coreFree(k)
		total += n
		if w {
			whole += n
		}
	}
	return total, whole
}

type group struct {
	key          int
	cores        []int
	total, whole int
	quota        int
}

// groupBy splits cores by key, in key order.
func (p *picker) groupBy(cores []int, key func(coreInfo) int) []group {
	pos := map[int]int{}
	var gs []group
	for _, k := range cores {
		v := key(p.ix.cores[k])
		i, ok := pos[v]
		if !ok {
			i = len(gs)
			pos[v] = i
			gs = append(gs, group{key: v})
		}
		gs[i].cores = append(gs[i].cores, k)
	}
	for i := range gs {
		gs[i].total, gs[i].whole = p.capacity(gs[i].cores)
	}
	sort.Slice(gs, func(a, b int) bool { return gs[a].key < gs[b].key })
	return gs
}

// packGroups chooses the fewest groups that hold n and sets their quotas.
// One group that holds n from whole cores wins, then one group that holds n
// at all; among those, the one with the least capacity (best fit, keeping
// big blocks free). Otherwise the largest groups are taken in turn and the
// last one is replaced by the smallest group that still covers the rest.
func packGroups(gs []group, n int, single bool) ([]group, bool) {
	best := -1
	for pass := 0; pass < 2 && best < 0; pass++ {
		for i, g := range gs {
			fits := g.total >= n
			if pass == 0 {
				fits = g.whole >= n
			}
			if fits && (best < 0 || g.total < gs[best].total) {
				best = i
			}
		}
	}
	if best >= 0 {
		g := gs[best]
		g.quota = n
		return []group{g}, true
	}
	if single {
		return nil, false
	}
	order := make([]int, len(gs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		ga, gb := gs[order[a]], gs[order[b]]
		if ga.total != gb.total {
			return ga.total > gb.total
		}
		return ga.whole > gb.whole
	})
	var out []group
	need := n
	for j, i := range order {
		if need == 0 {
			break
		}
		g := gs[i]
		if g.total == 0 {
			break
		}
		if g.total >= need {
			g = gs[bestFit(gs, order[j:], need)]
			g.quota = need
			out = append(out, g)
			need = 0
			break
		}
		g.quota = g.total
		need -= g.total
		out = append(out, g)
	}
	if need > 0 {
		return nil, false
	}
	return out, true
}

// bestFit returns, among candidates that hold need, one that holds it from
// whole cores if any does, with the least capacity.
func bestFit(gs []group, candidates []int, need int) int {
	pick := -1
	for _, c := range candidates {
		g := gs[c]
		if g.total < need {
			continue
		}
		if pick < 0 {
			pick = c
			continue
		}
		cur := gs[pick]
		gw, cw := g.whole >= need, cur.whole >= need
		if gw && !cw || gw == cw && g.total < cur.total {
			pick = c
		}
	}
	return pick
}

// spreadGroups balances n over the groups with capacity, one unit (a core's
// worth of threads, or one thread under Spread) at a time, largest first.
func spreadGroups(gs []group, n, unit int) ([]group, bool) {
	var out []group
	for _, g := range gs {
		if g.total > 0 {
			out = append(out, g)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].total > out[b].total })
	need := n
	for need > 0 {
		progress := false
		for i := range out {
			if need == 0 {
				break
			}
			step := min(unit, need, out[i].total-out[i].quota)
			if step > 0 {
				out[i].quota += step
				need -= step
				progress = true
			}
		}
		if !progress {
			return nil, false
		}
	}
	kept := out[:0]
	for _, g := range out {
		if g.quota > 0 {
			kept = append(kept, g)
		}
	}
	return kept, true
}

func (p *picker) allocate(n int) (cpuset.CPUSet, error) {
	all := make([]int, len(p.ix.cores))
	for i := range all {
		all[i] = i
	}
	total, _ := p.capacity(all)
	if total < n {
		what := "free allocatable CPUs"
		if p.policy == Spread {
			what = "free cores with no exclusive thread"
		}
		return cpuset.New(), refuse(ReasonNotEnoughCPUs, cpuset.New(), "%d CPUs requested, %d %s", n, total, what)
	}
	nodes := p.groupBy(all, func(c coreInfo) int { return c.numa })
	var chosen []group
	var ok bool
	switch p.numa {
	case NUMASpread:
		unit := p.ix.smt
		if p.policy == Spread {
			unit = 1
		}
		chosen, ok = spreadGroups(nodes, n, unit)
	default:
		chosen, ok = packGroups(nodes, n, p.numa == NUMASingle)
	}
	if !ok {
		most := 0
		for _, g := range nodes {
			most = max(most, g.total)
		}
		return cpuset.New(), refuse(ReasonNUMANoFit, cpuset.New(), "%d CPUs requested, the freest NUMA node has %d", n, most)
	}
	ids := make([]int, 0, n)
	for _, node := range chosen {
		caches := p.groupBy(node.cores, func(c coreInfo) int { return c.llc })
		parts, ok := packGroups(caches, node.quota, false)
		if !ok {
			return cpuset.New(), refuse(ReasonNotEnoughCPUs, cpuset.New(), "NUMA node %d cannot give %d CPUs", node.key, node.quota)
		}
		for _, part := range parts {
			ids = p.pickCores(part.cores, part.quota, ids)
		}
	}
	if len(ids) != n {
		return cpuset.New(), refuse(ReasonNotEnoughCPUs, cpuset.New(), "picked %d of %d CPUs", len(ids), n)
	}
	return cpuset.New(ids...), nil
}

// pickCores takes quota CPUs from cores and appends their ids to out.
func (p *picker) pickCores(cores []int, quota int, out []int) []int {
	order := cores
	if p.ioScore != nil {
		order = append([]int(nil), cores...)
		sort.SliceStable(order, func(a, b int) bool { return p.ioScore[order[a]] > p.ioScore[order[b]] })
	}
	take := func(i int) {
		p.free[i] = false
		out = append(out, p.t.CPUs[i].ID)
		quota--
	}
	if p.policy == Spread {
		for _, k := range order {
			if quota == 0 {
				break
			}
			if !p.eligible(k) {
				continue
			}
			for _, i := range p.ix.cores[k].cpus {
				if p.free[i] {
					take(i)
					break
				}
			}
		}
		return out
	}
	// Whole cores that fit the quota.
	for _, k := range order {
		if quota == 0 {
			return out
		}
		if n, whole := p.coreFree(k); whole && n <= quota {
			for _, i := range p.ix.cores[k].cpus {
				take(i)
			}
		}
	}
	// The rest from the cores with the fewest candidates left: already
	// split cores first, so a whole core is split only when nothing else is.
	for quota > 0 {
		best, bestN := -1, 0
		for _, k := range order {
			n, _ := p.coreFree(k)
			if n > 0 && (best < 0 || n < bestN) {
				best, bestN = k, n
			}
		}
		if best < 0 {
			return out
		}
		for _, i := range p.ix.cores[best].cpus {
			if p.free[i] && quota > 0 {
				take(i)
			}
		}
	}
	return out
}
