package recommend

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOOMLimit(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		limit, usage, factor, maxA float64
		kills                      int
		want                       float64
	}{
		{"first kill bumps the limit", 1e9, 9e8, 0.2, 0, 1, 1.2e9},
		{"usage above the limit counts", 1e9, 1.5e9, 0.2, 0, 1, 1.8e9},
		{"repeated kills compound", 1e9, 9e8, 0.2, 0, 3, 1e9 * 1.2 * 1.2 * 1.2},
		{"capped by maxAllowed", 1e9, 9e8, 0.5, 1.3e9, 2, 1.3e9},
		{"zero factor keeps the limit", 1e9, 5e8, 0, 0, 4, 1e9},
		{"no limit known: usage", 0, 7e8, 0.1, 0, 1, 7.7e8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OOMLimit(tc.limit, tc.usage, tc.factor, tc.kills, tc.maxA); math.Abs(got-tc.want) > 1e-3 {
				t.Errorf("OOMLimit() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRecordOOM(t *testing.T) {
	p := mustPreset(t, DefaultPreset)
	p.Memory.Max = 2.5e9
	r, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	r.SetResources("c", Resources{MemoryLimit: 1e9}) // no request: the OOM formula alone sets the limit
	for i := range 300 {
		r.Add("c", Sample{Time: t0.Add(time.Duration(i) * time.Minute), CPUCores: 0.1, MemoryBytes: 4e8})
	}
	before, _ := r.Recommend("c", t0.Add(5*time.Hour))
	kill := t0.Add(5 * time.Hour)
	// Kill k: max(limit in force, usage) × 1.2^k: 1e9·1.2, 1.2e9·1.2², then 1.728e9·1.2³ capped at 2.5e9.
	for k, want := range []float64{1e9 * 1.2, 1.2e9 * 1.2 * 1.2, 2.5e9} {
		if err := r.RecordOOM("c", OOMEvent{Time: kill.Add(time.Duration(k) * time.Minute), UsageBytes: 9.9e8}); err != nil {
			t.Fatal(err)
		}
		got, _ := r.Recommend("c", kill.Add(time.Duration(k)*time.Minute+time.Second))
		if math.Abs(got.Memory.Limit-want) > 1 {
			t.Errorf("after kill %d: memory limit %v, want %v", k+1, got.Memory.Limit, want)
		}
		// The histogram took VPA's bump, so the target covers the kill usage.
		if got.Memory.Target < oomBump(9.9e8) || got.Memory.Target <= before.Memory.Target {
			t.Errorf("after kill %d: target %v, want ≥ %v", k+1, got.Memory.Target, oomBump(9.9e8))
		}
	}
	// Outside the window the OOM limit no longer applies.
	late, _ := r.Recommend("c", kill.Add(48*time.Hour))
	if late.Memory.Limit != 0 {
		t.Errorf("OOM limit %v still applied after the window", late.Memory.Limit)
	}
	if err := r.RecordOOM("c", OOMEvent{Time: kill, UsageBytes: math.NaN()}); !errors.Is(err, ErrInvalidSample) {
		t.Errorf("NaN usage: %v", err)
	}
	if oomBump(1e8) != 1e8+100*mib || oomBump(1e10) != 1.2e10 {
		t.Errorf("oomBump: %v %v", oomBump(1e8), oomBump(1e10))
	}
}

func TestRecommenderAdd(t *testing.T) {
	r, _ := New(mustPreset(t, DefaultPreset))
	for _, tc := range []struct {
		name string
		s    Sample
		want error
	}{
		{"first", Sample{Time: t0, CPUCores: 0.5, MemoryBytes: 1e8}, nil},
		{"later", Sample{Time: t0.Add(time.Second), CPUCores: 0, MemoryBytes: 0}, nil},
		{"earlier", Sample{Time: t0, CPUCores: 0.5, MemoryBytes: 1e8}, ErrStaleSample},
		{"negative cpu", Sample{Time: t0.Add(time.Hour), CPUCores: -1, MemoryBytes: 1e8}, ErrInvalidSample},
		{"NaN memory", Sample{Time: t0.Add(time.Hour), CPUCores: 1, MemoryBytes: math.NaN()}, ErrInvalidSample},
		{"infinite cpu", Sample{Time: t0.Add(time.Hour), CPUCores: math.Inf(1), MemoryBytes: 1}, ErrInvalidSample},
	} {
		if err := r.Add("c", tc.s); !errors.Is(err, tc.want) {
			t.Errorf("%s: Add() = %v, want %v", tc.name, err, tc.want)
		}
	}
	r.Forget("c")
	if r.Containers() != 0 {
		t.Error("Forget left state")
	}
	if _, ok := r.Recommend("unknown", t0); ok {
		t.Error("recommendation for an unknown container")
	}
}

// TestShortHistory: no recommendation before MinHistory, then a widened one
// that narrows as history grows.
func TestShortHistory(t *testing.T) {
	r, _ := New(mustPreset(t, DefaultPreset))
	add := func(from, to time.Duration) {
		for d := from; d < to; d += time.Minute {
			r.Add("c", Sample{Time: t0.Add(d), CPUCores: 1, MemoryBytes: 1e9})
		}
	}
	add(0, 30*time.Minute)
	if _, ok := r.Recommend("c", t0.Add(30*time.Minute)); ok {
		t.Error("recommendation before MinHistory")
	}
	add(30*time.Minute, 2*time.Hour)
	early, ok := r.Recommend("c", t0.Add(2*time.Hour))
	if !ok {
		t.Fatal("no recommendation after 2 h")
	}
	r2, _ := New(mustPreset(t, DefaultPreset))
	for d := time.Duration(0); d < 30*time.Hour; d += time.Minute {
		r2.Add("c", Sample{Time: t0.Add(d), CPUCores: 1, MemoryBytes: 1e9})
	}
	settled, _ := r2.Recommend("c", t0.Add(30*time.Hour))
	if !(early.CPU.Target > settled.CPU.Target*1.5) || !(early.CPU.Upper > settled.CPU.Upper) {
		t.Errorf("short history target %v / upper %v not widened against %v / %v", early.CPU.Target, early.CPU.Upper, settled.CPU.Target, settled.CPU.Upper)
	}
}

// TestHysteresisAndStepLimit drives resourceState.propose directly, each
// proposal put in force.
func TestHysteresisAndStepLimit(t *testing.T) {
	rp := ResourcePolicy{Percentile: 0.9, Saturation: 1, Round: 0.001, MaxStepDown: 0.5, MaxStepUp: 1, DownBand: 0.3, UpBand: 0.1}
	var s resourceState
	for _, tc := range []struct {
		est, want float64
	}{
		{1, 1},       // first value is taken as is
		{1.05, 1},    // inside the up band: held
		{0.8, 1},     // inside the down band: held
		{1.2, 1.2},   // above the band: follows
		{5, 2.4},     // step up limited to +100 %
		{0.1, 1.2},   // step down limited to −50 %
		{0.1, 0.6},   // and again
		{0.55, 0.6},  // inside the band
		{0.41, 0.41}, // below it: follows
	} {
		got := s.propose(&rp, tc.est, false)
		if math.Abs(got-tc.want) > 1e-9 {
			t.Fatalf("propose(%v) = %v, want %v", tc.est, got, tc.want)
		}
		s.held = got
	}
}

func TestClampRound(t *testing.T) {
	rp := ResourcePolicy{Min: 0.1, Max: 4, Round: 0.05}
	for _, tc := range []struct{ in, want float64 }{
		{0, 0.1}, {0.11, 0.15}, {0.15, 0.15}, {3.99, 4}, {9, 4},
	} {
		if got := clampRound(&rp, tc.in); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("clampRound(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestLimitRecommendation(t *testing.T) {
	p := mustPreset(t, DefaultPreset)
	p.CPU.LimitRatio = 3
	r, _ := New(p)
	for i := range 200 {
		r.Add("kept", Sample{Time: t0.Add(time.Duration(i) * time.Minute), CPUCores: 1, MemoryBytes: 1e9})
		r.Add("ratio", Sample{Time: t0.Add(time.Duration(i) * time.Minute), CPUCores: 1, MemoryBytes: 1e9})
	}
	r.SetResources("kept", Resources{CPURequest: 1, CPULimit: 2, MemoryRequest: 1e9, MemoryLimit: 1.5e9})
	kept, _ := r.Recommend("kept", t0.Add(4*time.Hour))
	if math.Abs(kept.CPU.Limit/kept.CPU.Target-2) > 1e-9 || math.Abs(kept.Memory.Limit/kept.Memory.Target-1.5) > 1e-9 {
		t.Errorf("original limit/request ratio not kept: %+v", kept)
	}
	ratio, _ := r.Recommend("ratio", t0.Add(4*time.Hour))
	if math.Abs(ratio.CPU.Limit/ratio.CPU.Target-3) > 1e-9 || ratio.Memory.Limit != 0 {
		t.Errorf("policy ratio: %+v", ratio)
	}
}

func TestPolicyValidateAndParse(t *testing.T) {
	for _, name := range PresetNames() {
		if err := mustPreset(t, name).Validate(); err != nil {
			t.Errorf("preset %s: %v", name, err)
		}
	}
	if _, err := Preset("nope"); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("unknown preset: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Policy)
		want string
	}{
		{"engine", func(p *Policy) { p.Engine = "x" }, "engine"},
		{"percentile", func(p *Policy) { p.CPU.Percentile = 0 }, "cpu.percentile"},
		{"saturation", func(p *Policy) { p.Memory.Saturation = 1.5 }, "memory.saturation"},
		{"max below min", func(p *Policy) { p.CPU.Max = 0.001 }, "cpu.max"},
		{"down band", func(p *Policy) { p.CPU.DownBand = 1 }, "cpu.down_band"},
		{"NaN cost", func(p *Policy) { p.CPU.ViolationCost = math.NaN() }, "cpu.violation_cost"},
		{"limit ratio", func(p *Policy) { p.Memory.LimitRatio = 0.5 }, "memory.limit_ratio"},
		{"fast percentile", func(p *Policy) { p.CPU.FastHalfLife = Duration(time.Hour) }, "cpu.fast_percentile"},
		{"oom factor", func(p *Policy) { p.OOMFactor = -1 }, "OOM"},
	} {
		p := mustPreset(t, DefaultPreset)
		tc.mod(&p)
		if err := p.Validate(); !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidPolicy naming %q", tc.name, err, tc.want)
		}
		if _, err := New(p); err == nil {
			t.Errorf("%s: New accepted an invalid policy", tc.name)
		}
	}
	p, err := ParsePolicy([]byte(`{"base":"cgpilot-balanced","name":"mine","cpu":{"percentile":0.8,"half_life":"6h"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "mine" || p.CPU.Percentile != 0.8 || time.Duration(p.CPU.HalfLife) != 6*time.Hour || p.CPU.ViolationCost != 11 {
		t.Errorf("parsed %+v", p.CPU)
	}
	for _, bad := range []string{`{`, `{"base":"nope"}`, `{"cpu":{"half_life":"soon"}}`, `{"cpu":{"percentile":7}}`} {
		if _, err := ParsePolicy([]byte(bad)); err == nil {
			t.Errorf("ParsePolicy(%s) accepted", bad)
		}
	}
}

// Example shows the agent's use: samples every 10 s, an OOM kill, and a
// recommendation per decision step.
func Example() {
	policy, _ := Preset(DefaultPreset)
	r, _ := New(policy)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.SetResources("default/web/app", Resources{CPURequest: 1, CPULimit: 2, MemoryRequest: 512 << 20, MemoryLimit: 1 << 30})
	for i := range 6 * 60 * 3 { // three hours of 10 s samples
		_ = r.Add("default/web/app", Sample{Time: start.Add(time.Duration(i) * 10 * time.Second), CPUCores: 0.25, MemoryBytes: 300 << 20})
	}
	_ = r.RecordOOM("default/web/app", OOMEvent{Time: start.Add(3 * time.Hour), UsageBytes: 1 << 30, LimitBytes: 1 << 30})
	rec, ok := r.Recommend("default/web/app", start.Add(3*time.Hour))
	fmt.Println(ok)
	fmt.Printf("cpu target %.3f cores, limit %.3f\n", rec.CPU.Target, rec.CPU.Limit)
	fmt.Printf("memory limit %.0f MiB after the OOM kill\n", rec.Memory.Limit/(1<<20))
	// Output:
	// true
	// cpu target 0.485 cores, limit 0.970
	// memory limit 1229 MiB after the OOM kill
}

// TestFastHistogram: with FastHalfLife the target follows a recent level
// shift sooner than the slow histogram alone, and survives a checkpoint.
func TestFastHistogram(t *testing.T) {
	slow := mustPreset(t, DefaultPreset)
	slow.CPU.ViolationCost = 0
	slow.CPU.Percentile = 0.9
	fast := slow
	fast.Name = "fast"
	fast.CPU.FastHalfLife, fast.CPU.FastPercentile = Duration(time.Hour), 0.9
	targets := map[string]float64{}
	for _, p := range []Policy{slow, fast} {
		r, err := New(p)
		if err != nil {
			t.Fatal(err)
		}
		at := t0
		for ; at.Before(t0.Add(72 * time.Hour)); at = at.Add(5 * time.Minute) {
			r.Add("c", Sample{Time: at, CPUCores: 0.2, MemoryBytes: 1e8})
		}
		for end := at.Add(time.Hour); at.Before(end); at = at.Add(5 * time.Minute) {
			r.Add("c", Sample{Time: at, CPUCores: 1.5, MemoryBytes: 1e8})
		}
		path := filepath.Join(t.TempDir(), "c")
		if err := r.SaveCheckpoint(path, at); err != nil {
			t.Fatal(err)
		}
		back, _ := New(p)
		if err := back.LoadCheckpoint(path); err != nil {
			t.Fatal(err)
		}
		rec, _ := back.Recommend("c", at)
		targets[p.Name] = rec.CPU.Target
	}
	if !(targets["fast"] > 1.5 && targets[slow.Name] < 1) {
		t.Errorf("targets after a 1 h level shift: %v; want the fast policy above 1.5 cores and the slow one below 1", targets)
	}
}

// TestSameTimeSamplesAreInstances: the pods of one workload are sampled in
// one round with one time; each sample counts, as VPA counts every pod of
// an aggregation.
func TestSameTimeSamplesAreInstances(t *testing.T) {
	p := mustPreset(t, DefaultPreset)
	one, two := mustNew(t, p), mustNew(t, p)
	t0 := time.Unix(1e9, 0)
	for i := 0; i < 2000; i++ {
		at := t0.Add(time.Duration(i) * 10 * time.Second)
		for _, s := range []Sample{{Time: at, CPUCores: 0.2, MemoryBytes: 2e8}, {Time: at, CPUCores: 1.8, MemoryBytes: 9e8}} {
			if err := two.Add("w", s); err != nil {
				t.Fatalf("same-time sample: %v", err)
			}
		}
		if err := one.Add("w", Sample{Time: at, CPUCores: 0.2, MemoryBytes: 2e8}); err != nil {
			t.Fatal(err)
		}
	}
	a, ok1 := one.Recommend("w", t0.Add(6*time.Hour))
	b, ok2 := two.Recommend("w", t0.Add(6*time.Hour))
	if !ok1 || !ok2 || !(b.CPU.Target > a.CPU.Target) || !(b.Memory.Target > a.Memory.Target) {
		t.Fatalf("the second instance did not count: one %+v, two %+v", a, b)
	}
}

// TestRecommendWith: overrides change how the target is read from the
// shared histograms; invalid ones are refused.
func TestRecommendWith(t *testing.T) {
	r := mustNew(t, mustPreset(t, DefaultPreset))
	t0 := time.Unix(1e9, 0)
	for i := 0; i < 3000; i++ {
		cpu := 0.1 + float64(i%100)/100 // 0.1 to 1.09 cores, uniformly
		if err := r.Add("c", Sample{Time: t0.Add(time.Duration(i) * 10 * time.Second), CPUCores: cpu, MemoryBytes: 3e8}); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(9 * time.Hour)
	half, p99 := 0.5, 0.99
	low, ok, err := r.RecommendWith("c", now, Overrides{CPU: ResourceOverrides{Percentile: &half}})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	r2 := mustNew(t, mustPreset(t, DefaultPreset))
	for i := 0; i < 3000; i++ {
		cpu := 0.1 + float64(i%100)/100
		_ = r2.Add("c", Sample{Time: t0.Add(time.Duration(i) * 10 * time.Second), CPUCores: cpu, MemoryBytes: 3e8})
	}
	high, ok, err := r2.RecommendWith("c", now, Overrides{CPU: ResourceOverrides{Percentile: &p99}})
	if err != nil || !ok || !(high.CPU.Target > low.CPU.Target) {
		t.Fatalf("p99 %v not above p50 %v (%v %v)", high.CPU.Target, low.CPU.Target, ok, err)
	}
	if _, _, err := r.RecommendWith("c", now, Overrides{CPU: ResourceOverrides{Percentile: &half, Objective: &half}}); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("percentile and objective together: %v", err)
	}
	if _, ok, err := r.RecommendWith("missing", now, Overrides{}); ok || err != nil {
		t.Fatalf("unknown container: %v %v", ok, err)
	}
}
