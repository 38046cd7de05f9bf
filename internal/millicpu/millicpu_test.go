package millicpu

import (
	"math"
	"testing"
)

// TestRounding: the four formulas this package replaced (the agent's
// roundCPU, the policy compiler's MilliCPU and clamp floor, the
// aggregator's cpuQ, api/local's FormatCPU), written out here as they
// were, agree with Ceil and Floor wherever they were defined (0 < cores ≤
// MaxCores); outside it the bounds hold.
func TestRounding(t *testing.T) {
	for _, tc := range []struct {
		cores       float64
		ceil, floor int64
	}{
		{0.1, 100, 100},
		{0.3, 300, 300},
		{0.30000000000000004, 300, 300}, // AsApproximateFloat64's 300m
		{0.2999999, 300, 299},
		{0.0001, 1, 0},
		{0.001, 1, 1},
		{0.0010001, 2, 1},
		{1.5, 1500, 1500},
		{1.0005, 1001, 1000},
		{3, 3000, 3000},
		{1800, 1800000, 1800000},
		{MaxCores, MaxCores * 1000, MaxCores * 1000},
		{MaxCores - 0.0005, MaxCores*1000 - 0, MaxCores*1000 - 1},
		// Outside the domain: bounded, never wrapped through int64.
		{MaxCores + 1, MaxCores * 1000, MaxCores * 1000},
		{1e20, MaxCores * 1000, MaxCores * 1000},
		{1e300, MaxCores * 1000, MaxCores * 1000},
		{math.Inf(1), MaxCores * 1000, MaxCores * 1000},
		{math.NaN(), 0, 0},
		{math.Inf(-1), 0, 0},
		{-1, 0, 0},
		{0, 0, 0},
		{math.SmallestNonzeroFloat64, 0, 0}, // below the forgiven error
	} {
		if got := Ceil(tc.cores); got != tc.ceil {
			t.Errorf("Ceil(%v) = %d, want %d", tc.cores, got, tc.ceil)
		}
		if got := Floor(tc.cores); got != tc.floor {
			t.Errorf("Floor(%v) = %d, want %d", tc.cores, got, tc.floor)
		}
		if got, want := Cores(tc.cores), float64(tc.ceil)/1000; got != want {
			t.Errorf("Cores(%v) = %v, want %v", tc.cores, got, want)
		}
		if !(tc.cores > 0 && tc.cores <= MaxCores) {
			continue
		}
		// The replaced formulas, in their domain.
		if old := math.Ceil(tc.cores*1000-1e-6) / 1000; Cores(tc.cores) != old {
			t.Errorf("Cores(%v) = %v, the agent's roundCPU gave %v", tc.cores, Cores(tc.cores), old)
		}
		if old := int64(math.Ceil(tc.cores*1000 - 1e-6)); Ceil(tc.cores) != old {
			t.Errorf("Ceil(%v) = %d, cpuQ and FormatCPU gave %d", tc.cores, Ceil(tc.cores), old)
		}
		if old := math.Floor(min(tc.cores, MaxCores)*1000+1e-6) / 1000; float64(Floor(tc.cores))/1000 != old {
			t.Errorf("Floor(%v) = %d, the clamp's floor gave %v", tc.cores, Floor(tc.cores), old)
		}
	}
}

// TestRoundingSweep: Ceil and the old formula agree on every thousandth of
// a core up to 64 cores, and on each of their neighbours a float step away.
func TestRoundingSweep(t *testing.T) {
	for m := int64(1); m <= 64000; m++ {
		for _, c := range []float64{float64(m) / 1000, math.Nextafter(float64(m)/1000, 0), math.Nextafter(float64(m)/1000, math.Inf(1))} {
			if old := int64(math.Ceil(c*1000 - 1e-6)); Ceil(c) != old {
				t.Fatalf("Ceil(%v) = %d, old formula %d", c, Ceil(c), old)
			}
			if Ceil(c) != m {
				t.Fatalf("Ceil(%v) = %d, want %d (a float step from %dm)", c, Ceil(c), m, m)
			}
			if Floor(c) != m {
				t.Fatalf("Floor(%v) = %d, want %d", c, Floor(c), m)
			}
		}
	}
}
