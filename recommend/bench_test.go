package recommend

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/test/tier"
)

// Ingest: per-sample cost of the histogram and of the full Recommender path
// (CPU + memory, mutex, container lookup), against a baseline that only
// stores the sample in a slice. Goal: ≥ 5 M samples/s/core.
func BenchmarkIngest(b *testing.B) {
	values := make([]float64, 4096)
	for i := range values {
		values[i] = 0.01 + float64(i%977)*0.013
	}
	b.Run("baseline-slice-append", func(b *testing.B) {
		cpu0 := processCPUSeconds()
		type smp struct {
			t time.Time
			v float64
		}
		buf := make([]smp, 0, 1<<16)
		for i := 0; b.Loop(); i++ {
			if len(buf) == cap(buf) {
				buf = buf[:0]
			}
			buf = append(buf, smp{t0.Add(time.Duration(i) * time.Second), values[i&4095]})
		}
		reportRate(b, cpu0, float64(b.N), "samples")
	})
	b.Run("histogram-AddSample", func(b *testing.B) {
		cpu0 := processCPUSeconds()
		h, _ := NewHistogram(CPUHistogramOptions())
		for i := 0; b.Loop(); i++ {
			h.AddSample(values[i&4095], 1, t0.Add(time.Duration(i)*time.Second))
		}
		reportRate(b, cpu0, float64(b.N), "samples")
	})
	for _, preset := range []string{DefaultPreset, "vpa"} {
		b.Run("recommender-Add-"+preset, func(b *testing.B) {
			cpu0 := processCPUSeconds()
			r, _ := New(mustPreset(b, preset))
			ids := make([]string, 1000)
			for i := range ids {
				ids[i] = fmt.Sprintf("ns/pod-%d/c", i)
			}
			for i := 0; b.Loop(); i++ {
				// 1000 containers sampled every 10 s, round robin.
				at := t0.Add(time.Duration(i/1000) * 10 * time.Second)
				_ = r.Add(ids[i%1000], Sample{Time: at, CPUCores: values[i&4095], MemoryBytes: 1e8 + values[i&4095]*1e8})
			}
			reportRate(b, cpu0, float64(b.N), "samples")
		})
	}
	// The ingest path: one Recorder per container, no id lookup.
	// "distinct-times" stamps every container's sample a different
	// nanosecond, so no two histograms share a decay factor (the worst case
	// for the memo; an agent stamps a collection round with one time).
	for _, tc := range []struct {
		preset   string
		distinct bool
	}{{DefaultPreset, false}, {"vpa", false}, {FleetPreset, false}, {DefaultPreset, true}} {
		name := "recorder-Add-" + tc.preset
		if tc.distinct {
			name += "-distinct-times"
		}
		b.Run(name, func(b *testing.B) {
			cpu0 := processCPUSeconds()
			r, _ := New(mustPreset(b, tc.preset))
			recs := make([]*Recorder, 1000)
			for i := range recs {
				recs[i] = r.Recorder(fmt.Sprintf("ns/pod-%d/c", i))
			}
			for i := 0; b.Loop(); i++ {
				at := t0.Add(time.Duration(i/1000) * 10 * time.Second)
				if tc.distinct {
					at = at.Add(time.Duration(i % 1000))
				}
				_ = recs[i%1000].Add(Sample{Time: at, CPUCores: values[i&4095], MemoryBytes: 1e8 + values[i&4095]*1e8})
			}
			reportRate(b, cpu0, float64(b.N), "samples")
		})
	}
	// Batches of one minute (6 samples) per container.
	b.Run("recorder-AddBatch6-"+DefaultPreset, func(b *testing.B) {
		cpu0 := processCPUSeconds()
		r, _ := New(mustPreset(b, DefaultPreset))
		recs := make([]*Recorder, 1000)
		for i := range recs {
			recs[i] = r.Recorder(fmt.Sprintf("ns/pod-%d/c", i))
		}
		batch := make([]Sample, 6)
		n := 0
		for i := 0; b.Loop(); i++ {
			minute := t0.Add(time.Duration(i/1000) * time.Minute)
			for k := range batch {
				v := values[(i*6+k)&4095]
				batch[k] = Sample{Time: minute.Add(time.Duration(k) * 10 * time.Second), CPUCores: v, MemoryBytes: 1e8 + v*1e8}
			}
			_ = recs[i%1000].AddBatch(batch)
			n += len(batch)
		}
		reportRate(b, cpu0, float64(n), "samples")
	})
}

// Histogram size: encoded bytes of a realistic histogram (a month of one
// container) and of the worst case (every bucket set), against VPA's dense
// in-memory form (176 float64). Goal ≤ 2 KiB.
func BenchmarkHistogramSize(b *testing.B) {
	full, _ := NewHistogram(CPUHistogramOptions())
	for bk := range full.opts.NumBuckets {
		full.AddSample(mid(full.opts, bk), 1, t0)
	}
	month, _ := NewHistogram(CPUHistogramOptions())
	for i := range 8640 {
		month.AddSample(0.05+0.3*float64(i%288)/288+float64(i%97)*0.01, 1, t0.Add(time.Duration(i)*5*time.Minute))
	}
	for _, tc := range []struct {
		name string
		h    *Histogram
	}{{"month-of-samples", month}, {"every-bucket", full}} {
		b.Run(tc.name, func(b *testing.B) {
			var n int
			for b.Loop() {
				data, _ := tc.h.MarshalBinary()
				n = len(data)
			}
			b.ReportMetric(float64(n), "bytes/hist")
			b.ReportMetric(float64(n)/float64(8*vpaNumBuckets), "x-dense")
		})
	}
}

// Checkpoint of 10,000 histograms (5,000 containers × CPU + memory): encode,
// atomic save with fsyncs, and load, against a baseline plain os.WriteFile
// of the same bytes. Goal ≤ 100 ms.
func BenchmarkCheckpoint10k(b *testing.B) {
	r, _ := New(mustPreset(b, DefaultPreset))
	for c := range 5000 {
		id := fmt.Sprintf("ns/pod-%d/c", c)
		for i := range 288 { // one day of 5-minute samples
			_ = r.Add(id, Sample{Time: t0.Add(time.Duration(i) * 5 * time.Minute), CPUCores: 0.01 * float64(1+(c*7+i)%300), MemoryBytes: 1e8 * float64(1+(c+i)%40)})
		}
	}
	dir := b.TempDir()
	path := filepath.Join(dir, "ckpt")
	data, _ := r.EncodeCheckpoint(t0)
	b.Logf("checkpoint of %d containers: %d bytes", r.Containers(), len(data))
	b.Run("baseline-WriteFile", func(b *testing.B) {
		for b.Loop() {
			if err := os.WriteFile(filepath.Join(dir, "plain"), data, 0o600); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			if _, err := r.EncodeCheckpoint(t0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("save-atomic-fsync", func(b *testing.B) {
		for b.Loop() {
			if err := r.SaveCheckpoint(path, t0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("load", func(b *testing.B) {
		x, _ := New(mustPreset(b, DefaultPreset))
		for b.Loop() {
			if err := x.DecodeCheckpoint(path, data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Replay of a month of Bitbrains (August 2013, 500 series, 4.3 M rows) with
// the default preset and the VPA control, against a baseline that only
// parses the trace. Needs ../shared/data.
func BenchmarkReplayMonth(b *testing.B) {
	path := filepath.Join(tier.SharedData(b, "traces"), "bitbrains-2013-08.csv.gz")
	b.Run("baseline-read-trace", func(b *testing.B) {
		for b.Loop() {
			if _, err := ReadTraceFile(path); err != nil {
				b.Fatal(err)
			}
		}
	})
	tr, err := ReadTraceFile(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, preset := range []string{DefaultPreset, FleetPreset} {
		name := "replay-policy-and-control"
		if preset != DefaultPreset {
			name += "-" + preset
		}
		b.Run(name, func(b *testing.B) {
			cpu0 := processCPUSeconds()
			for b.Loop() {
				if _, err := Replay(tr, ReplayOptions{Policy: mustPreset(b, preset), Control: mustPreset(b, "vpa"), Warmup: 24 * time.Hour}); err != nil {
					b.Fatal(err)
				}
			}
			reportRate(b, cpu0, float64(tr.Rows)*float64(b.N), "rows")
		})
	}
}

// A decision round of a node: Recommend for each of 1000 containers with
// two days of 5-minute history, at a new hour each round. With the fleet
// controller the round's first call also ticks it (hulls of all 1000
// histograms, λ solved); the ratio to cgpilot-balanced is its cost.
// Four days of history, so that cgpilot-cyclic's detection runs on whole
// days; "-no-budget" is the default preset without its resize budget (the
// allocator's cost is the difference).
func BenchmarkDecisionRound(b *testing.B) {
	for _, preset := range []string{DefaultPreset, DefaultPreset + "-no-budget", FleetPreset, CyclicPreset} {
		b.Run(preset, func(b *testing.B) {
			p, err := Preset(preset)
			if err != nil {
				p = mustPreset(b, DefaultPreset)
				p.ResizeBudget = 0
			}
			r, _ := New(p)
			ids := make([]string, 1000)
			for c := range ids {
				ids[c] = fmt.Sprintf("ns/pod-%d/c", c)
				h := r.Recorder(ids[c])
				for i := range 4 * 288 {
					v := 0.01 * float64(1+(c*7+i*13)%300)
					_ = h.Add(Sample{Time: t0.Add(time.Duration(i) * 5 * time.Minute), CPUCores: v, MemoryBytes: 1e8 * (1 + v)})
				}
			}
			now := t0.Add(96 * time.Hour)
			for b.Loop() {
				for _, id := range ids {
					r.Recommend(id, now)
				}
				now = now.Add(time.Hour)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/round")
		})
	}
}

// reportRate reports n per wall second and per CPU second of this process
// (the machine is shared, so wall time understates a core's rate).
func reportRate(b *testing.B, cpu0, n float64, unit string) {
	b.ReportMetric(n/b.Elapsed().Seconds(), unit+"/s")
	if cpu := processCPUSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(n/cpu, unit+"/cpu-s")
	}
}
