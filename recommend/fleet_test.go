package recommend

import (
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

// fleetTrace is a node's worth of containers of mixed sizes and shapes,
// 5-minute samples: sizes log-uniform over two orders of magnitude times
// scale, shapes steady, diurnal, bursty and level-shifting; memory steady
// with slow drift (no steps: usage above everything seen is the one thing
// no λ can price). spiky(s, ts) may change the burst rate of the bursty
// series over time (the shape-change tests).
func fleetTrace(seed uint64, series, days int, scale float64, spiky func(s int, ts int64) float64) *Trace {
	rng := rand.New(rand.NewPCG(seed, 11))
	const t0 = int64(1375315200)
	tr := &Trace{MinTS: math.MaxInt64, MaxTS: math.MinInt64, HasMemory: true}
	for s := range series {
		sr := &Series{Name: string(rune('A'+s%26)) + string(rune('a'+s/26))}
		size := scale * 0.05 * math.Pow(160, rng.Float64())
		mem := 2e8 * math.Pow(20, rng.Float64())
		shape := s % 4
		level := 1.0
		for ts := t0 + int64(rng.IntN(300)); ts < t0+int64(days)*86400; ts += 300 {
			u := 1 + 0.1*rng.NormFloat64()
			switch shape {
			case 1: // diurnal
				u *= 1 + 0.5*math.Sin(float64(ts-t0)/86400*2*math.Pi)
			case 2: // bursty
				p := 0.02
				if spiky != nil {
					p = spiky(s, ts)
				}
				if rng.Float64() < p {
					u += rng.ExpFloat64() * 3
				}
			case 3: // level shifts, about one every two days
				if rng.IntN(576) == 0 {
					level = math.Exp(rng.NormFloat64() * 0.5)
				}
				u *= level
			}
			mem *= 1 + 2e-6*rng.NormFloat64()
			m := mem * (1 + 0.02*rng.Float64())
			if rng.IntN(50) == 0 {
				m *= 1 + 0.2*rng.ExpFloat64() // a transient peak
			}
			sr.TS = append(sr.TS, ts)
			sr.CPU = append(sr.CPU, size*max(u, 0.01))
			sr.Mem = append(sr.Mem, m)
		}
		tr.Series = append(tr.Series, sr)
		tr.MinTS, tr.MaxTS = min(tr.MinTS, sr.TS[0]), max(tr.MaxTS, sr.TS[len(sr.TS)-1])
		tr.Rows += len(sr.TS)
	}
	return tr
}

func fleetReplay(t *testing.T, tr *Trace, cpuObj, memObj float64, warmup time.Duration) Summary {
	t.Helper()
	return fleetReplayBudget(t, tr, cpuObj, memObj, warmup, DefaultResizeBudget)
}

func fleetReplayBudget(t *testing.T, tr *Trace, cpuObj, memObj float64, warmup time.Duration, budget float64) Summary {
	t.Helper()
	p := FleetPolicy("fleet", cpuObj, memObj)
	p.ResizeBudget = budget
	s, err := Replay(tr, ReplayOptions{Policy: p, Control: mustPreset(t, "vpa"), Warmup: warmup, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFleetMeetsObjective: on a synthetic node of 40 containers of mixed
// sizes and shapes, the realised violation rate of all of them together
// lands near the stated objective, for two objectives per resource, and
// the looser objective buys less slack. The controller knows nothing of
// the trace but its samples, as they come.
func TestFleetMeetsObjective(t *testing.T) {
	tr := fleetTrace(1, 40, 12, 1, nil)
	var prev Summary
	for i, obj := range []float64{0.01, 0.04} {
		s := fleetReplay(t, tr, obj, obj/10, 72*time.Hour)
		t.Logf("objective CPU %.3g, memory %.3g: CPU %.4f at slack %.3f, memory %.5f at slack %.3f; λ-free VPA control CPU %.4f at %.3f",
			obj, obj/10, s.Policy.CPU.ViolationRate, s.Policy.CPU.RelativeSlack, s.Policy.Memory.ViolationRate, s.Policy.Memory.RelativeSlack,
			s.Control.CPU.ViolationRate, s.Control.CPU.RelativeSlack)
		for _, c := range []struct {
			name      string
			got, want float64
		}{{"cpu", s.Policy.CPU.ViolationRate, obj}, {"memory", s.Policy.Memory.ViolationRate, obj / 10}} {
			if c.got < 0.6*c.want || c.got > 1.4*c.want {
				t.Errorf("objective %.3g: %s realised %.5f, want within ±40 %% of %.5f", obj, c.name, c.got, c.want)
			}
		}
		if i > 0 && !(s.Policy.CPU.RelativeSlack < prev.Policy.CPU.RelativeSlack && s.Policy.Memory.RelativeSlack < prev.Policy.Memory.RelativeSlack) {
			t.Errorf("a looser objective did not buy less slack: CPU %.3f then %.3f, memory %.3f then %.3f",
				prev.Policy.CPU.RelativeSlack, s.Policy.CPU.RelativeSlack, prev.Policy.Memory.RelativeSlack, s.Policy.Memory.RelativeSlack)
		}
		prev = s
	}
}

// TestFleetScaleFree: the same node with every CPU usage 20 times larger
// (Bitbrains-sized VMs against Azure-sized ones) meets the same objective:
// λ is learnt, not a constant in cores.
func TestFleetScaleFree(t *testing.T) {
	small := fleetReplay(t, fleetTrace(2, 40, 10, 0.2, nil), 0.02, 0.002, 72*time.Hour)
	large := fleetReplay(t, fleetTrace(2, 40, 10, 4, nil), 0.02, 0.002, 72*time.Hour)
	for _, s := range []Summary{small, large} {
		if r := s.Policy.CPU.ViolationRate; r < 0.6*0.02 || r > 1.4*0.02 {
			t.Errorf("CPU realised %.4f, want within ±40 %% of 0.02", r)
		}
	}
	// Floors (0.1 core) bind on the small node, so its slack differs; the
	// violation rates must not.
	if d := math.Abs(small.Policy.CPU.ViolationRate - large.Policy.CPU.ViolationRate); d > 0.3*0.02 {
		t.Errorf("CPU realised %.4f on the small node, %.4f on the large one", small.Policy.CPU.ViolationRate, large.Policy.CPU.ViolationRate)
	}
}

// TestFleetTracksShapeChange: the bursty containers of a node turn five
// times burstier half-way through. The controller re-solves λ on the new
// histograms and keeps the node at its objective, before the change and
// over the last four days after it; VPA's fixed percentile, replayed on
// the same samples, does not (else the change would not matter).
func TestFleetTracksShapeChange(t *testing.T) {
	const days = 16
	tr := fleetTrace(3, 40, days, 1, func(s int, ts int64) float64 {
		if ts-1375315200 > days/2*86400 {
			return 0.1
		}
		return 0.02
	})
	before := fleetReplay(t, cutTrace(tr, days/2), 0.02, 0.002, (days/2-4)*24*time.Hour)
	after := fleetReplay(t, tr, 0.02, 0.002, (days-4)*24*time.Hour)
	for _, s := range []struct {
		name string
		s    Summary
	}{{"before the change", before}, {"after it", after}} {
		if r := s.s.Policy.CPU.ViolationRate; r < 0.6*0.02 || r > 1.4*0.02 {
			t.Errorf("%s: CPU realised %.4f over four days, want within ±40 %% of 0.02", s.name, r)
		}
	}
	if b, a := before.Control.CPU.ViolationRate, after.Control.CPU.ViolationRate; a < 1.5*b {
		t.Errorf("VPA's violation rate went from %.4f to %.4f only: the shape change does not matter", b, a)
	}
}

// cutTrace keeps the samples of tr's first days.
func cutTrace(tr *Trace, days int) *Trace {
	cut := &Trace{MinTS: tr.MinTS, MaxTS: tr.MinTS, HasMemory: tr.HasMemory}
	for _, s := range tr.Series {
		n := sort.Search(len(s.TS), func(i int) bool { return s.TS[i] >= tr.MinTS+int64(days)*86400 })
		cut.Series = append(cut.Series, &Series{Name: s.Name, TS: s.TS[:n], CPU: s.CPU[:n], Mem: s.Mem[:n]})
		cut.MaxTS = max(cut.MaxTS, s.TS[n-1])
		cut.Rows += n
	}
	return cut
}

// TestFleetSingleContainerShapeChange: a node of one container whose
// bursts triple half-way through: its own violation rate returns to the
// objective after the change. Without a resize budget: one container
// alone cannot follow its λ down within one change a day (with the
// default budget it lands at 0.8 %, on the safe side).
func TestFleetSingleContainerShapeChange(t *testing.T) {
	const days = 20
	tr := fleetTrace(4, 3, days, 1, func(s int, ts int64) float64 {
		if ts-1375315200 > days/2*86400 {
			return 0.06
		}
		return 0.02
	})
	tr.Series = tr.Series[2:3] // the bursty one
	tr.Rows = len(tr.Series[0].TS)
	s := fleetReplayBudget(t, tr, 0.02, 0.002, (days-5)*24*time.Hour, 0)
	if r := s.Policy.CPU.ViolationRate; r < 0.5*0.02 || r > 1.5*0.02 {
		t.Errorf("CPU realised %.4f over the last five days, want within ±50 %% of 0.02", r)
	}
}

// TestFleetHullMatchesCostOptimum: the hull the controller solves on
// predicts, for every λ, exactly the tail share that costOptimum's target
// leaves (ties aside), on random histograms.
func TestFleetHullMatchesCostOptimum(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	rp := &ResourcePolicy{Percentile: 0.5}
	now := time.Unix(1375315200, 0)
	for trial := range 200 {
		h := mustHistogram(CPUHistogramOptions(), nil)
		n := 1 + rng.IntN(300)
		for range n {
			h.AddSample(math.Exp(rng.NormFloat64()*1.5), 1+rng.Float64(), now.Add(-time.Duration(rng.IntN(48))*time.Hour))
		}
		var f fleetState
		tk := &tracker{}
		f.build(rp, []fleetMember{{hist: h, t: tk}})
		for range 30 {
			lambda := math.Exp(rng.NormFloat64() * 3)
			x := max(h.costOptimum(lambda), h.Percentile(rp.Percentile))
			want := 1 - h.cdf(x)
			if got := f.predicted(lambda); math.Abs(got-want) > 1e-9 {
				t.Fatalf("trial %d, λ %g: hull predicts tail %g, costOptimum's target %g leaves %g", trial, lambda, got, x, want)
			}
		}
	}
}

// TestFleetRecommender drives a Recommender as the agent does: samples
// every 5 minutes, one decision round an hour (every container, some
// twice, one through a percentile override). One tick per round, the
// explanation says where the target came from, and the override's
// container is left out of the controller.
func TestFleetRecommender(t *testing.T) {
	r := mustNew(t, FleetPolicy("fleet", 0.02, 0.002))
	tr := fleetTrace(6, 8, 4, 1, nil)
	pct := 0.9
	fixed := Overrides{CPU: ResourceOverrides{Percentile: &pct}}
	idx := make([]int, len(tr.Series))
	var lastLambda float64
	for now := tr.MinTS + 3600; now < tr.MaxTS; now += 3600 {
		for si, s := range tr.Series {
			for ; idx[si] < len(s.TS) && s.TS[idx[si]] < now; idx[si]++ {
				if err := r.Add(s.Name, Sample{Time: time.Unix(s.TS[idx[si]], 0), CPUCores: s.CPU[idx[si]], MemoryBytes: s.Mem[idx[si]]}); err != nil {
					t.Fatal(err)
				}
			}
		}
		at := time.Unix(now, 0)
		for si, s := range tr.Series {
			if si == 0 {
				if _, _, err := r.RecommendWith(s.Name, at, fixed); err != nil {
					t.Fatal(err)
				}
				continue
			}
			rec, ok := r.Recommend(s.Name, at)
			if !ok {
				continue
			}
			if si == 1 { // a second call in the same round ticks nothing
				lambda := r.views()[0].lambda
				again, _ := r.Recommend(s.Name, at.Add(time.Second))
				if r.views()[0].lambda != lambda || again.CPU.Explain.ViolationCost != rec.CPU.Explain.ViolationCost {
					t.Fatalf("a second call in the round moved λ from %v to %v", lambda, r.views()[0].lambda)
				}
			}
			if now > tr.MinTS+2*86400 {
				e := rec.CPU.Explain
				if e.FleetObjective != 0.02 || !(e.ViolationCost > 0) || (e.Mode != "fleet" && e.Mode != "percentile") ||
					!strings.Contains(e.String(), "node objective 2%") {
					t.Fatalf("explanation %+v: %s", e, e.String())
				}
				lastLambda = e.ViolationCost
			}
		}
		r.mu.Lock()
		for _, m := range r.fleetMembers(0) {
			if m.t == &r.containers[tr.Series[0].Name].cpuT {
				r.mu.Unlock()
				t.Fatal("the container with a percentile override is a member of the fleet")
			}
		}
		r.mu.Unlock()
	}
	if !(lastLambda > 0) {
		t.Fatal("no λ solved in four days")
	}
}
