package recommend

import (
	"math"
	"math/rand/v2"
	"testing"
)

// nextUp/nextDown step one float64 towards ±Inf.
func nextUp(v float64) float64   { return math.Nextafter(v, math.Inf(1)) }
func nextDown(v float64) float64 { return math.Nextafter(v, math.Inf(-1)) }

// checkLayout compares the threshold table with the log formula on every
// float64 within ulps of each threshold and of each exact bucket start (the
// only places where the formula's rounding decides), on special values and
// on log-uniform random values.
func checkLayout(t *testing.T, o HistogramOptions, ulps int, random int) {
	t.Helper()
	l := newBucketLayout(o)
	check := func(v float64) bool {
		t.Helper()
		if got, want := l.find(v), o.FindBucket(v); got != want {
			t.Errorf("%+v: layout bucket of %v (bits %#x) = %d, formula %d", o, v, math.Float64bits(v), got, want)
			return false
		}
		return true
	}
	for _, v := range []float64{math.Inf(-1), -1, math.Copysign(0, -1), 0, math.SmallestNonzeroFloat64,
		o.FirstBucketSize, nextDown(o.FirstBucketSize), nextUp(o.FirstBucketSize), math.MaxFloat64, math.Inf(1)} {
		check(v)
	}
	for b := 1; b < o.NumBuckets; b++ {
		for _, centre := range []float64{l.thresholds[b], o.BucketStart(b)} {
			if centre == 0 || math.IsInf(centre, 0) {
				continue
			}
			up, down := centre, centre
			for range ulps {
				if !check(up) || !check(down) {
					return
				}
				up, down = nextUp(up), nextDown(down)
			}
		}
		// The table must not be degenerate: bucket b's threshold lies at
		// its exact start up to the formula's rounding.
		// (Not where v·(Ratio−1) overflows: there the formula jumps to
		// the last bucket.)
		if s := o.BucketStart(b); s*o.Ratio < math.MaxFloat64/o.Ratio && math.Abs(l.thresholds[b]-s) > 1e-9*s {
			t.Errorf("%+v: threshold of bucket %d is %v, bucket start %v", o, b, l.thresholds[b], s)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	lo, hi := math.Log(o.FirstBucketSize/4), math.Log(o.BucketStart(o.NumBuckets-1)*4)
	for range random {
		if !check(math.Exp(lo + rng.Float64()*(hi-lo))) {
			return
		}
	}
}

// TestBucketLayoutMatchesFormula proves that the ingest path's threshold
// table puts every value in exactly the bucket of VPA's formula (FindBucket)
// for both VPA layouts, and on other layouts with few, many, narrow and
// wide buckets.
func TestBucketLayoutMatchesFormula(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    HistogramOptions
		ulps int
	}{
		{"vpa-cpu", CPUHistogramOptions(), 1 << 12},
		{"vpa-memory", MemoryHistogramOptions(), 1 << 12},
		{"one-bucket", HistogramOptions{FirstBucketSize: 1, Ratio: 2, NumBuckets: 1, Epsilon: 1e-4}, 64},
		{"two-buckets", HistogramOptions{FirstBucketSize: 1, Ratio: 2, NumBuckets: 2, Epsilon: 1e-4}, 64},
		{"ratio-2", HistogramOptions{FirstBucketSize: 0.5, Ratio: 2, NumBuckets: 60, Epsilon: 1e-4}, 256},
		{"ratio-1.001-4096", HistogramOptions{FirstBucketSize: 1e-3, Ratio: 1.001, NumBuckets: 4096, Epsilon: 1e-4}, 64},
		{"ratio-10-huge", HistogramOptions{FirstBucketSize: 1e200, Ratio: 10, NumBuckets: 200, Epsilon: 1e-4}, 64},
	} {
		t.Run(tc.name, func(t *testing.T) { checkLayout(t, tc.o, tc.ulps, 200000) })
	}
}

// TestHistogramUsesSharedLayout: histograms from NewHistogram find buckets
// through the shared table; decoded ones look it up without adding to the
// bounded cache.
func TestHistogramUsesSharedLayout(t *testing.T) {
	a, b := newHist(t, CPUHistogramOptions()), newHist(t, CPUHistogramOptions())
	if a.layout == nil || a.layout != b.layout {
		t.Fatalf("layouts %p and %p, want one shared table", a.layout, b.layout)
	}
	data, _ := a.MarshalBinary()
	var d Histogram
	if err := d.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	if d.layout != a.layout {
		t.Errorf("decoded histogram has layout %p, want the shared %p", d.layout, a.layout)
	}
	odd := HistogramOptions{FirstBucketSize: 3, Ratio: 1.7, NumBuckets: 9, Epsilon: 1e-4}
	o, _ := NewHistogram(odd)
	o.layout = nil // as if the cache had been full
	data, _ = o.MarshalBinary()
	layoutCache.Lock()
	delete(layoutCache.m, layoutKey{odd.FirstBucketSize, odd.Ratio, odd.NumBuckets})
	layoutCache.Unlock()
	if err := d.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	if d.layout != nil || knownLayout(odd) != nil {
		t.Errorf("decoding an unknown layout added it to the cache")
	}
	for _, v := range []float64{0, 2.9, 3, 7.5, 100, 1e9} {
		if got, want := d.findBucket(v), odd.FindBucket(v); got != want {
			t.Errorf("formula fallback: bucket of %v = %d, want %d", v, got, want)
		}
	}
}

// FuzzBucketLayout compares the table with the formula on arbitrary
// layouts and values.
func FuzzBucketLayout(f *testing.F) {
	f.Add(0.01, 1.05, uint16(176), 0.5)
	f.Add(1e7, 1.05, uint16(176), 3e9)
	f.Add(1.0, 3.0, uint16(5), 80.0)
	f.Fuzz(func(t *testing.T, first, ratio float64, n uint16, v float64) {
		o := HistogramOptions{FirstBucketSize: first, Ratio: ratio, NumBuckets: int(n%300) + 1, Epsilon: 1e-4}
		if o.Validate() != nil || math.IsNaN(v) {
			return
		}
		l := newBucketLayout(o)
		for _, x := range []float64{v, nextUp(v), nextDown(v), v * o.Ratio, v / o.Ratio} {
			if got, want := l.find(x), o.FindBucket(x); got != want {
				t.Fatalf("%+v: layout bucket of %v = %d, formula %d", o, x, got, want)
			}
		}
	})
}
