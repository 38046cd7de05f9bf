package vpacompat

import (
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/recommend"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/util"
)

// BenchmarkAddSample compares the ingest cost of recommend's histogram with
// upstream VPA's decaying histogram on the same values (the baseline).
func BenchmarkAddSample(b *testing.B) {
	values := make([]float64, 4096)
	for i := range values {
		values[i] = 0.01 + float64(i%977)*0.013
	}
	t0 := time.Date(2013, 8, 1, 0, 0, 0, 0, time.UTC)
	b.Run("upstream-vpa", func(b *testing.B) {
		o, _ := util.NewExponentialHistogramOptions(1000, 0.01, 1.05, 1e-4)
		h := util.NewDecayingHistogram(o, 24*time.Hour)
		for i := 0; b.Loop(); i++ {
			h.AddSample(values[i&4095], 0.1, t0.Add(time.Duration(i)*time.Second))
		}
	})
	b.Run("recommend", func(b *testing.B) {
		h, _ := recommend.NewHistogram(recommend.CPUHistogramOptions())
		for i := 0; b.Loop(); i++ {
			h.AddSample(values[i&4095], 0.1, t0.Add(time.Duration(i)*time.Second))
		}
	})
}
