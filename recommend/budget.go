package recommend

import (
	"math"
	"slices"
	"time"
)

// The resize budget (Policy.ResizeBudget): a node-level allocation of
// target changes, so that flat containers hold still and the changes go
// to the containers where they pay (cyclic ones, level shifts).
//
// Why a price: the node is scored, and a user pays, on totals (Σ slack,
// Σ violations, Σ resizes). Least slack and violations at a total number
// of changes is, as for the fleet's violation objective (fleet.go), a
// Lagrangian: a change is worth making when what it saves until the next
// chance to change, in the currency of the cost objective (E[(x − u)⁺] +
// λ·P(u > x) per sample, λ the violation cost in force), exceeds a price μ
// shared by every container of the node. μ is not a constant: it is the
// value a change needed over the last day to be among the best R offers
// of the node (R = the node's budget per day, one offer counted per
// container, its best), i.e. the price at which yesterday's offers would
// have used exactly the budget. Only the past sets it.
//
// A token bucket makes the budget a hard cap: the node earns
// ResizeBudget changes per established container per day, keeps at most
// budgetBurst days of them, and a change is made only with a token in
// hand. Every change counts, whatever its size (a resize is a resize):
// the scorer's dead band of 10 % is not used to make changes for free.
// A container's first target and an OOM kill's bump are free.

const (
	// budgetBurst is how many days of the node's budget the bucket holds.
	budgetBurst = 0.5
	// budgetWindow is how far back offers set the price.
	budgetWindow = 24 * time.Hour
)

// budgetState is the allocator of one resource of a node.
type budgetState struct {
	tokens, rate float64 // changes in hand; earned per day (Σ of the members' budgets)
	price        float64
	last         time.Time
	started      bool
	offers       map[*resourceState]budgetOffer // each container's best offer of the window
	scratch      []float64
}

// budgetOffer is a container's best offer within the window.
type budgetOffer struct {
	value float64
	at    time.Time
}

// tick moves the allocator to now: tokens earned since the last tick at
// rate (the members' budgets per day), at most budgetBurst days of them,
// and the price from the window's offers.
func (b *budgetState) tick(now time.Time, rate float64) {
	b.rate = rate
	capacity := b.capacity()
	switch {
	case !b.started:
		// The bucket starts full, with the budget of the first
		// established members: before any container is established the
		// rate is 0, and starting then left a new node's bucket empty
		// for hours (a lowered floor's cut waited for tokens).
		b.tokens, b.started = capacity, capacity > 0
	case b.tokens < -capacity:
		// Raises in debt beyond a full bucket are forgiven: the debt
		// only holds cuts back, and a day of them is enough.
		b.tokens = -capacity
	case now.After(b.last):
		b.tokens = min(b.tokens+b.rate*now.Sub(b.last).Hours()/24, capacity)
	}
	b.last = now
	b.scratch = b.scratch[:0]
	for k, o := range b.offers {
		if now.Sub(o.at) >= budgetWindow {
			delete(b.offers, k)
			continue
		}
		b.scratch = append(b.scratch, o.value)
	}
	// The R-th best offer of the window; none: every change is worth its
	// token. Sorted descending, ties kept: map order does not matter.
	slices.Sort(b.scratch)
	slices.Reverse(b.scratch)
	b.price = 0
	if r := int(b.rate); r < len(b.scratch) {
		b.price = b.scratch[r]
	}
}

// capacity is what the bucket holds: budgetBurst days of the rate, and at
// least one change. Half a day of one container's budget (1 a day) is half
// a token, and a cut needs a whole one: a node with one established
// container under a cost preset never cut it.
func (b *budgetState) capacity() float64 {
	if b.rate <= 0 {
		return 0
	}
	return max(b.rate*budgetBurst, 1)
}

// offer asks for a change worth value to container key at now. A raise
// is always granted (it stands between the container and violations, as
// an OOM bump does) and spends a token, in debt if it must; a cut is
// granted when a token is in hand and the value reaches the price, or
// when the bucket is full (a token would be lost).
func (b *budgetState) offer(key *resourceState, value float64, raise bool, now time.Time) bool {
	if b.offers == nil {
		b.offers = map[*resourceState]budgetOffer{}
	}
	if o, ok := b.offers[key]; !ok || value > o.value || now.Sub(o.at) >= budgetWindow {
		b.offers[key] = budgetOffer{value: value, at: now}
	}
	switch {
	case raise:
	case b.tokens < 1:
		return false
	case value < b.price && b.tokens < b.capacity()-1e-9:
		return false
	}
	b.tokens--
	return true
}

// budgetValue is what moving the target from held to x saves over horizon
// days of samples, in the cost objective's units: the difference of
// E[(x − u)⁺] + λ·P(u > x) per sample under h, times the samples.
func budgetValue(h *Histogram, held, x, lambda, samplesPerDay, horizonDays float64) float64 {
	if h.IsEmpty() || !(h.total > 0) {
		return 0
	}
	return (h.costAt(held, lambda) - h.costAt(x, lambda)) * samplesPerDay * horizonDays
}

// costAt is E[(x − u)⁺] + λ·P(u > x) under the histogram, u at its bucket's
// midpoint as costOptimum takes it.
func (h *Histogram) costAt(x, lambda float64) float64 {
	var slack, above float64
	for b := h.min; b <= h.max; b++ {
		w := h.weights[b]
		if w == 0 {
			continue
		}
		lo, hi := h.opts.BucketStart(b), h.opts.BucketStart(b+1)
		if b == h.opts.NumBuckets-1 {
			hi = lo
		}
		if mid := (lo + hi) / 2; mid <= x {
			slack += w * (x - mid)
		} else {
			above += w
		}
	}
	return (slack + lambda*above) / h.total
}

// budgetViews carries the allocators of CPU and memory to the containers
// (nil: no budget).
type budgetViews [2]*budgetState

// samplesPerDay is a container's sampling rate so far.
func (c *container) samplesPerDay() float64 {
	life := c.last.Sub(c.first)
	if life <= 0 {
		return 0
	}
	return float64(c.samples) / life.Hours() * 24
}

// budgetActive reports whether rp's changes go through the allocator: a
// budget and a cost objective to price changes in.
func budgetActive(p *Policy, rp *ResourcePolicy) bool {
	return p.Engine == EngineCgpilot && p.ResizeBudget > 0 &&
		(rp.ViolationCost > 0 || rp.FleetObjective > 0 || rp.RelativeViolationCost > 0) && !math.IsInf(p.ResizeBudget, 0)
}
