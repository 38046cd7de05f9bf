package recommend

import (
	"errors"
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2013, 8, 1, 0, 0, 0, 0, time.UTC)

func newHist(t *testing.T, o HistogramOptions) *Histogram {
	t.Helper()
	h, err := NewHistogram(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// mid returns a value strictly inside bucket b.
func mid(o HistogramOptions, b int) float64 { return (o.BucketStart(b) + o.BucketStart(b+1)) / 2 }

func TestHistogramOptionsValidate(t *testing.T) {
	good := CPUHistogramOptions()
	if err := good.Validate(); err != nil {
		t.Fatalf("VPA CPU options: %v", err)
	}
	if err := MemoryHistogramOptions().Validate(); err != nil {
		t.Fatalf("VPA memory options: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*HistogramOptions)
	}{
		{"zero first bucket", func(o *HistogramOptions) { o.FirstBucketSize = 0 }},
		{"negative first bucket", func(o *HistogramOptions) { o.FirstBucketSize = -1 }},
		{"NaN first bucket", func(o *HistogramOptions) { o.FirstBucketSize = math.NaN() }},
		{"infinite first bucket", func(o *HistogramOptions) { o.FirstBucketSize = math.Inf(1) }},
		{"ratio 1", func(o *HistogramOptions) { o.Ratio = 1 }},
		{"ratio below 1", func(o *HistogramOptions) { o.Ratio = 0.9 }},
		{"NaN ratio", func(o *HistogramOptions) { o.Ratio = math.NaN() }},
		{"no buckets", func(o *HistogramOptions) { o.NumBuckets = 0 }},
		{"too many buckets", func(o *HistogramOptions) { o.NumBuckets = maxHistogramBuckets + 1 }},
		{"zero epsilon", func(o *HistogramOptions) { o.Epsilon = 0 }},
		{"negative half-life", func(o *HistogramOptions) { o.HalfLife = -time.Hour }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.mod(&o)
			if err := o.Validate(); !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("Validate() = %v, want ErrInvalidOptions", err)
			}
			if _, err := NewHistogram(o); !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("NewHistogram() = %v, want ErrInvalidOptions", err)
			}
		})
	}
}

func TestBucketLayout(t *testing.T) {
	cpu, mem := CPUHistogramOptions(), MemoryHistogramOptions()
	for _, tc := range []struct {
		name string
		got  float64
		want float64
		tol  float64
	}{
		{"cpu bucket 0 starts at 0", cpu.BucketStart(0), 0, 0},
		{"cpu bucket 1 starts at 0.01 core", cpu.BucketStart(1), 0.01, 1e-15},
		{"cpu bucket 2 starts at 0.01+0.0105", cpu.BucketStart(2), 0.0205, 1e-15},
		{"cpu last bucket starts near 1021 cores", cpu.BucketStart(175), 1021.1094, 1e-3},
		{"cpu bucket past the end is the last", cpu.BucketStart(500), cpu.BucketStart(175), 0},
		{"memory bucket 1 starts at 1e7 bytes", mem.BucketStart(1), 1e7, 1e-6},
		{"memory last bucket covers 1e12 bytes", math.Min(mem.BucketStart(175), 1e12), 1e12, 0},
	} {
		if math.Abs(tc.got-tc.want) > tc.tol {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	for _, tc := range []struct {
		v    float64
		want int
	}{
		{-1, 0}, {0, 0}, {0.0099, 0}, {0.01, 1}, {0.0204, 1}, {0.0206, 2},
		{mid(cpu, 100), 100}, {1021, 174}, {1022, 175}, {1e9, 175}, {math.Inf(1), 175},
	} {
		if got := cpu.FindBucket(tc.v); got != tc.want {
			t.Errorf("cpu FindBucket(%v) = %d, want %d", tc.v, got, tc.want)
		}
	}
	for b := 1; b < cpu.NumBuckets-1; b++ {
		if got := cpu.FindBucket(mid(cpu, b)); got != b {
			t.Fatalf("FindBucket(middle of bucket %d) = %d", b, got)
		}
	}
}

// TestPercentileVectors transfers the VPA decaying-histogram test vectors
// (reference-oracles/PROVENANCE.md §3) from linear buckets of width 1 to our
// exponential layout: "value i" is a value inside bucket i and "returns k"
// means the start of bucket k (the end of bucket k−1).
func TestPercentileVectors(t *testing.T) {
	o := HistogramOptions{FirstBucketSize: 1, Ratio: 1.05, NumBuckets: 20, Epsilon: 1e-4, HalfLife: time.Hour}
	type add struct {
		bucket int
		weight float64
		at     time.Duration
	}
	type want struct {
		p      float64
		bucket int
	}
	for _, tc := range []struct {
		name  string
		adds  []add
		wants []want
	}{
		{"decay over four hours",
			[]add{{1, 1, 0}, {2, 2, time.Hour}, {3, 3, 2 * time.Hour}, {4, 4, 3 * time.Hour}},
			[]want{{0, 2}, {0.02, 2}, {0.03, 3}, {0.10, 3}, {0.11, 4}, {0.34, 4}, {0.35, 5}, {1.0, 5}}},
		{"no decay",
			[]add{{1, 1, 0}, {2, 2, 0}, {3, 3, 0}, {4, 4, 0}},
			[]want{{0, 2}, {0.1, 2}, {0.2, 3}, {0.3, 3}, {0.4, 4}, {0.5, 4}, {0.6, 4}, {0.7, 5}, {0.8, 5}, {0.9, 5}, {1.0, 5}}},
		{"old heavy sample almost decayed",
			[]add{{2, 1000, 0}, {1, 1, 20 * time.Hour}},
			[]want{{0.999, 2}, {1.0, 3}}},
		{"renormalised past the maximum decay exponent",
			[]add{{2, 1, 0}, {1, 1, 101 * time.Hour}},
			[]want{{1.0, 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHist(t, o)
			for _, a := range tc.adds {
				h.AddSample(mid(o, a.bucket), a.weight, t0.Add(a.at))
			}
			for _, w := range tc.wants {
				if got := h.Percentile(w.p); got != o.BucketStart(w.bucket) {
					t.Errorf("Percentile(%v) = %v, want start of bucket %d = %v", w.p, got, w.bucket, o.BucketStart(w.bucket))
				}
			}
		})
	}
}

func TestHistogramAddSample(t *testing.T) {
	o := CPUHistogramOptions()
	for _, tc := range []struct {
		name      string
		value     float64
		weight    float64
		wantEmpty bool
		wantTotal float64
	}{
		{"normal", 0.5, 1, false, 1},
		{"zero weight", 0.5, 0, true, 0},
		{"below epsilon", 0.5, 1e-5, true, 1e-5},
		{"negative weight ignored", 0.5, -1, true, 0},
		{"NaN weight ignored", 0.5, math.NaN(), true, 0},
		{"infinite weight ignored", 0.5, math.Inf(1), true, 0},
		{"NaN value ignored", math.NaN(), 1, true, 0},
		{"negative value goes to bucket 0", -3, 1, false, 1},
		{"huge value goes to the last bucket", 1e30, 1, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHist(t, o)
			h.AddSample(tc.value, tc.weight, t0)
			if h.IsEmpty() != tc.wantEmpty {
				t.Errorf("IsEmpty() = %v, want %v", h.IsEmpty(), tc.wantEmpty)
			}
			// The first sample moves the reference to t0 rounded to the
			// half-life, where the decay factor of t0 is 1 (t0 is midnight).
			if h.TotalWeight() != tc.wantTotal {
				t.Errorf("TotalWeight() = %v, want %v", h.TotalWeight(), tc.wantTotal)
			}
		})
	}
}

func TestHistogramDecayWeights(t *testing.T) {
	h := newHist(t, CPUHistogramOptions())
	h.AddSample(1, 1, t0)
	if !h.ReferenceTime().Equal(t0) {
		t.Fatalf("reference %v, want %v", h.ReferenceTime(), t0)
	}
	h.AddSample(1, 1, t0.Add(24*time.Hour)) // one half-life later: weight 2
	h.AddSample(1, 1, t0.Add(-24*time.Hour))
	if got := h.TotalWeight(); got != 3.5 {
		t.Errorf("total weight %v, want 1 + 2 + 0.5", got)
	}
	// 101 half-lives later the reference moves and old weights shrink by 2^-101.
	h.AddSample(1, 1, t0.Add(101*24*time.Hour))
	if got := h.TotalWeight(); got != 1+3.5*math.Ldexp(1, -101) {
		t.Errorf("after renormalisation total %v", got)
	}
}

func TestHistogramSubtractSample(t *testing.T) {
	o := CPUHistogramOptions()
	for _, tc := range []struct {
		name      string
		sub       float64
		wantTotal float64
		wantEmpty bool
	}{
		{"partial", 0.25, 0.75, false},
		{"all", 1, 0, true},
		{"to below epsilon clears", 1 - 1e-5, 0, true},
		{"more than present", 5, 0, true},
		{"negative ignored", -1, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHist(t, o)
			h.AddSample(0.5, 1, t0)
			h.SubtractSample(0.5, tc.sub, t0)
			if h.TotalWeight() != tc.wantTotal || h.IsEmpty() != tc.wantEmpty {
				t.Errorf("total %v empty %v, want %v %v", h.TotalWeight(), h.IsEmpty(), tc.wantTotal, tc.wantEmpty)
			}
		})
	}
	// Subtracting the only sample in the top bucket shrinks the percentile.
	h := newHist(t, o)
	h.AddSample(0.1, 1, t0)
	h.AddSample(5, 1, t0)
	if got := h.Percentile(1); got != o.BucketStart(o.FindBucket(5)+1) {
		t.Fatalf("p100 = %v before subtracting", got)
	}
	h.SubtractSample(5, 1, t0)
	if got := h.Percentile(1); got != o.BucketStart(o.FindBucket(0.1)+1) {
		t.Errorf("p100 = %v after subtracting the top sample", got)
	}
}

func TestHistogramPercentile(t *testing.T) {
	o := CPUHistogramOptions()
	empty := newHist(t, o)
	if got := empty.Percentile(0.9); got != 0 {
		t.Errorf("empty histogram p90 = %v, want 0", got)
	}
	h := newHist(t, o)
	for i := 1; i <= 100; i++ {
		h.AddSample(mid(o, i), 1, t0)
	}
	for _, tc := range []struct {
		p    float64
		want int // bucket whose start is returned
	}{
		{0, 2}, {0.01, 2}, {0.5, 51}, {0.9, 91}, {0.905, 92}, {1, 101},
	} {
		if got := h.Percentile(tc.p); got != o.BucketStart(tc.want) {
			t.Errorf("Percentile(%v) = %v, want start of bucket %d (%v)", tc.p, got, tc.want, o.BucketStart(tc.want))
		}
	}
	// The last bucket returns its own start (it has no end).
	top := newHist(t, o)
	top.AddSample(1e9, 1, t0)
	if got := top.Percentile(1); got != o.BucketStart(o.NumBuckets-1) {
		t.Errorf("last-bucket percentile %v, want its start", got)
	}
}

// TestHistogramMergeExact: merging histograms of two nodes equals feeding
// one histogram all samples, bit for bit, when reference shifts are powers
// of two (always) and weights are dyadic (so additions are exact).
func TestHistogramMergeExact(t *testing.T) {
	o := MemoryHistogramOptions()
	type smp struct {
		v  float64
		at time.Duration
	}
	a := []smp{{3e8, 0}, {5e8, 24 * time.Hour}, {3e8, 48 * time.Hour}}
	b := []smp{{9e8, 200 * 24 * time.Hour}, {2e9, 201 * 24 * time.Hour}}
	for _, tc := range []struct {
		name   string
		first  []smp
		second []smp
	}{
		{"later into earlier", a, b},
		{"earlier into later", b, a},
		{"same reference", a, a},
		{"into empty", nil, a},
		{"empty into", a, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, y, all := newHist(t, o), newHist(t, o), newHist(t, o)
			for _, s := range tc.first {
				x.AddSample(s.v, 0.5, t0.Add(s.at))
			}
			for _, s := range tc.second {
				y.AddSample(s.v, 0.5, t0.Add(s.at))
			}
			// Feed "all" in time order, as one node would have seen them.
			ordered := append(append([]smp{}, tc.first...), tc.second...)
			if len(tc.first) > 0 && len(tc.second) > 0 && tc.second[0].at < tc.first[0].at {
				ordered = append(append([]smp{}, tc.second...), tc.first...)
			}
			for _, s := range ordered {
				all.AddSample(s.v, 0.5, t0.Add(s.at))
			}
			yBefore := y.Clone()
			if err := x.Merge(y); err != nil {
				t.Fatal(err)
			}
			if !y.Equal(yBefore) {
				t.Error("Merge modified its argument")
			}
			for _, p := range []float64{0, 0.5, 0.9, 1} {
				if x.Percentile(p) != all.Percentile(p) {
					t.Errorf("p%v: merged %v, fed together %v", p, x.Percentile(p), all.Percentile(p))
				}
			}
			if x.TotalWeight() != all.TotalWeight() {
				t.Errorf("total: merged %v, fed together %v", x.TotalWeight(), all.TotalWeight())
			}
		})
	}
	other := MemoryHistogramOptions()
	other.HalfLife = time.Hour
	if err := newHist(t, o).Merge(newHist(t, other)); !errors.Is(err, ErrOptionsMismatch) {
		t.Errorf("merging different half-lives: %v, want ErrOptionsMismatch", err)
	}
}

func TestHistogramCloneEqual(t *testing.T) {
	h := newHist(t, CPUHistogramOptions())
	h.AddSample(0.3, 1, t0)
	c := h.Clone()
	if !c.Equal(h) {
		t.Fatal("clone differs")
	}
	c.AddSample(0.3, 1, t0)
	if c.Equal(h) || h.TotalWeight() != 1 {
		t.Error("clone shares state with the original")
	}
}

func TestHistogramCostOptimum(t *testing.T) {
	o := CPUHistogramOptions()
	h := newHist(t, o)
	// 99 samples at ~0.1 core and 1 burst at ~4 cores.
	for range 99 {
		h.AddSample(mid(o, o.FindBucket(0.1)), 1, t0)
	}
	h.AddSample(mid(o, o.FindBucket(4)), 1, t0)
	low, high := o.BucketStart(o.FindBucket(0.1)+1), o.BucketStart(o.FindBucket(4)+1)
	for _, tc := range []struct {
		cost float64
		want float64
	}{
		// Covering the burst costs ~3.9 cores of idle for 99 % of samples;
		// it pays only when a violation costs more than that per 1 %.
		{1, low}, {100, low}, {1000, high},
	} {
		if got := h.costOptimum(tc.cost); got != tc.want {
			t.Errorf("costOptimum(%v) = %v, want %v", tc.cost, got, tc.want)
		}
	}
	if got := newHist(t, o).costOptimum(10); got != 0 {
		t.Errorf("empty histogram cost optimum %v", got)
	}
}

func TestHistogramMarshalRoundTrip(t *testing.T) {
	full := newHist(t, CPUHistogramOptions())
	for b := range full.opts.NumBuckets {
		full.AddSample(mid(full.opts, b), float64(b+1)/3, t0.Add(time.Duration(b)*time.Minute))
	}
	sub := newHist(t, MemoryHistogramOptions())
	sub.AddSample(5e8, 1, t0)
	sub.AddSample(9e8, 1, t0)
	sub.SubtractSample(9e8, 1, t0)
	for _, tc := range []struct {
		name string
		h    *Histogram
	}{
		{"empty", newHist(t, CPUHistogramOptions())},
		{"one sample", func() *Histogram { h := newHist(t, CPUHistogramOptions()); h.AddSample(0.5, 0.1, t0); return h }()},
		{"after subtract", sub},
		{"every bucket", full},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.h.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > 2048 {
				t.Errorf("encoded size %d bytes, goal ≤ 2 KiB", len(b))
			}
			var d Histogram
			if err := d.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			if !d.Equal(tc.h) {
				t.Error("round trip changed the histogram")
			}
			if d.ReferenceTime().IsZero() != tc.h.ReferenceTime().IsZero() {
				t.Error("round trip changed a zero reference")
			}
		})
	}
}

func TestHistogramUnmarshalErrors(t *testing.T) {
	h := newHist(t, CPUHistogramOptions())
	h.AddSample(0.5, 1, t0)
	h.AddSample(2, 1, t0)
	good, _ := h.MarshalBinary()
	mutate := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	// Offsets: version 0, floats 1..24, NumBuckets uvarint at 25 (2 bytes for 176).
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"truncated header", good[:10]},
		{"truncated bucket", good[:len(good)-3]},
		{"trailing byte", append(append([]byte(nil), good...), 0)},
		{"future version", mutate(func(b []byte) []byte { b[0] = 2; return b })},
		{"zero ratio", mutate(func(b []byte) []byte {
			for i := 9; i < 17; i++ {
				b[i] = 0
			}
			return b
		})},
		{"negative weight", mutate(func(b []byte) []byte { b[len(b)-1] |= 0x80; return b })},
		{"huge bucket count", mutate(func(b []byte) []byte { b[25], b[26] = 0xff, 0x7f; return b })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newHist(t, CPUHistogramOptions())
			d.AddSample(0.1, 1, t0)
			before := d.Clone()
			if err := d.UnmarshalBinary(tc.data); !errors.Is(err, ErrCorruptHistogram) {
				t.Fatalf("UnmarshalBinary() = %v, want ErrCorruptHistogram", err)
			}
			if !d.Equal(before) {
				t.Error("failed decode changed the histogram")
			}
		})
	}
}

func FuzzHistogramUnmarshal(f *testing.F) {
	h, _ := NewHistogram(MemoryHistogramOptions())
	h.AddSample(3e8, 1, t0)
	h.AddSample(7e9, 0.5, t0.Add(time.Hour))
	b, _ := h.MarshalBinary()
	f.Add(b)
	e, _ := NewHistogram(CPUHistogramOptions())
	b, _ = e.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var d Histogram
		if err := d.UnmarshalBinary(data); err != nil {
			return
		}
		// Whatever decodes must work and re-encode to an equal histogram.
		_ = d.Percentile(0.9)
		d2 := d.Clone()
		d2.AddSample(1, 1, t0)
		re, _ := d.MarshalBinary()
		var back Histogram
		if err := back.UnmarshalBinary(re); err != nil || !back.Equal(&d) {
			t.Fatalf("re-encoding failed: %v", err)
		}
	})
}

// TestHistogramWeightsReachWrittenBuckets: a histogram holds weights only
// up to its highest bucket written, and behaves as the full layout does:
// a bucket past the end weighs 0 in every operation.
func TestHistogramWeightsReachWrittenBuckets(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	o := MemoryHistogramOptions()
	low, _ := NewHistogram(o)
	if len(low.weights) != 0 || !low.IsEmpty() || low.Percentile(0.9) != 0 {
		t.Fatalf("new histogram: %d weights, empty %v", len(low.weights), low.IsEmpty())
	}
	low.AddSample(64<<20, 1, t0)
	b := o.FindBucket(64 << 20)
	if len(low.weights) != b+1 || b+1 >= o.NumBuckets {
		t.Fatalf("64 MiB in bucket %d: %d weights, want %d of %d", b, len(low.weights), b+1, o.NumBuckets)
	}
	// Subtracting a sample of a bucket never written takes it from the
	// total only (as VPA does), and writes nothing past the end.
	w := low.at(b)
	low.SubtractSample(1<<40, 0.25, t0)
	if low.TotalWeight() != w-0.25 || len(low.weights) != b+1 || low.at(b) != w {
		t.Fatalf("subtract past the end: total %v, %d weights, bucket %d %v", low.TotalWeight(), len(low.weights), b, low.at(b))
	}
	// A merge reaches the other's highest bucket; the percentile sees it.
	high, _ := NewHistogram(o)
	high.AddSample(8<<30, 3, t0)
	m := low.Clone()
	if err := m.Merge(high); err != nil {
		t.Fatal(err)
	}
	if got, want := m.Percentile(0.9), high.Percentile(0.9); got != want {
		t.Errorf("merged p90 %v, want the high sample's %v", got, want)
	}
	// A round trip keeps it equal, whatever each side's length.
	enc, _ := m.MarshalBinary()
	var back Histogram
	if err := back.UnmarshalBinary(enc); err != nil {
		t.Fatal(err)
	}
	if !back.Equal(m) || !m.Equal(&back) {
		t.Error("decoded histogram differs")
	}
	long := m.Clone()
	long.reach(o.NumBuckets - 1)
	if !long.Equal(m) || !m.Equal(long) || long.Percentile(0.5) != m.Percentile(0.5) {
		t.Error("trailing zero buckets changed equality or a percentile")
	}
	// One bucket: an empty histogram has min = max = 0 and no weights.
	one, err := NewHistogram(HistogramOptions{FirstBucketSize: 1, Ratio: 2, NumBuckets: 1, Epsilon: 1e-4, HalfLife: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	one.AddSample(1, 1, t0.Add(time.Duration(maxDecayExponent+1)*time.Hour)) // moves the reference: scales the empty range
	if one.Percentile(1) != 0 || one.IsEmpty() {
		t.Errorf("one bucket: p100 %v, empty %v", one.Percentile(1), one.IsEmpty())
	}
	empty, _ := NewHistogram(one.Options())
	if err := one.Merge(empty); err != nil || one.TotalWeight() != 1 {
		t.Errorf("merging an empty one-bucket histogram: %v, total %v", err, one.TotalWeight())
	}
}
