package recommend

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// BudgetBlocks are the block lengths BudgetBound lets every series choose
// from: a day down to the replay's hour.
var BudgetBlocks = []time.Duration{24 * time.Hour, 12 * time.Hour, 8 * time.Hour, 6 * time.Hour,
	4 * time.Hour, 3 * time.Hour, 2 * time.Hour, time.Hour}

// BudgetBoundOptions configures BudgetBound.
type BudgetBoundOptions struct {
	// Warmup as in ReplayOptions: samples before first_ts + Warmup are not
	// scored.
	Warmup time.Duration
	// Memory scores memory instead of CPU.
	Memory bool
	// ChangesPerSeriesDay is the resize budget: counted changes (the
	// scorer's, |new − old| > 10 % of old) summed over all series, divided
	// by the scored series-days. Default 1.
	ChangesPerSeriesDay float64
	// Blocks are the block lengths a series may choose from (default
	// BudgetBlocks), each a multiple of OffsetStep; OffsetStep (default
	// 1 h, the replay's step) is the grid of the blocks' offsets.
	Blocks     []time.Duration
	OffsetStep time.Duration
	// CountEveryMove counts every target change against the budget, not
	// only those beyond the scorer's 10 % dead band: the bound of a policy
	// that pays for every resize.
	CountEveryMove bool
	// Workers evaluate series in parallel (default 1); the result is the
	// same.
	Workers int
}

// BudgetBoundFamily names the schedules BudgetBound ranges over, for
// tables that print the bound beside its family.
const BudgetBoundFamily = "per-series block 1–24 h and offset, targets changed anywhere, ≤ budget counted changes (10 % dead band) over all series-days"

// BudgetBoundEveryMoveFamily names BudgetBound's schedules with
// CountEveryMove.
const BudgetBoundEveryMoveFamily = "per-series block 1–24 h and offset, ≤ budget changes of any size over all series-days"

// BudgetBound returns the least relative slack of a hindsight schedule
// under the scorer's own budget: at most budget violations (share of
// scored samples) and at most o.ChangesPerSeriesDay counted changes per
// series-day on average over the whole trace, the 10 % dead band counted
// as Replay's scorer counts it. Every series chooses its own block length
// (o.Blocks) and offset (a multiple of o.OffsetStep), or one block for its
// whole span, and holds one target per block; a target is a vertex of its block's lower hull of (samples
// above, slack), i.e. the best target of that block for some violation
// cost. Knowing the whole trace, consecutive targets may stay within the
// dead band of each other to save a change.
//
// It is a Lagrangian over the fleet: with a cost λ per violation and μ
// per counted change, every series minimises slack + λ·violations +
// μ·changes exactly (a dynamic programme over its blocks for every block
// length and offset; the dead band is a window of the previous block's
// sorted targets), and λ and μ are searched for the least slack whose
// totals fit both budgets. The answer is a real schedule, so the optimum
// of the family is at most its slack; a Lagrangian minimiser is the
// optimum at the totals it reaches (TestBudgetBoundBruteForce compares it
// with a direct search), so the gap to the exact optimum at the budgets is
// at most the duality gap of the last step of the search.
func BudgetBound(tr *Trace, budget float64, o BudgetBoundOptions) (Bound, error) {
	if o.ChangesPerSeriesDay == 0 {
		o.ChangesPerSeriesDay = 1
	}
	if len(o.Blocks) == 0 {
		o.Blocks = BudgetBlocks
	}
	if o.OffsetStep == 0 {
		o.OffsetStep = time.Hour
	}
	if !(budget >= 0 && budget <= 1) || o.Warmup < 0 || !(o.ChangesPerSeriesDay > 0) || math.IsInf(o.ChangesPerSeriesDay, 0) || o.OffsetStep < time.Second {
		return Bound{}, fmt.Errorf("%w: budget bound: violations %v, changes %v/day, warmup %v, offset step %v",
			ErrInvalidPolicy, budget, o.ChangesPerSeriesDay, o.Warmup, o.OffsetStep)
	}
	for _, b := range o.Blocks {
		if b <= 0 || b%o.OffsetStep != 0 {
			return Bound{}, fmt.Errorf("%w: budget bound: block %v not a positive multiple of the offset step %v", ErrInvalidPolicy, b, o.OffsetStep)
		}
	}
	if o.Memory && !tr.HasMemory {
		return Bound{}, fmt.Errorf("%w: memory bound of a CPU-only trace", ErrInvalidPolicy)
	}
	bb := &budgetBound{workers: max(o.Workers, 1), band: 0.1}
	if o.CountEveryMove {
		bb.band = 0
	}
	var n int
	var usage, days float64
	for _, s := range tr.Series {
		bs, sn, su, sd := newBBSeries(s, &o)
		if sn == 0 {
			continue
		}
		bb.series = append(bb.series, bs)
		n, usage, days = n+sn, usage+su, days+sd
	}
	if n == 0 {
		return Bound{}, fmt.Errorf("%w: no scored samples", ErrTrace)
	}
	if usage == 0 {
		return Bound{}, nil // a zero target everywhere: no slack, no violation
	}
	limitV, limitC := budget*float64(n), o.ChangesPerSeriesDay*days
	best := bbTotals{slack: math.Inf(1)}
	var bestL, bestM float64
	consider := func(t bbTotals, l, m float64) {
		if t.viol <= limitV && float64(t.changes) <= limitC && t.slack < best.slack {
			best, bestL, bestM = t, l, m
		}
	}
	// solveLambda returns the smallest λ (relative precision 1e-3) whose
	// violations fit at μ, and the totals there.
	guess := usage / float64(n)
	solveLambda := func(mu float64) (float64, bbTotals) {
		lo, hi := guess/2, guess*2
		tHi := bb.eval(hi, mu)
		for i := 0; tHi.viol > limitV && i < 200; i++ {
			lo, hi = hi, hi*4
			tHi = bb.eval(hi, mu)
		}
		for i := 0; i < 200; i++ {
			t := bb.eval(lo, mu)
			if t.viol > limitV {
				break
			}
			hi, tHi = lo, t
			lo /= 4
			if lo < guess*1e-15 {
				lo = 0
				break
			}
		}
		for hi-lo > 1e-3*hi {
			mid := (lo + hi) / 2
			if t := bb.eval(mid, mu); t.viol > limitV {
				lo = mid
			} else {
				hi, tHi = mid, t
			}
		}
		guess = hi
		consider(tHi, hi, mu)
		return hi, tHi
	}
	_, t0 := solveLambda(0)
	if float64(t0.changes) > limitC {
		// The smallest μ whose schedule fits the change budget, searched in
		// log steps (each with its own λ).
		muLo, muHi := 0.0, usage/days
		for i := 0; i < 60; i++ {
			if _, t := solveLambda(muHi); float64(t.changes) <= limitC {
				break
			}
			muLo, muHi = muHi, muHi*4
		}
		for i := 0; i < 24 && (muLo == 0 || muHi-muLo > 1e-2*muHi); i++ {
			mid := (muLo + muHi) / 2
			if muLo == 0 {
				mid = muHi / 8
				if mid < usage/days*1e-9 {
					break
				}
			}
			if _, t := solveLambda(mid); float64(t.changes) <= limitC {
				muHi = mid
			} else {
				muLo = mid
			}
		}
	}
	if math.IsInf(best.slack, 1) {
		return Bound{}, fmt.Errorf("%w: budget bound: no schedule within %v violations and %v changes/day", ErrTrace, budget, o.ChangesPerSeriesDay)
	}
	out := Bound{RelativeSlack: best.slack / usage, ViolationRate: best.viol / float64(n), Lambda: bestL, ChangeCost: bestM,
		Family: BudgetBoundFamily}
	if o.CountEveryMove {
		out.Family = BudgetBoundEveryMoveFamily
	}
	if days > 0 {
		out.ChangesPerSeriesDay = float64(best.changes) / days
		out.MovesPerSeriesDay = float64(best.moves) / days
	}
	out.BlockHours = make(map[string]int)
	for _, c := range best.chosen {
		if c == 0 {
			out.BlockHours["whole"]++
		} else {
			out.BlockHours[fmt.Sprint(c.Hours())+"h"]++
		}
	}
	return out, nil
}

// bbVert is one candidate target of a block: a vertex of its lower hull.
type bbVert struct {
	x, slack float64
	tail     int32 // samples above x
}

// bbSeries is one series' blocks under every schedule (block length and
// offset), flattened: schedule i has blocks blocks[sched[i]:sched[i+1]],
// block j has vertices verts[blocks[j]:blocks[j+1]], x ascending.
type bbSeries struct {
	verts  []bbVert
	blocks []int32
	sched  []int32
	length []time.Duration // per schedule, its block length (0: the whole span)
}

func newBBSeries(s *Series, o *BudgetBoundOptions) (bs *bbSeries, n int, usage, days float64) {
	if len(s.TS) == 0 {
		return nil, 0, 0, 0
	}
	from := s.TS[0] + int64(o.Warmup/time.Second)
	i := 0
	for i < len(s.TS) && s.TS[i] < from {
		i++
	}
	if i == len(s.TS) {
		return nil, 0, 0, 0
	}
	ts := s.TS[i:]
	v := s.CPU[i:]
	if o.Memory {
		v = s.Mem[i:]
	}
	for _, x := range v {
		usage += x
	}
	days = float64(ts[len(ts)-1]-ts[0]) / 86400
	bs = &bbSeries{}
	step := int64(o.OffsetStep / time.Second)
	var vals []float64
	for _, block := range o.Blocks {
		bl := int64(block / time.Second)
		for off := int64(0); off < bl; off += step {
			bs.sched = append(bs.sched, int32(len(bs.blocks)))
			bs.length = append(bs.length, block)
			for a := 0; a < len(ts); {
				end := a
				id := floorDiv(ts[a]-off, bl)
				for end < len(ts) && floorDiv(ts[end]-off, bl) == id {
					end++
				}
				vals = append(vals[:0], v[a:end]...)
				a = end
				bs.blocks = append(bs.blocks, int32(len(bs.verts)))
				bs.verts = appendBlockHull(bs.verts, vals)
			}
		}
	}
	// And one target for the whole span: a series that holds still.
	bs.sched = append(bs.sched, int32(len(bs.blocks)))
	bs.length = append(bs.length, 0)
	bs.blocks = append(bs.blocks, int32(len(bs.verts)))
	bs.verts = appendBlockHull(bs.verts, append(vals[:0], v...))
	bs.sched = append(bs.sched, int32(len(bs.blocks)))
	bs.blocks = append(bs.blocks, int32(len(bs.verts)))
	bs.verts = slices.Clip(bs.verts)
	return bs, len(ts), usage, days
}

// appendBlockHull appends the lower hull of a block's candidate targets
// (0, then each distinct value; samples above, slack below) in ascending x.
func appendBlockHull(dst []bbVert, vals []float64) []bbVert {
	slices.Sort(vals)
	var hull []hullPoint
	if vals[0] > 0 {
		hull = append(hull, hullPoint{tail: float64(len(vals))})
	}
	sumLE := 0.0
	for k, x := range vals {
		sumLE += x
		if k+1 < len(vals) && vals[k+1] == x {
			continue
		}
		hull = hullPush(hull, 0, hullPoint{tail: float64(len(vals) - k - 1), slack: x*float64(k+1) - sumLE, x: x})
	}
	for _, p := range hull {
		dst = append(dst, bbVert{x: p.x, slack: p.slack, tail: int32(p.tail)})
	}
	return dst
}

type budgetBound struct {
	band    float64 // the dead band: changes of at most band·old are not counted
	series  []*bbSeries
	workers int
	scratch []bbScratch
}

// bbTotals are the sums of one evaluation.
type bbTotals struct {
	slack, viol float64
	changes     int
	moves       int             // target changes of any size, counted or not
	chosen      []time.Duration // per series, the block length chosen
}

// bbScratch is one worker's DP buffers.
type bbScratch struct {
	cur, prev []float64
	deque     []int
	pred      []int32 // per vertex of the schedule: the vertex before it, −1−k for a change from vertex k
}

// eval returns the totals of every series' best schedule at (λ, μ).
func (bb *budgetBound) eval(lambda, mu float64) bbTotals {
	out := bbTotals{chosen: make([]time.Duration, len(bb.series))}
	parts := make([]bbTotals, bb.workers)
	if len(bb.scratch) != bb.workers {
		bb.scratch = make([]bbScratch, bb.workers)
	}
	var wg sync.WaitGroup
	for w := range bb.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := &bb.scratch[w]
			for i := w; i < len(bb.series); i += bb.workers {
				bs := bb.series[i]
				best, bestV := 0, math.Inf(1)
				for k := range len(bs.sched) - 1 {
					if v := bs.dp(k, lambda, mu, bb.band, sc, false); v < bestV {
						best, bestV = k, v
					}
				}
				slack, viol, ch, mv := bs.path(best, lambda, mu, bb.band, sc)
				parts[w].slack += slack
				parts[w].viol += viol
				parts[w].changes += ch
				parts[w].moves += mv
				out.chosen[i] = bs.length[best]
			}
		}()
	}
	wg.Wait()
	for _, p := range parts {
		out.slack += p.slack
		out.viol += p.viol
		out.changes += p.changes
		out.moves += p.moves
	}
	return out
}

// dp returns the least slack + λ·violations + μ·changes of schedule k;
// with track, sc.pred records every vertex's best predecessor.
func (bs *bbSeries) dp(k int, lambda, mu, band float64, sc *bbScratch, track bool) float64 {
	b0, b1 := bs.sched[k], bs.sched[k+1]
	if track {
		sc.pred = sc.pred[:0]
	}
	deque := sc.deque[:0] // indices into prev, increasing x, increasing cost
	defer func() { sc.deque = deque }()
	for b := b0; b < b1; b++ {
		vs := bs.verts[bs.blocks[b]:bs.blocks[b+1]]
		sc.cur = sc.cur[:0]
		if b == b0 {
			for _, v := range vs {
				sc.cur = append(sc.cur, v.slack+lambda*float64(v.tail))
				if track {
					sc.pred = append(sc.pred, 0)
				}
			}
		} else {
			pv := bs.verts[bs.blocks[b-1]:bs.blocks[b]]
			argmin := 0
			for j, c := range sc.prev {
				if c < sc.prev[argmin] {
					argmin = j
				}
			}
			change := sc.prev[argmin] + mu
			deque = deque[:0]
			next := 0 // next prev vertex to enter the window
			for _, v := range vs {
				// The window: previous targets old with |x − old| ≤ band·old.
				for next < len(pv) && (pv[next].x <= v.x || pv[next].x-v.x <= band*pv[next].x) {
					for len(deque) > 0 && sc.prev[deque[len(deque)-1]] >= sc.prev[next] {
						deque = deque[:len(deque)-1]
					}
					deque = append(deque, next)
					next++
				}
				for len(deque) > 0 && !(math.Abs(v.x-pv[deque[0]].x) <= band*pv[deque[0]].x) {
					deque = deque[1:]
				}
				c := v.slack + lambda*float64(v.tail)
				if len(deque) > 0 && sc.prev[deque[0]] <= change {
					c += sc.prev[deque[0]]
					if track {
						sc.pred = append(sc.pred, int32(deque[0]))
					}
				} else {
					c += change
					if track {
						sc.pred = append(sc.pred, int32(-1-argmin))
					}
				}
				sc.cur = append(sc.cur, c)
			}
		}
		sc.prev, sc.cur = sc.cur, sc.prev
	}
	return slices.Min(sc.prev)
}

// path reruns schedule k's programme and walks its best path back: its
// slack, violations, counted changes and moves (changes of any size).
func (bs *bbSeries) path(k int, lambda, mu, band float64, sc *bbScratch) (slack, viol float64, changes, moves int) {
	bs.dp(k, lambda, mu, band, sc, true)
	b0, b1 := bs.sched[k], bs.sched[k+1]
	at := 0
	for j, c := range sc.prev {
		if c < sc.prev[at] {
			at = j
		}
	}
	for b := b1 - 1; b >= b0; b-- {
		base := int(bs.blocks[b] - bs.blocks[b0]) // this block's first vertex in pred
		v := bs.verts[int(bs.blocks[b])+at]
		slack += v.slack
		viol += float64(v.tail)
		if b == b0 {
			break
		}
		p := sc.pred[base+at]
		if p < 0 {
			changes++
			p = -1 - p
		}
		at = int(p)
		if bs.verts[int(bs.blocks[b-1])+at].x != v.x {
			moves++
		}
	}
	return slack, viol, changes, moves
}
