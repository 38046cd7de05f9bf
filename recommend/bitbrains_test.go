package recommend

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/test/tier"
)

// TestBitbrainsReference replays both real months: the VPA control must
// reproduce the reference figures of traces/README.md (so the metrics are
// implemented as defined), and the default preset must meet the goals of
// issue 6 against it. Needs ../shared/data; skipped with -short.
func TestBitbrainsReference(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: replays two months of Bitbrains (about 10 s)")
	}
	dir := tier.SharedData(t, "traces")
	for _, tc := range []struct {
		month   string
		series  int
		samples int64
		// README figures: CPU slack, violation, resizes; memory the same.
		ref [6]float64
	}{
		{"07", 495, 3525863, [6]float64{1.998, 0.0191, 0.58, 5.527, 0.00299, 0.29}},
		{"08", 499, 4133452, [6]float64{1.396, 0.0175, 0.48, 4.977, 0.00200, 0.30}},
	} {
		t.Run(tc.month, func(t *testing.T) {
			tr, err := ReadTraceFile(filepath.Join(dir, "bitbrains-2013-"+tc.month+".csv.gz"))
			if err != nil {
				t.Fatal(err)
			}
			s, err := Replay(tr, ReplayOptions{Policy: mustPreset(t, DefaultPreset), Control: mustPreset(t, "vpa"), Warmup: 24 * time.Hour, Workers: 2})
			if err != nil {
				t.Fatal(err)
			}
			c, p := s.Control, s.Policy
			if c.ScoredSeries != tc.series || c.ScoredSamples != tc.samples {
				t.Errorf("control scored %d samples in %d series, README %d in %d", c.ScoredSamples, c.ScoredSeries, tc.samples, tc.series)
			}
			got := [6]float64{c.CPU.RelativeSlack, c.CPU.ViolationRate, c.CPU.ChangesPerSeriesDay, c.Memory.RelativeSlack, c.Memory.ViolationRate, c.Memory.ChangesPerSeriesDay}
			// The README prints slack to 3 decimals, CPU violations to 4,
			// memory violations to 5 and resizes to 2.
			decimals := [6]float64{3, 4, 2, 3, 5, 2}
			for i, want := range tc.ref {
				if math.Abs(got[i]-want) > math.Pow(10, -decimals[i])/2+1e-12 {
					t.Errorf("control metric %d = %v, README %v", i, got[i], want)
				}
			}
			goals := []struct {
				name string
				ok   bool
			}{
				{"CPU resizes ≤ 1/day", p.CPU.ChangesPerSeriesDay <= 1},
				{"memory resizes ≤ 1/day", p.Memory.ChangesPerSeriesDay <= 1},
				{"CPU slack ≤ 0.7×VPA", p.CPU.RelativeSlack <= 0.7*c.CPU.RelativeSlack},
				{"CPU violations ≤ VPA", p.CPU.ViolationRate <= c.CPU.ViolationRate},
				{"memory slack ≤ 0.8×VPA", p.Memory.RelativeSlack <= 0.8*c.Memory.RelativeSlack},
				{"memory violations ≤ VPA", p.Memory.ViolationRate <= c.Memory.ViolationRate},
			}
			for _, g := range goals {
				if !g.ok {
					t.Errorf("%s: goal %q missed: %+v vs control %+v", tc.month, g.name, p, c)
				}
			}
			t.Logf("%s: CPU %.3f (%.2fx) / %.4f / %.2f, memory %.3f (%.2fx) / %.5f / %.2f", tc.month,
				p.CPU.RelativeSlack, p.CPU.RelativeSlack/c.CPU.RelativeSlack, p.CPU.ViolationRate, p.CPU.ChangesPerSeriesDay,
				p.Memory.RelativeSlack, p.Memory.RelativeSlack/c.Memory.RelativeSlack, p.Memory.ViolationRate, p.Memory.ChangesPerSeriesDay)
		})
	}
}
