package recommend

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// syntheticTrace has bursty CPU, drifting memory, a gap and irregular steps.
func syntheticTrace(seed uint64, series int, days int) *Trace {
	rng := rand.New(rand.NewPCG(seed, 7))
	tr := &Trace{MinTS: math.MaxInt64, MaxTS: math.MinInt64}
	for s := range series {
		sr := &Series{Name: string(rune('a' + s))}
		ts := int64(1375315200 + 97*s)
		end := ts + int64(days)*86400
		for ts < end {
			cpu := 0.05 * float64(s+1) * (1 + math.Sin(float64(ts)/86400*2*math.Pi))
			if rng.IntN(50) == 0 {
				cpu += rng.ExpFloat64() * float64(s+1)
			}
			mem := 2e8*float64(s+1) + rng.Float64()*5e7 + float64(ts-1375315200)*10
			sr.TS, sr.CPU, sr.Mem = append(sr.TS, ts), append(sr.CPU, cpu), append(sr.Mem, mem)
			ts += 240 + int64(rng.IntN(120))
			if rng.IntN(2000) == 0 {
				ts += 6 * 3600
			}
		}
		tr.Series = append(tr.Series, sr)
		tr.MinTS, tr.MaxTS = min(tr.MinTS, sr.TS[0]), max(tr.MaxTS, sr.TS[len(sr.TS)-1])
		tr.Rows += len(sr.TS)
	}
	return tr
}

func mustPreset(t testing.TB, name string) Policy {
	t.Helper()
	p, err := Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func replayRowsWith(t *testing.T, tr *Trace, workers int, preset string) (Summary, []RecRow) {
	t.Helper()
	var rows []RecRow
	s, err := Replay(tr, ReplayOptions{Policy: mustPreset(t, preset), Control: mustPreset(t, "vpa"),
		Warmup: 24 * time.Hour, Workers: workers, Rows: func(r RecRow) error { rows = append(rows, r); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	return s, rows
}

// TestReplayUsesOnlyPastSamples: changing every sample at or after a cut
// leaves every row at a boundary ≤ the cut unchanged, and changes later
// ones, for every preset (the objective trackers included: they may only
// count samples against a target already in force).
func TestReplayUsesOnlyPastSamples(t *testing.T) {
	for _, preset := range PresetNames() {
		t.Run(preset, func(t *testing.T) { testOnlyPastSamples(t, preset) })
	}
}

func testOnlyPastSamples(t *testing.T, preset string) {
	tr := syntheticTrace(1, 3, 4)
	_, before := replayRowsWith(t, tr, 1, preset)
	cut := tr.MinTS + 3*86400 + 1800
	for _, s := range tr.Series {
		for i, ts := range s.TS {
			if ts >= cut {
				s.CPU[i] *= 10
				s.Mem[i] *= 10
			}
		}
	}
	_, after := replayRowsWith(t, tr, 1, preset)
	if len(before) != len(after) {
		t.Fatalf("%d rows, then %d", len(before), len(after))
	}
	changedLater := false
	for i := range before {
		if before[i].TS <= cut && !reflect.DeepEqual(before[i], after[i]) {
			t.Fatalf("row %s@%d changed although all its samples are before the cut", before[i].Series, before[i].TS)
		}
		if before[i].TS > cut && !reflect.DeepEqual(before[i], after[i]) {
			changedLater = true
		}
	}
	if !changedLater {
		t.Error("no row after the cut changed: the test does not exercise the boundary")
	}
}

// TestReplayDeterministicAcrossWorkers: the same rows and scores with one
// worker or several, also for the fleet controller (which sums over all
// series every step); each series' rows on the hourly grid, in series
// order, or boundary by boundary with the fleet controller.
func TestReplayDeterministicAcrossWorkers(t *testing.T) {
	tr := syntheticTrace(2, 5, 3)
	for _, preset := range []string{DefaultPreset, FleetPreset, CyclicPreset, "platform-sl-0.6"} {
		p := mustPreset(t, preset)
		together := newReplayFleet(&p).active() // node-level state: boundary by boundary
		s1, r1 := replayRowsWith(t, tr, 1, preset)
		s2, r2 := replayRowsWith(t, tr, 3, preset)
		if !reflect.DeepEqual(s1, s2) || !reflect.DeepEqual(r1, r2) {
			t.Errorf("%s: result depends on the number of workers", preset)
		}
		last := map[string]int64{}
		for i, r := range r1 {
			if together && i > 0 && r.TS < r1[i-1].TS {
				t.Fatalf("%s: row %d at %d after %d: not in boundary order", preset, i, r.TS, r1[i-1].TS)
			}
			if !together && i > 0 && r.Series != r1[i-1].Series && last[r.Series] != 0 {
				t.Fatalf("%s: rows of %s resume after another series'", preset, r.Series)
			}
			if p, ok := last[r.Series]; ok && r.TS != p+3600 {
				t.Fatalf("%s: rows of %s not on the hourly grid: %d after %d", preset, r.Series, r.TS, p)
			}
			last[r.Series] = r.TS
		}
		if len(last) != len(tr.Series) {
			t.Errorf("%s: rows of %d series, want %d", preset, len(last), len(tr.Series))
		}
	}
}

// TestReplayConstantUsage checks the metrics against values computed by hand
// from VPA's formula for a constant series.
func TestReplayConstantUsage(t *testing.T) {
	const cpu, mem = 0.5, 1e9
	sr := &Series{Name: "flat"}
	for ts := int64(0); ts < 3*86400; ts += 300 {
		sr.TS, sr.CPU, sr.Mem = append(sr.TS, ts), append(sr.CPU, cpu), append(sr.Mem, mem)
	}
	tr := &Trace{Series: []*Series{sr}, MinTS: 0, MaxTS: sr.TS[len(sr.TS)-1], Rows: len(sr.TS)}
	vpa := mustPreset(t, "vpa")
	s, err := Replay(tr, ReplayOptions{Policy: vpa, Control: vpa, Warmup: 24 * time.Hour, Step: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	co, mo := CPUHistogramOptions(), MemoryHistogramOptions()
	m := int64(co.BucketStart(co.FindBucket(cpu)+1) * 1000)
	cpuTarget := float64(m+int64(float64(m)*0.15)) / 1000
	b := int64(mo.BucketStart(mo.FindBucket(mem) + 1))
	memTarget := float64(b + int64(float64(b)*0.15))
	scored := int64(2 * 86400 / 300) // day 2 and 3
	want := PolicyScore{Policy: "vpa", ScoredSeries: 1, ScoredSamples: scored,
		CPU: Metrics{RelativeSlack: (cpuTarget - cpu) / cpu, MeanSlackSumOverSeries: cpuTarget - cpu,
			UsageToTargetP95PerSeries: cpu / cpuTarget},
		Memory: Metrics{RelativeSlack: (memTarget - mem) / mem, MeanSlackSumOverSeries: memTarget - mem,
			UsageToTargetP95PerSeries: mem / memTarget},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	got := s.Policy
	if got.ScoredSamples != want.ScoredSamples || got.ScoredSeries != 1 {
		t.Fatalf("scored %d samples in %d series, want %d in 1", got.ScoredSamples, got.ScoredSeries, want.ScoredSamples)
	}
	for _, c := range []struct {
		name      string
		got, want Metrics
	}{{"cpu", got.CPU, want.CPU}, {"memory", got.Memory, want.Memory}} {
		if !near(c.got.RelativeSlack, c.want.RelativeSlack) || !near(c.got.MeanSlackSumOverSeries, c.want.MeanSlackSumOverSeries) ||
			!near(c.got.UsageToTargetP95PerSeries, c.want.UsageToTargetP95PerSeries) || c.got.ViolationRate != 0 || c.got.ChangesPerSeriesDay != 0 {
			t.Errorf("%s: got %+v, want %+v", c.name, c.got, c.want)
		}
	}
	if !reflect.DeepEqual(s.Policy, s.Control) {
		t.Error("the same policy as policy and control scored differently")
	}
}

// TestScoreDefinitions feeds targets by hand into the scorer.
func TestScoreDefinitions(t *testing.T) {
	var a scoreAcc
	// Series 1: 4 samples over 1 day; targets 1, 1, 1.05 (no change: 5 %),
	// 2 (change); usages 0.5, 1.3 (violation > 20 %), 1.0, 1.0.
	var s1 seriesScore
	for i, v := range []struct{ target, u float64 }{{1, 0.5}, {1, 1.3}, {1.05, 1}, {2, 1}} {
		s1.observe(true, int64(i)*28800, both(v.u), Recommendation{CPU: Estimate{Target: v.target}, Memory: Estimate{Target: v.target}})
	}
	s1.observe(false, 99, both(1), Recommendation{})
	// Series 2: 2 samples over 1 day, always exactly at target.
	var s2 seriesScore
	s2.observe(true, 0, both(1), Recommendation{CPU: Estimate{Target: 1}, Memory: Estimate{Target: 1}})
	s2.observe(true, 86400, both(1), Recommendation{CPU: Estimate{Target: 1}, Memory: Estimate{Target: 1}})
	a.merge(&s1)
	a.merge(&s2)
	got := a.score("x")
	slack := 0.5 + 0 + 0.05 + 1.0
	usage := 0.5 + 1.3 + 1 + 1 + 2
	want := Metrics{
		RelativeSlack:          slack / usage,
		ViolationRate:          1.0 / 6,
		ViolationOver20pctRate: 1.0 / 6,
		MeanSlackSumOverSeries: slack/4 + 0,
		// Series 1 ratios 0.5, 1.3, 0.952, 0.5: nearest-rank p95 of 4 is the 4th = 1.3.
		UsageToTargetP95PerSeries: (1.3 + 1) / 2,
		// One change over (0.667 + 1) series-days.
		ChangesPerSeriesDay: 1 / (float64(3*28800)/86400 + 1),
	}
	if got.ScoredSamples != 6 || got.ScoredSeries != 2 || got.Unrecommended != 1 {
		t.Errorf("counts %+v", got)
	}
	for name, m := range map[string]Metrics{"cpu": got.CPU, "memory": got.Memory} {
		if math.Abs(m.RelativeSlack-want.RelativeSlack) > 1e-12 || m.ViolationRate != want.ViolationRate ||
			m.ViolationOver20pctRate != want.ViolationOver20pctRate || math.Abs(m.MeanSlackSumOverSeries-want.MeanSlackSumOverSeries) > 1e-12 ||
			m.UsageToTargetP95PerSeries != want.UsageToTargetP95PerSeries || math.Abs(m.ChangesPerSeriesDay-want.ChangesPerSeriesDay) > 1e-12 {
			t.Errorf("%s: got %+v\nwant %+v", name, m, want)
		}
	}
}

// both is a scored sample of u for CPU and memory, peaks equal to means.
func both(u float64) *usage {
	return &usage{cpu: u, mem: u, cpuPeak: u, memPeak: u, memScored: true}
}

func TestReplayOptionsErrors(t *testing.T) {
	tr := syntheticTrace(3, 1, 2)
	vpa := mustPreset(t, "vpa")
	bad := mustPreset(t, DefaultPreset)
	bad.CPU.Percentile = 2
	for _, tc := range []struct {
		name string
		opt  ReplayOptions
	}{
		{"negative warmup", ReplayOptions{Policy: vpa, Control: vpa, Warmup: -time.Hour}},
		{"sub-second step", ReplayOptions{Policy: vpa, Control: vpa, Step: 1500 * time.Millisecond}},
		{"invalid policy", ReplayOptions{Policy: bad, Control: vpa}},
		{"invalid control", ReplayOptions{Policy: vpa, Control: bad}},
	} {
		if _, err := Replay(tr, tc.opt); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
