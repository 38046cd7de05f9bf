package recommend

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// bruteBlockHull returns a block's lower-hull candidates by a direct
// O(K³) test, independent of hullPush: the candidate targets (0 if every
// value is positive, then each distinct value) with (samples above, slack),
// keeping a point unless some pair of others lies on or below it.
func bruteBlockHull(vals []float64) []bbVert {
	cand := []float64{}
	if slices.Min(vals) > 0 {
		cand = append(cand, 0)
	}
	for _, v := range vals {
		if !slices.Contains(cand, v) {
			cand = append(cand, v)
		}
	}
	slices.Sort(cand)
	pts := make([]bbVert, len(cand))
	for i, x := range cand {
		for _, u := range vals {
			if u > x {
				pts[i].tail++
			} else {
				pts[i].slack += x - u
			}
		}
		pts[i].x = x
	}
	var out []bbVert
	for i, p := range pts {
		on := true
		for a := 0; a < i && on; a++ {
			for b := i + 1; b < len(pts) && on; b++ {
				ta, tb, ti := float64(pts[a].tail), float64(pts[b].tail), float64(p.tail)
				line := pts[a].slack + (pts[b].slack-pts[a].slack)*(ta-ti)/(ta-tb)
				if line <= p.slack+1e-9 {
					on = false
				}
			}
		}
		if on {
			out = append(out, p)
		}
	}
	return out
}

// bruteSeries enumerates every schedule of one series (block length,
// offset, one hull target per block) and returns, per (violations,
// changes), the least slack.
func bruteSeries(s *Series, warmup int64, blocks []time.Duration, band float64) map[[2]int]float64 {
	from := s.TS[0] + warmup
	best := map[[2]int]float64{}
	for _, block := range append(blocks, 0) { // 0: the whole span
		bl := int64(block / time.Second)
		if block == 0 {
			bl = 1 << 40
		}
		for off := int64(0); off < bl && (block > 0 || off == 0); off += 3600 {
			var hulls [][]bbVert
			var vals []float64
			id := int64(math.MinInt64)
			for i, ts := range s.TS {
				if ts < from {
					continue
				}
				if b := floorDiv(ts-off, bl); b != id {
					if vals != nil {
						hulls = append(hulls, bruteBlockHull(vals))
					}
					id, vals = b, nil
				}
				vals = append(vals, s.CPU[i])
			}
			hulls = append(hulls, bruteBlockHull(vals))
			var walk func(b int, prev float64, viol, changes int, slack float64)
			walk = func(b int, prev float64, viol, changes int, slack float64) {
				if b == len(hulls) {
					k := [2]int{viol, changes}
					if v, ok := best[k]; !ok || slack < v {
						best[k] = slack
					}
					return
				}
				for _, p := range hulls[b] {
					c := changes
					if b > 0 && math.Abs(p.x-prev) > band*prev {
						c++
					}
					walk(b+1, p.x, viol+int(p.tail), c, slack+p.slack)
				}
			}
			walk(0, 0, 0, 0, 0)
		}
	}
	return best
}

// TestBudgetBoundBruteForce: on small random fleets the bound's schedule
// has the least slack of every schedule of the family (every block length
// and offset per series, every hull target per block, changes counted with
// the scorer's dead band, or every move) at its own totals of violations
// and changes, and those totals fit the budgets.
func TestBudgetBoundBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 5))
	blocks := []time.Duration{4 * time.Hour, 2 * time.Hour}
	for trial := range 12 {
		tr := &Trace{}
		for s := range 2 {
			sr := &Series{Name: string(rune('a' + s))}
			level := 1 + 3*rng.Float64()
			for ts := int64(1800 * rng.IntN(3)); ts < 14*3600; ts += 1800 {
				v := level * (1 + 0.8*math.Sin(float64(ts)/86400*2*math.Pi*3))
				v = math.Round((v+rng.ExpFloat64())*4) / 4 // ties on purpose
				sr.TS, sr.CPU = append(sr.TS, ts), append(sr.CPU, v)
			}
			tr.Series = append(tr.Series, sr)
		}
		var n int
		var usage, days float64
		for _, s := range tr.Series {
			for _, ts := range s.TS[2:] {
				_ = ts
				n++
			}
			for _, v := range s.CPU[2:] {
				usage += v
			}
			days += float64(s.TS[len(s.TS)-1]-s.TS[2]) / 86400
		}
		budget := 0.05 + 0.2*rng.Float64()
		perDay := []float64{1, 3, 8}[trial%3]
		every := trial%4 == 3 // every move counted
		band := 0.1
		if every {
			band = 0
		}
		got, err := BudgetBound(tr, budget, BudgetBoundOptions{Warmup: time.Hour, Blocks: blocks, ChangesPerSeriesDay: perDay, CountEveryMove: every})
		if err != nil {
			t.Fatal(err)
		}
		viol := int(math.Round(got.ViolationRate * float64(n)))
		changes := int(math.Round(got.ChangesPerSeriesDay * days))
		if got.ViolationRate > budget+1e-12 || got.ChangesPerSeriesDay > perDay+1e-12 {
			t.Fatalf("trial %d: %+v over the budgets %v violations, %v changes/day", trial, got, budget, perDay)
		}
		// Combine the series' direct searches: least slack with at most the
		// bound's violations and changes.
		a, b := bruteSeries(tr.Series[0], 3600, blocks, band), bruteSeries(tr.Series[1], 3600, blocks, band)
		direct, directBudget := math.Inf(1), math.Inf(1)
		for ka, sa := range a {
			for kb, sb := range b {
				v, c := ka[0]+kb[0], ka[1]+kb[1]
				if v <= viol && c <= changes {
					direct = min(direct, sa+sb)
				}
				if float64(v) <= budget*float64(n) && float64(c) <= perDay*days {
					directBudget = min(directBudget, sa+sb)
				}
			}
		}
		if math.Abs(direct/usage-got.RelativeSlack) > 1e-9 {
			t.Fatalf("trial %d: bound slack %.6f at %d violations, %d changes; direct search %.6f", trial, got.RelativeSlack, viol, changes, direct/usage)
		}
		if got.RelativeSlack < directBudget/usage-1e-9 {
			t.Fatalf("trial %d: bound %.6f below the direct optimum at the budgets %.6f", trial, got.RelativeSlack, directBudget/usage)
		}
		t.Logf("trial %d: bound %.4f, direct optimum at the budgets %.4f (%d viol, %d changes)", trial, got.RelativeSlack, directBudget/usage, viol, changes)
	}
}

// TestBudgetBoundBelowDayBound: the day bound's schedules (one target per
// series per UTC day) are in the budgeted family, so when the day bound
// spends no more changes than the budget the budgeted bound is at most its
// slack; a larger budget can only lower it, and it never exceeds the
// budgets it is given.
func TestBudgetBoundBelowDayBound(t *testing.T) {
	tr := fleetTrace(7, 8, 4, 1, nil)
	for _, mem := range []bool{false, true} {
		for _, budget := range []float64{0.01, 0.03} {
			day, err := HindsightBound(tr, budget, BoundOptions{Block: 24 * time.Hour, Warmup: 24 * time.Hour, Memory: mem})
			if err != nil {
				t.Fatal(err)
			}
			prev := math.Inf(1)
			for _, perDay := range []float64{0.5, 1, 3} {
				b, err := BudgetBound(tr, budget, BudgetBoundOptions{Warmup: 24 * time.Hour, Memory: mem, ChangesPerSeriesDay: perDay})
				if err != nil {
					t.Fatal(err)
				}
				if b.ViolationRate > budget || b.ChangesPerSeriesDay > perDay {
					t.Errorf("memory %v budget %v/%v: bound %+v over its budgets", mem, budget, perDay, b)
				}
				if day.ChangesPerSeriesDay <= perDay && b.RelativeSlack > day.RelativeSlack+1e-12 {
					t.Errorf("memory %v budget %v/%v: budgeted bound %.4f above the day bound %.4f (%.2f changes/day)", mem, budget, perDay, b.RelativeSlack, day.RelativeSlack, day.ChangesPerSeriesDay)
				}
				if b.RelativeSlack > prev+1e-12 {
					t.Errorf("memory %v budget %v: %v changes/day gives %.4f, more than a smaller budget's %.4f", mem, budget, perDay, b.RelativeSlack, prev)
				}
				prev = b.RelativeSlack
				t.Logf("memory %v viol %v changes %v: day %.4f (%.2f/d), budgeted %.4f (%.2f/d) %v", mem, budget, perDay, day.RelativeSlack, day.ChangesPerSeriesDay, b.RelativeSlack, b.ChangesPerSeriesDay, b.BlockHours)
			}
		}
	}
}

// TestBoundsOfZeroUsage: a trace whose memory column is all zero has a
// zero memory bound (a zero target costs nothing), not an error.
func TestBoundsOfZeroUsage(t *testing.T) {
	tr := fleetTrace(3, 3, 3, 1, nil)
	for _, s := range tr.Series {
		clear(s.Mem)
	}
	if b, err := HindsightBound(tr, 0.01, BoundOptions{Block: 24 * time.Hour, Memory: true}); err != nil || b.RelativeSlack != 0 {
		t.Errorf("day bound of zero memory: %+v, %v", b, err)
	}
	if b, err := BudgetBound(tr, 0.01, BudgetBoundOptions{Memory: true}); err != nil || b.RelativeSlack != 0 {
		t.Errorf("budget bound of zero memory: %+v, %v", b, err)
	}
	for _, o := range []BudgetBoundOptions{{ChangesPerSeriesDay: -1}, {Blocks: []time.Duration{90 * time.Minute}}, {Warmup: -time.Hour}} {
		if _, err := BudgetBound(tr, 0.01, o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	if _, err := BudgetBound(tr, 1.5, BudgetBoundOptions{}); err == nil {
		t.Error("violation budget 1.5: no error")
	}
}
