package recommend

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestHindsightBoundBelowReplay: VPA's hourly targets are one of the
// solutions the bound ranges over (one target per series per hour, on the
// hourly grid), so the bound at VPA's violation rate can only be lower
// than VPA's slack; and coarser blocks can only raise it.
func TestHindsightBoundBelowReplay(t *testing.T) {
	tr := fleetTrace(7, 12, 6, 1, nil)
	vpa := mustPreset(t, "vpa")
	s, err := Replay(tr, ReplayOptions{Policy: vpa, Control: vpa, Warmup: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	prev := -1.0
	for _, block := range []time.Duration{time.Hour, 6 * time.Hour, 24 * time.Hour, 0} {
		for _, mem := range []bool{false, true} {
			m := s.Control.CPU
			if mem {
				m = s.Control.Memory
			}
			b, err := HindsightBound(tr, m.ViolationRate, BoundOptions{Block: block, Warmup: 24 * time.Hour, Memory: mem})
			if err != nil {
				t.Fatal(err)
			}
			if b.ViolationRate > m.ViolationRate {
				t.Errorf("block %v memory %v: bound at violation rate %v above the budget %v", block, mem, b.ViolationRate, m.ViolationRate)
			}
			if block == time.Hour && !(b.RelativeSlack < m.RelativeSlack) {
				t.Errorf("memory %v: hourly bound %.4f not below VPA's slack %.4f at %.4f", mem, b.RelativeSlack, m.RelativeSlack, m.ViolationRate)
			}
			if !mem {
				if b.RelativeSlack < prev {
					t.Errorf("block %v: bound %.4f below the finer blocks' %.4f", block, b.RelativeSlack, prev)
				}
				prev = b.RelativeSlack
			}
		}
	}
}

// TestHindsightBoundBruteForce: on small random series the bound equals an
// independent evaluation that scans every candidate target of every block.
func TestHindsightBoundBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for trial := range 20 {
		tr := &Trace{MinTS: 0}
		for s := range 3 {
			sr := &Series{Name: string(rune('a' + s))}
			for ts := int64(3600 * rng.IntN(5)); ts < 3*86400; ts += 1800 {
				v := math.Round(rng.ExpFloat64()*4) / 4 // ties on purpose
				sr.TS, sr.CPU = append(sr.TS, ts), append(sr.CPU, v)
			}
			tr.Series = append(tr.Series, sr)
			tr.MaxTS = max(tr.MaxTS, sr.TS[len(sr.TS)-1])
		}
		budget := 0.02 + 0.2*rng.Float64()
		o := BoundOptions{Block: 6 * time.Hour, Warmup: 12 * time.Hour}
		got, err := HindsightBound(tr, budget, o)
		if err != nil {
			t.Fatal(err)
		}
		// Brute force: every block's candidates by direct scan, the same λ.
		var viol, slack, usage, n float64
		for _, s := range tr.Series {
			from := s.TS[0] + 12*3600
			blocks := map[int64][]float64{}
			for i, ts := range s.TS {
				if ts >= from {
					blocks[floorDiv(ts, 6*3600)] = append(blocks[floorDiv(ts, 6*3600)], s.CPU[i])
					usage += s.CPU[i]
					n++
				}
			}
			for _, vs := range blocks {
				best, bv, bs := math.Inf(1), 0.0, 0.0
				for _, x := range append([]float64{0}, vs...) {
					var v, sl float64
					for _, u := range vs {
						if u > x {
							v++
						} else {
							sl += x - u
						}
					}
					if c := sl + got.Lambda*v; c < best-1e-12 || (math.Abs(c-best) <= 1e-12 && v < bv) {
						best, bv, bs = c, v, sl
					}
				}
				viol += bv
				slack += bs
			}
		}
		if math.Abs(viol/n-got.ViolationRate) > 1e-9 || math.Abs(slack/usage-got.RelativeSlack) > 1e-9 {
			t.Fatalf("trial %d: bound %+v, direct scan at the same λ gives violations %v, slack %v", trial, got, viol/n, slack/usage)
		}
		if got.ViolationRate > budget {
			t.Fatalf("trial %d: violation rate %v above the budget %v", trial, got.ViolationRate, budget)
		}
	}
}

func TestHindsightBoundErrors(t *testing.T) {
	tr := syntheticTrace(1, 1, 2)
	for _, c := range []struct {
		budget float64
		o      BoundOptions
	}{{-0.1, BoundOptions{}}, {1.5, BoundOptions{}}, {0.1, BoundOptions{Block: -time.Hour}}, {0.1, BoundOptions{Warmup: 1000 * time.Hour}}} {
		if _, err := HindsightBound(tr, c.budget, c.o); err == nil {
			t.Errorf("budget %v, %+v: no error", c.budget, c.o)
		}
	}
	cpuOnly := &Trace{Series: tr.Series, MinTS: tr.MinTS, MaxTS: tr.MaxTS}
	if _, err := HindsightBound(cpuOnly, 0.1, BoundOptions{Memory: true}); err == nil {
		t.Error("memory bound of a CPU-only trace: no error")
	}
}
