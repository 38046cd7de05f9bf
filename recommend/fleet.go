package recommend

import (
	"math"
	"sort"
	"time"
)

// The fleet controller (ResourcePolicy.FleetObjective): one violation cost
// λ per resource for all the containers of a Recommender (one node), so
// that their violations together meet a stated rate.
//
// Why one λ: what a node (and a replay) is scored on are sums over its
// containers, Σ slack and Σ violations. Minimising Σ slack subject to
// Σ violations ≤ budget is, by Lagrangian duality, every container
// minimising E[(x − u)⁺] + λ·P(u > x) under its own predicted distribution
// with one shared λ: violations are spent where headroom is expensive
// (large, bursty containers), not where it is cheap. The right λ depends
// on the fleet (a violation is worth 11 cores of idle reservation on
// Bitbrains VMs and 1.6 on 1-vCPU Azure VMs at the same rate), so it is
// not a constant of a preset: every tick it is solved for.
//
// A tick (1) counts the violations of the members since the previous tick
// against the targets then in force, (2) compares them, over
// fleetCalibration, with the violations the histograms predicted at the λ
// then in force (κ = realised / predicted: hysteresis holds targets above
// the optimum and makes κ < 1, usage outgrowing its history makes κ > 1),
// and (3) solves for the smallest λ whose predicted rate is at most
// objective/κ. Only the past is used: the histograms hold the samples
// recorded so far, and the counts are against targets already in force.
// There is no integrator to wind up: κ is a ratio of measured counts,
// bounded to [1/fleetRange, fleetRange].

const (
	// fleetMinTick is the shortest time between two ticks: Recommend calls
	// of one decision round (a few ms apart) share one.
	fleetMinTick = 5 * time.Minute
	// fleetRange bounds the calibration: the predicted rate aimed at stays
	// within [objective/fleetRange, objective·fleetRange].
	fleetRange = 5.0
	// fleetCalibration is the window over which realised and predicted
	// violations are compared: long, since κ is a property of the model
	// and the hysteresis, not of the hour.
	fleetCalibration = 72 * time.Hour
	// defaultFleetHalfLife is the window of the realised rate reported.
	defaultFleetHalfLife = 24 * time.Hour
)

// fleetState is the controller of one resource.
type fleetState struct {
	lambda float64 // cost of one violation in cores or bytes; 0: not solved yet
	// cv, cp: decayed realised and predicted violations (fleetCalibration);
	// pred: the predicted rate at the λ in force.
	cv, cp, pred float64
	viol, n      float64 // decayed realised counts (FleetHalfLife), for reports
	last         time.Time
	// Scratch reused across ticks: every member's lower hull, flattened.
	hull   []hullPoint
	start  []int
	weight []float64
	floor  []float64
}

// hullPoint is a vertex of the lower convex hull of the points (tail,
// slack) of a member's candidate targets x: for λ from lambda up to the
// next vertex's, x minimises slack + λ·tail. tail is the share (or count)
// of the samples above x, slack the idle reservation below it.
type hullPoint struct{ lambda, tail, slack, x float64 }

// hullPush adds p to the hull that starts at h[first:] (points come with
// strictly decreasing tail and increasing slack) and drops the vertices p
// makes redundant: the breakpoints must increase along a lower hull. The
// λ fields are set by sealHull.
func hullPush(h []hullPoint, first int, p hullPoint) []hullPoint {
	for len(h)-first >= 2 {
		top, prev := h[len(h)-1], h[len(h)-2]
		if (top.slack-prev.slack)/(prev.tail-top.tail) < (p.slack-top.slack)/(top.tail-p.tail) {
			break
		}
		h = h[:len(h)-1]
	}
	return append(h, p)
}

// sealHull sets every vertex's λ: the first is optimal from 0, each next
// one from the λ at which it costs as much as the one before.
func sealHull(pts []hullPoint) {
	for i := range pts {
		if i == 0 {
			pts[i].lambda = 0
			continue
		}
		pts[i].lambda = (pts[i].slack - pts[i-1].slack) / (pts[i-1].tail - pts[i].tail)
	}
}

// hullAt returns the vertex optimal at λ: the last whose breakpoint is
// below λ (costOptimum keeps the lower target on a tie).
func hullAt(pts []hullPoint, lambda float64) hullPoint {
	k := sort.Search(len(pts), func(j int) bool { return pts[j].lambda >= lambda }) - 1
	return pts[max(k, 0)]
}

// fleetMember is one container as the controller sees it. Only established
// containers are members (established): a young container's target is
// still widened and its violations say nothing about the λ in force.
type fleetMember struct {
	hist *Histogram
	t    *tracker
}

// rate is the decayed realised violation rate of the members (0 before any
// sample).
func (f *fleetState) rate() float64 {
	if f.n == 0 {
		return 0
	}
	return f.viol / f.n
}

// tick moves the controller to now (see the top of this file). Members
// come in a fixed order: floating-point sums depend on it.
func (f *fleetState) tick(rp *ResourcePolicy, now time.Time, ms []fleetMember) {
	var dt time.Duration
	if !f.last.IsZero() {
		if dt = now.Sub(f.last); dt < 0 {
			return // before the last tick: nothing new to learn
		}
	}
	f.last = now
	var tv, tn float64
	for _, m := range ms {
		tv += m.t.tickViol
		tn += m.t.tickN
	}
	hl := time.Duration(rp.FleetHalfLife)
	if hl <= 0 {
		hl = defaultFleetHalfLife
	}
	d := math.Exp2(-float64(dt) / float64(hl))
	f.viol, f.n = f.viol*d+tv, f.n*d+tn
	dc := math.Exp2(-float64(dt) / float64(fleetCalibration))
	f.cv, f.cp = f.cv*dc, f.cp*dc
	if f.lambda > 0 { // samples that came under a predicted λ
		f.cv, f.cp = f.cv+tv, f.cp+f.pred*tn
	}
	obj := rp.FleetObjective
	kappa := min(max((f.cv+1)/(f.cp+1), 1/fleetRange), fleetRange)
	f.build(rp, ms)
	// Not ok: no member, or even λ → 0 meets the aim (histograms too young
	// to have a tail). Then λ stays as it was.
	if lambda, ok := f.solve(min(obj/kappa, 0.5)); ok {
		f.lambda = lambda
	}
	f.pred = f.predicted(f.lambda)
	for _, m := range ms {
		m.t.tickViol, m.t.tickN = 0, 0
	}
}

// build computes every member's lower convex hull of (tail share, slack)
// over its bucket ends: the cost optimum for λ is the hull vertex where the
// hull's slope crosses −λ. The target is at least the policy's percentile,
// so the tail is at most the tail above it (floorTail). A member's weight
// is its samples since the last tick (its share of the violations to
// come), or 1 on the first tick.
func (f *fleetState) build(rp *ResourcePolicy, ms []fleetMember) {
	f.hull, f.start, f.weight, f.floor = f.hull[:0], f.start[:0], f.weight[:0], f.floor[:0]
	var sumTick float64
	for _, m := range ms {
		sumTick += m.t.tickN
	}
	for _, m := range ms {
		h := m.hist
		if h.IsEmpty() || !(h.total > 0) {
			continue
		}
		w := m.t.tickN
		if sumTick == 0 {
			w = 1
		}
		if w == 0 {
			continue
		}
		f.start = append(f.start, len(f.hull))
		f.weight = append(f.weight, w)
		floor, floorTail := rp.Percentile*h.total, -1.0
		first := len(f.hull)
		prevTail := math.Inf(1)
		h.bucketEnds(func(b int, x, below, moment float64) {
			tail := max(h.total-below, 0) / h.total
			if floorTail < 0 && (below >= floor || b == h.max) {
				floorTail = tail // Percentile's bucket
			}
			if tail >= prevTail {
				return // an empty bucket: same tail, more slack
			}
			prevTail = tail
			f.hull = hullPush(f.hull, first, hullPoint{tail: tail, slack: (x*below - moment) / h.total, x: x})
		})
		sealHull(f.hull[first:])
		f.floor = append(f.floor, floorTail)
	}
	f.start = append(f.start, len(f.hull))
}

// predicted is the members' weighted share of samples above their cost
// optima at λ, as their histograms predict it.
func (f *fleetState) predicted(lambda float64) float64 {
	var v, w float64
	for i, wt := range f.weight {
		v += wt * min(hullAt(f.hull[f.start[i]:f.start[i+1]], lambda).tail, f.floor[i])
		w += wt
	}
	if w == 0 {
		return 0
	}
	return v / w
}

// solve returns the smallest λ (to a relative precision of about 1e-6)
// whose predicted rate is at most target, starting the search at the
// previous λ or, on the first tick, at the first positive breakpoint (any
// positive scale works: the search brackets). ok is false when there is no
// member or when λ → 0 meets the target too (the solution says nothing).
func (f *fleetState) solve(target float64) (lambda float64, ok bool) {
	if len(f.weight) == 0 {
		return 0, false
	}
	g := f.lambda
	if !(g > 0) {
		g = 1
		for _, p := range f.hull {
			if p.lambda > 0 {
				g = p.lambda
				break
			}
		}
	}
	const maxSteps = 200 // 4^200 covers any float64 ratio
	lo, hi := g, g
	if f.predicted(g) > target {
		for i := 0; i < maxSteps && f.predicted(hi) > target; i++ {
			lo, hi = hi, hi*4
		}
	} else {
		for i := 0; i < maxSteps && f.predicted(lo) <= target; i++ {
			hi, lo = lo, lo/4
			if lo < g*1e-12 {
				return 0, false
			}
		}
	}
	for range 40 {
		mid := math.Sqrt(lo * hi)
		if f.predicted(mid) > target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, true
}
