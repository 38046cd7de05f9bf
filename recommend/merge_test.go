package recommend

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func newCounts(t testing.TB, o HistogramOptions) *Counts {
	t.Helper()
	c, err := NewCounts(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCountsAddMergeEncode(t *testing.T) {
	o := CPUHistogramOptions()
	a, b := newCounts(t, o), newCounts(t, o)
	for _, v := range []float64{0, 0.005, 0.5, 0.5, 3, 1e9, -1, math.NaN(), math.Inf(1)} {
		a.Add(v)
	}
	if a.Total() != 6 || a.Len() != 4 {
		t.Fatalf("6 valid samples in 4 buckets, got total %d in %d", a.Total(), a.Len())
	}
	b.Add(0.5)
	b.Add(7)
	if err := a.Merge(b); err != nil {
		t.Fatal(err)
	}
	var got []uint64
	a.Each(func(bucket int, start float64, n uint64) {
		if start != o.BucketStart(bucket) {
			t.Errorf("bucket %d start %v, want %v", bucket, start, o.BucketStart(bucket))
		}
		got = append(got, n)
	})
	if want := []uint64{2, 3, 1, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("counts %v, want %v", got, want)
	}
	data, _ := a.MarshalBinary()
	back := newCounts(t, o)
	if err := back.UnmarshalBinary(data); err != nil || !back.Equal(a) {
		t.Fatalf("round trip: %v, equal %v", err, back.Equal(a))
	}
	// The encoding is a histogram encoding: a Histogram reads it too.
	var h Histogram
	if err := h.UnmarshalBinary(data); err != nil || h.TotalWeight() != 8 || h.Options().HalfLife != 0 {
		t.Fatalf("as a histogram: %v, total %v", err, h.TotalWeight())
	}
	if err := a.Merge(newCounts(t, MemoryHistogramOptions())); !errors.Is(err, ErrOptionsMismatch) {
		t.Errorf("merging another layout: %v", err)
	}
	// An empty Counts encodes and decodes too.
	e := newCounts(t, o)
	data, _ = e.MarshalBinary()
	if err := back.UnmarshalBinary(data); err != nil || back.Total() != 0 {
		t.Errorf("empty round trip: %v", err)
	}
}

func TestCountsUnmarshalRejects(t *testing.T) {
	o := CPUHistogramOptions()
	decayed := newHist(t, o)
	decayed.AddSample(1, 1, t0)
	fraction := newHist(t, func() HistogramOptions { x := o; x.HalfLife = 0; return x }())
	fraction.AddSample(1, 0.5, t0)
	good := newCounts(t, o)
	good.Add(1)
	goodData, _ := good.MarshalBinary()
	wrongTotal := slices.Clone(goodData)
	// The total is the 8 bytes before the bucket count and the one bucket.
	totalAt := len(wrongTotal) - 1 - 1 - 8 - 8
	wrongTotal[totalAt+7] ^= 0x01
	for name, data := range map[string][]byte{
		"decaying histogram": mustMarshal(t, decayed),
		"fractional weight":  mustMarshal(t, fraction),
		"trailing bytes":     append(slices.Clone(goodData), 0),
		"total mismatch":     wrongTotal,
		"truncated":          goodData[:len(goodData)-3],
		"empty":              nil,
	} {
		t.Run(name, func(t *testing.T) {
			c := newCounts(t, o)
			c.Add(2)
			before := c.Clone()
			if err := c.UnmarshalBinary(data); !errors.Is(err, ErrCorruptHistogram) {
				t.Errorf("err = %v, want ErrCorruptHistogram", err)
			}
			if !c.Equal(before) {
				t.Error("a failed decode changed the counts")
			}
		})
	}
	mem := newCounts(t, MemoryHistogramOptions())
	if err := mem.UnmarshalBinary(goodData); !errors.Is(err, ErrOptionsMismatch) {
		t.Errorf("CPU counts into memory counts: %v", err)
	}
}

func mustMarshal(t *testing.T, h *Histogram) []byte {
	t.Helper()
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sample is one container sample of the exactness test.
type mergeSample struct {
	node     int
	cpu, mem float64
}

// TestMergedEqualsOneHistogram is the proof the aggregator rests on: the
// samples of many pods on many nodes, counted per node and window, sent in
// any order and summed in any grouping, then added once per window, give
// bit for bit the state and so the recommendation of one histogram that
// holds all the samples, each window's samples added at the window's end.
func TestMergedEqualsOneHistogram(t *testing.T) {
	const (
		windows = 24 * 60 // a day of 60-second windows
		nodes   = 7
		id      = "shop/Deployment/web/app"
	)
	period := time.Minute
	for _, preset := range []string{DefaultPreset, SLOPreset, "platform-sl-0.6"} {
		t.Run(preset, func(t *testing.T) {
			p, err := Preset(preset)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(preset))))
			samples := make([][]mergeSample, windows) // by window
			total := 0
			for w := range windows {
				// A daily shape, a few pods per node, 6 samples per pod per window.
				level := 0.3 + 0.25*math.Sin(2*math.Pi*float64(w)/windows)
				for n := range nodes {
					for range (1 + n%3) * 6 {
						samples[w] = append(samples[w], mergeSample{n,
							max(0, level*rng.ExpFloat64()), 2e8 + 1e8*level + 5e7*rng.NormFloat64()})
						total++
					}
				}
			}
			end := func(w int) time.Time { return t0.Add(time.Duration(w+1) * period) }

			// The reference: one histogram of all samples, each window's
			// samples of a bucket added at the window's end.
			cpuRef, memRef := newHist(t, CPUHistogramOptions()), newHist(t, MemoryHistogramOptions())
			cpuRef.opts.HalfLife, memRef.opts.HalfLife = time.Duration(p.CPU.HalfLife), time.Duration(p.Memory.HalfLife)
			cpuRef.derive()
			memRef.derive()
			one := mustNew(t, p)
			for w := range windows {
				cc, mc := newCounts(t, CPUHistogramOptions()), newCounts(t, MemoryHistogramOptions())
				for _, s := range samples[w] {
					cc.Add(s.cpu)
					mc.Add(s.mem)
				}
				// mid(b), not the bucket's start: a start computed by the
				// formula may round into the bucket below.
				cc.Each(func(b int, _ float64, n uint64) { cpuRef.AddSample(mid(cpuRef.opts, b), float64(n), end(w)) })
				mc.Each(func(b int, _ float64, n uint64) { memRef.AddSample(mid(memRef.opts, b), float64(n), end(w)) })
				if err := one.AddCounts(id, end(w), cc, mc); err != nil {
					t.Fatal(err)
				}
			}

			// The aggregator: per node and window a report (encoded and
			// decoded, as on the wire), arriving shuffled within a window,
			// summed pairwise in a random tree, added when the window closes.
			merged := mustNew(t, p)
			for w := range windows {
				var parts []*Counts
				var memParts []*Counts
				for n := range nodes {
					cc, mc := newCounts(t, CPUHistogramOptions()), newCounts(t, MemoryHistogramOptions())
					for _, s := range samples[w] {
						if s.node == n {
							cc.Add(s.cpu)
							mc.Add(s.mem)
						}
					}
					parts = append(parts, wire(t, cc))
					memParts = append(memParts, wire(t, mc))
				}
				perm := rng.Perm(nodes)
				cpuSum := randomTreeSum(t, rng, permute(parts, perm))
				memSum := randomTreeSum(t, rng, permute(memParts, perm))
				if err := merged.AddCounts(id, end(w), cpuSum, memSum); err != nil {
					t.Fatal(err)
				}
			}

			now := end(windows - 1)
			c1, c2 := one.containers[id], merged.containers[id]
			if !c1.cpu.hist.Equal(c2.cpu.hist) || !c1.mem.hist.Equal(c2.mem.hist) {
				t.Fatal("merged histograms differ from the single recorder's")
			}
			if !c2.cpu.hist.Equal(cpuRef) || !c2.mem.hist.Equal(memRef) {
				t.Fatal("merged histograms differ from one Histogram of all samples")
			}
			b1, _ := one.EncodeContainer(id, now)
			b2, _ := merged.EncodeContainer(id, now)
			if !bytes.Equal(b1, b2) {
				t.Fatal("merged state is not bit-identical to the single recorder's")
			}
			r1, ok1 := one.Recommend(id, now)
			r2, ok2 := merged.Recommend(id, now)
			if !ok1 || !ok2 {
				t.Fatalf("no recommendation: %v %v", ok1, ok2)
			}
			if r1.CPU != r2.CPU || r1.Memory != r2.Memory {
				t.Fatalf("merged recommendation %+v, one histogram %+v", r2, r1)
			}
			if r2.CPU.Target <= 0 || r2.Memory.Target <= 0 {
				t.Fatalf("empty recommendation %+v", r2)
			}
			t.Logf("%s: %d samples on %d nodes: CPU %.3f cores, memory %.0f MiB, identical", preset, total, nodes, r2.CPU.Target, r2.Memory.Target/mib)
		})
	}
}

func wire(t *testing.T, c *Counts) *Counts {
	t.Helper()
	data, _ := c.MarshalBinary()
	var out Counts
	if err := out.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	return &out
}

func permute(cs []*Counts, perm []int) []*Counts {
	out := make([]*Counts, len(cs))
	for i, j := range perm {
		out[i] = cs[j]
	}
	return out
}

// randomTreeSum adds the counts pairwise in a random order of pairs.
func randomTreeSum(t *testing.T, rng *rand.Rand, cs []*Counts) *Counts {
	t.Helper()
	cs = slices.Clone(cs)
	for len(cs) > 1 {
		i := rng.IntN(len(cs) - 1)
		a := cs[i].Clone()
		if err := a.Merge(cs[i+1]); err != nil {
			t.Fatal(err)
		}
		cs = slices.Replace(cs, i, i+2, a)
	}
	return cs[0]
}

func TestAddCountsRejects(t *testing.T) {
	vpa, _ := Preset("vpa")
	rv := mustNew(t, vpa)
	cpu := newCounts(t, CPUHistogramOptions())
	cpu.Add(1)
	if err := rv.AddCounts("a", t0, cpu, nil); !errors.Is(err, ErrNotMergeable) {
		t.Errorf("vpa engine: %v, want ErrNotMergeable", err)
	}
	r := mustNew(t, balancedPreset())
	if err := r.AddCounts("a", t0, newCounts(t, MemoryHistogramOptions()), nil); !errors.Is(err, ErrOptionsMismatch) {
		t.Errorf("memory layout as CPU: %v", err)
	}
	mem := newCounts(t, MemoryHistogramOptions())
	mem.Add(1e8)
	mem.Add(1e8)
	if err := r.AddCounts("a", t0, cpu, mem); !errors.Is(err, ErrInvalidSample) {
		t.Errorf("more memory than CPU samples: %v", err)
	}
	if r.Has("a") {
		t.Error("a rejected delta created state")
	}
	// A late window counts with its own weight and moves first back.
	if err := r.AddCounts("a", t0.Add(time.Hour), cpu, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.AddCounts("a", t0, cpu, nil); err != nil {
		t.Fatal(err)
	}
	c := r.containers["a"]
	if !c.first.Equal(t0) || !c.last.Equal(t0.Add(time.Hour)) || c.samples != 2 {
		t.Errorf("first %v last %v samples %d", c.first, c.last, c.samples)
	}
}

func TestEncodeDecodeContainer(t *testing.T) {
	p := balancedPreset()
	r := mustNew(t, p)
	for i := range 200 {
		if err := r.Add("x", Sample{Time: t0.Add(time.Duration(i) * time.Minute), CPUCores: 0.1 * float64(i%7), MemoryBytes: 1e8 + float64(i)*1e6}); err != nil {
			t.Fatal(err)
		}
		_ = r.Add("y", Sample{Time: t0.Add(time.Duration(i) * time.Minute), CPUCores: 1, MemoryBytes: 1e9})
	}
	r.RecordOOM("x", OOMEvent{Time: t0.Add(time.Hour), UsageBytes: 3e8})
	now := t0.Add(4 * time.Hour)
	want, _ := r.Recommend("x", now)
	data, ok := r.EncodeContainer("x", now)
	if !ok {
		t.Fatal("no state for x")
	}
	if _, ok := r.EncodeContainer("nope", now); ok {
		t.Error("state for an unknown container")
	}
	fresh := mustNew(t, p)
	id, err := fresh.DecodeContainer("x.ckpt", data)
	if err != nil || id != "x" {
		t.Fatalf("decode: %q %v", id, err)
	}
	got, _ := fresh.Recommend("x", now.Add(time.Minute))
	want2, _ := r.Recommend("x", now.Add(time.Minute))
	if got.CPU != want2.CPU || got.Memory != want2.Memory || want.CPU.Target == 0 {
		t.Errorf("after decode %+v, want %+v", got, want2)
	}
	if fresh.Containers() != 1 {
		t.Errorf("decode added %d containers", fresh.Containers())
	}
	// Corrupt, foreign policy, whole checkpoints: errors, state unchanged.
	bad := slices.Clone(data)
	bad[len(bad)-2] ^= 0xff
	whole, _ := r.EncodeCheckpoint(now)
	other := mustNew(t, SLOPolicy("other", 0.01, 0.001))
	for name, tc := range map[string]struct {
		r    *Recommender
		data []byte
	}{"checksum": {fresh, bad}, "two containers": {fresh, whole}, "policy": {other, data}, "garbage": {fresh, []byte("x")}} {
		before, _ := tc.r.EncodeCheckpoint(now)
		if _, err := tc.r.DecodeContainer(name, tc.data); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("%s: err %v, want ErrCheckpoint", name, err)
		}
		after, _ := tc.r.EncodeCheckpoint(now)
		if !bytes.Equal(before, after) {
			t.Errorf("%s: a failed decode changed the state", name)
		}
	}
}

func FuzzCountsUnmarshal(f *testing.F) {
	c, _ := NewCounts(CPUHistogramOptions())
	for _, v := range []float64{0, 0.1, 0.1, 5, 1000} {
		c.Add(v)
	}
	data, _ := c.MarshalBinary()
	f.Add(data)
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Counts
		if err := c.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrCorruptHistogram) && !errors.Is(err, ErrOptionsMismatch) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		// What decodes re-encodes to a form that decodes to the same.
		again, _ := c.MarshalBinary()
		var d Counts
		if err := d.UnmarshalBinary(again); err != nil || !d.Equal(&c) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
