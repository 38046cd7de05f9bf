package recommend

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// BoundOptions configures HindsightBound.
type BoundOptions struct {
	// Block is how long a target is held: one target per series per Block
	// (24 h: the resize budget of about one a day). 0 means one target per
	// series for its whole scored span.
	Block time.Duration
	// Warmup as in ReplayOptions: samples before first_ts + Warmup are not
	// scored. Blocks are aligned to multiples of Block since the Unix
	// epoch, as Replay's boundaries are to multiples of its step.
	Warmup time.Duration
	// Memory scores memory instead of CPU.
	Memory bool
}

// Bound is the best any recommender could have done in hindsight.
type Bound struct {
	RelativeSlack       float64 `json:"relative_slack"`
	ViolationRate       float64 `json:"violation_rate"`
	ChangesPerSeriesDay float64 `json:"changes_per_series_day"`
	// Lambda is the cost of one violation (cores or bytes) at which the
	// budget binds.
	Lambda float64 `json:"lambda"`
	// ChangeCost is BudgetBound's cost μ of one counted change at which
	// the change budget binds (0: it does not).
	ChangeCost float64 `json:"change_cost,omitempty"`
	// MovesPerSeriesDay counts BudgetBound's target changes of any size,
	// those inside the scorer's 10 % dead band included: the resizes a
	// live system would make to follow the schedule.
	MovesPerSeriesDay float64 `json:"moves_per_series_day,omitempty"`
	// Family names the schedules the bound ranges over.
	Family string `json:"family,omitempty"`
	// BlockHours counts the series by the block length BudgetBound chose
	// for them ("24h": 12, ..., "whole": one target for the whole span).
	BlockHours map[string]int `json:"block_hours,omitempty"`
}

// HindsightBound returns the least relative slack (Σ slack / Σ usage, as
// Replay scores it) that any recommender holding one target per series per
// Block could have reached on tr at a violation rate of at most budget,
// knowing every sample in advance. No online policy with at most one
// change per Block does better; how far a policy stays above it is what
// prediction costs. Violations count samples strictly above the target
// (the scoring of traces/README.md); ChangesPerSeriesDay counts the bound's
// own target changes of more than 10 %.
//
// It is the Lagrangian of the problem: every (series, block) takes the
// target minimising slack + λ·violations over its own samples (exactly,
// from their sorted values), and λ is bisected to the smallest value
// whose total violations fit the budget.
func HindsightBound(tr *Trace, budget float64, o BoundOptions) (Bound, error) {
	if !(budget >= 0 && budget <= 1) || o.Block < 0 || o.Warmup < 0 {
		return Bound{}, fmt.Errorf("%w: bound budget %v, block %v, warmup %v", ErrInvalidPolicy, budget, o.Block, o.Warmup)
	}
	if o.Memory && !tr.HasMemory {
		return Bound{}, fmt.Errorf("%w: memory bound of a CPU-only trace", ErrInvalidPolicy)
	}
	var (
		hull   []hullPoint
		start  []int // per block, into hull; one past the end last
		series []int // per block, its series
		usage  float64
		n      int
		days   float64
		vals   []float64
	)
	for si, s := range tr.Series {
		if len(s.TS) == 0 {
			continue
		}
		from := s.TS[0] + int64(o.Warmup/time.Second)
		i := 0
		for i < len(s.TS) && s.TS[i] < from {
			i++
		}
		if i == len(s.TS) {
			continue
		}
		days += float64(s.TS[len(s.TS)-1]-s.TS[i]) / 86400
		for i < len(s.TS) {
			end := len(s.TS)
			if bs := int64(o.Block / time.Second); bs > 0 {
				blockEnd := (floorDiv(s.TS[i], bs) + 1) * bs
				end = i
				for end < len(s.TS) && s.TS[end] < blockEnd {
					end++
				}
			}
			vals = vals[:0]
			for j := i; j < end; j++ {
				v := s.CPU[j]
				if o.Memory {
					v = s.Mem[j]
				}
				vals = append(vals, v)
				usage += v
			}
			n += end - i
			i = end
			slices.Sort(vals)
			// Candidate targets, smallest first: 0 (every positive sample
			// violates) and each distinct value x (those above it violate),
			// with the slack x·#(≤ x) − Σ(≤ x).
			start = append(start, len(hull))
			series = append(series, si)
			first := len(hull)
			if vals[0] > 0 {
				hull = append(hull, hullPoint{tail: float64(len(vals)), slack: 0, x: 0})
			}
			sumLE := 0.0
			for k, v := range vals {
				sumLE += v
				if k+1 < len(vals) && vals[k+1] == v {
					continue // the last of equal values: all of them ≤ x
				}
				hull = hullPush(hull, first, hullPoint{tail: float64(len(vals) - k - 1), slack: v*float64(k+1) - sumLE, x: v})
			}
			sealHull(hull[first:])
		}
	}
	start = append(start, len(hull))
	if n == 0 {
		return Bound{}, fmt.Errorf("%w: no scored samples", ErrTrace)
	}
	if usage == 0 {
		return Bound{}, nil // a zero target everywhere: no slack, no violation
	}
	eval := func(lambda float64) (viol, slack float64) {
		for b := range len(start) - 1 {
			p := hullAt(hull[start[b]:start[b+1]], lambda)
			viol += p.tail
			slack += p.slack
		}
		return viol, slack
	}
	limit := budget * float64(n)
	lo, hi := 0.0, usage/float64(n)
	for v, _ := eval(hi); v > limit && hi < math.MaxFloat64/4; v, _ = eval(hi) {
		lo, hi = hi, hi*4
	}
	for range 100 {
		mid := (lo + hi) / 2
		if v, _ := eval(mid); v > limit {
			lo = mid
		} else {
			hi = mid
		}
	}
	viol, slack := eval(hi)
	out := Bound{RelativeSlack: slack / usage, ViolationRate: viol / float64(n), Lambda: hi}
	changes := 0
	for b := 1; b < len(start)-1; b++ {
		if series[b] != series[b-1] {
			continue
		}
		x0 := hullAt(hull[start[b-1]:start[b]], hi).x
		x1 := hullAt(hull[start[b]:start[b+1]], hi).x
		if math.Abs(x1-x0) > 0.1*x0 {
			changes++
		}
	}
	if days > 0 {
		out.ChangesPerSeriesDay = float64(changes) / days
	}
	return out, nil
}
