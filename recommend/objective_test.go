package recommend

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestObjectiveTracksShapeChange: one container, 5-minute samples, steady
// for 12 days, then bursty for 12 days. Aimed at a 2 % CPU objective, the
// realised violation rate of the targets in force settles near 2 % once
// the usage is bursty, with at most one resize a day. While it is steady
// (±10 %), the whole distribution fits inside the 20 % hysteresis band, so
// the rate stays below the objective (an upper bound) and the target
// within 20 % of the exact 98th percentile.
func TestObjectiveTracksShapeChange(t *testing.T) {
	const objective = 0.02
	r, err := New(SLOPolicy("slo-test", objective, 0.001))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	usage := func(day int) float64 {
		if day < 12 {
			return 1 * math.Exp(0.1*rng.NormFloat64()) // steady: ±10 %
		}
		return 1 * math.Exp(0.6*rng.NormFloat64()) // bursty: a heavy tail
	}
	var target, prev, steadyTarget float64
	var viol, n [24]int
	resizes := 0
	for step := 0; step < 24*24; step++ {
		now := t0.Add(time.Duration(step) * time.Hour)
		if rec, ok := r.Recommend("c", now); ok {
			target = rec.CPU.Target
			if prev > 0 && math.Abs(target-prev) > 0.1*prev {
				resizes++
			}
			prev = target
		}
		if step == 11*24 {
			steadyTarget = target
		}
		for k := range 12 {
			ts := now.Add(time.Duration(k) * 5 * time.Minute)
			u := usage(step / 24)
			if target > 0 {
				n[step/24]++
				if u > target {
					viol[step/24]++
				}
			}
			if err := r.Add("c", Sample{Time: ts, CPUCores: u, MemoryBytes: 1e9}); err != nil {
				t.Fatal(err)
			}
		}
	}
	rate := func(from, to int) float64 {
		v, m := 0, 0
		for d := from; d < to; d++ {
			v, m = v+viol[d], m+n[d]
		}
		return float64(v) / float64(m)
	}
	steady, bursty := rate(5, 12), rate(19, 24)
	t.Logf("realised: steady days 5-11 %.4f, bursty days 19-23 %.4f, %d resizes in 24 days", steady, bursty, resizes)
	if bursty < objective/2 || bursty > objective*1.6 {
		t.Errorf("bursty regime: realised violation rate %.4f, want near the objective %.2f", bursty, objective)
	}
	ideal := math.Exp(0.1 * 2.0537) // the 98th percentile of the steady usage
	if steady > objective || steadyTarget > 1.2*ideal || steadyTarget < ideal {
		t.Errorf("steady regime: rate %.4f, target %.3f, want ≤ %.2f and a target in [%.3f, %.3f]", steady, steadyTarget, objective, ideal, 1.2*ideal)
	}
	if resizes > 24 {
		t.Errorf("%d resizes in 24 days, want ≤ 1 a day", resizes)
	}
	rec, _ := r.Recommend("c", t0.Add(24*24*time.Hour))
	e := rec.CPU.Explain
	if e.Mode != "objective" || e.Objective != objective || !(e.Percentile > 0.9 && e.Percentile < 1) || e.SampleWeight <= 0 || time.Duration(e.History) < 23*24*time.Hour {
		t.Errorf("explanation %+v", e)
	}
	if s := e.String(); !strings.Contains(s, "objective 2%") || !strings.Contains(s, "realised") {
		t.Errorf("explanation text %q", s)
	}
	if b, err := json.Marshal(rec); err != nil || !strings.Contains(string(b), `"realisedViolationRate"`) {
		t.Errorf("recommendation JSON %s, %v", b, err)
	}
}

// TestTrackerMarginWhenPercentileIsNotEnough: usage that grows past its own
// history cannot be met by any percentile; the objective adds a margin.
func TestTrackerMarginWhenPercentileIsNotEnough(t *testing.T) {
	rp := ResourcePolicy{Objective: 0.01, ObjectiveHalfLife: Duration(72 * time.Hour)}
	tr := tracker{inForce: 1}
	tr.step(&rp, t0)
	for h := 1; h <= 20*24; h++ {
		for range 12 {
			tr.observe(2) // every sample above the target in force
		}
		tr.step(&rp, t0.Add(time.Duration(h)*time.Hour))
	}
	if tr.eps != rp.Objective/objectiveRange || !(tr.margin > 0.2) || tr.margin > maxObjectiveMargin {
		t.Errorf("ε %v, margin %v: want ε at its floor and a margin", tr.eps, tr.margin)
	}
	for h := 1; h <= 60*24; h++ {
		for range 12 {
			tr.observe(0.1) // none above
		}
		tr.step(&rp, t0.Add(time.Duration(20*24+h)*time.Hour))
	}
	if tr.margin != 0 || tr.eps <= rp.Objective/objectiveRange {
		t.Errorf("after quiet months ε %v, margin %v: want the margin given back first", tr.eps, tr.margin)
	}
}

func TestWithOverrides(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	base := mustPreset(t, DefaultPreset)
	p, err := base.WithOverrides(Overrides{
		CPU:    ResourceOverrides{Objective: f(0.005), MinAllowed: f(0.05), MaxAllowed: f(4), TargetSaturation: f(0.8)},
		Memory: ResourceOverrides{Percentile: f(0.99)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.CPU.Objective != 0.005 || p.CPU.ViolationCost != 0 || p.CPU.Min != 0.05 || p.CPU.Max != 4 || p.CPU.Saturation != 0.8 || p.CPU.ObjectiveHalfLife == 0 {
		t.Errorf("cpu %+v", p.CPU)
	}
	if p.Memory.Percentile != 0.99 || p.Memory.Objective != 0 || p.Memory.ViolationCost != 0 {
		t.Errorf("memory %+v", p.Memory)
	}
	if base.CPU.Objective != 0 || base.CPU.ViolationCost == 0 {
		t.Error("WithOverrides changed its receiver")
	}
	v, err := mustPreset(t, "vpa").WithOverrides(Overrides{CPU: ResourceOverrides{Percentile: f(0.95), MinAllowed: f(0.05)}})
	if err != nil || v.VPA.TargetCPUPercentile != 0.95 || v.VPA.PodMinCPUMillicores != 50 {
		t.Errorf("vpa overrides: %+v, %v", v.VPA, err)
	}
	for name, o := range map[string]Overrides{
		"both percentile and objective": {CPU: ResourceOverrides{Percentile: f(0.9), Objective: f(0.01)}},
		"objective out of range":        {CPU: ResourceOverrides{Objective: f(0.5)}},
		"negative objective":            {Memory: ResourceOverrides{Objective: f(-0.1)}},
		"max below min":                 {CPU: ResourceOverrides{MinAllowed: f(2), MaxAllowed: f(1)}},
		"saturation over 1":             {CPU: ResourceOverrides{TargetSaturation: f(1.5)}},
		"percentile 0":                  {Memory: ResourceOverrides{Percentile: f(0)}},
		"NaN min":                       {CPU: ResourceOverrides{MinAllowed: f(math.NaN())}},
	} {
		if _, err := base.WithOverrides(o); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%s: %v, want ErrInvalidPolicy", name, err)
		}
	}
	if _, err := mustPreset(t, "vpa").WithOverrides(Overrides{CPU: ResourceOverrides{Objective: f(0.01)}}); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("objective on the vpa engine: %v", err)
	}
	if _, err := ParsePolicy([]byte(`{"base":"cgpilot-slo","cpu":{"objective":0.3}}`)); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("objective 0.3 in a policy file: %v", err)
	}
}
