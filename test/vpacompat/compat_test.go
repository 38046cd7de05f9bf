package vpacompat

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/recommend"
	"github.com/cgpilot/cgpilot/test/tier"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/logic"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/util"
)

// upstream is one container in upstream VPA's model, alone in its
// aggregation, with the default recommender configuration.
type upstream struct {
	agg   *model.AggregateContainerState
	state *model.ContainerState
	rec   logic.PodResourceRecommender
}

func newUpstream() *upstream {
	agg := model.NewAggregateContainerState()
	return &upstream{
		agg:   agg,
		state: model.NewContainerState(model.Resources{}, agg),
		rec: logic.CreatePodResourceRecommender(logic.RecommendationConfig{
			SafetyMarginFraction: 0.15, PodMinCPUMillicores: 25, PodMinMemoryMb: 250,
			TargetCPUPercentile: 0.9, LowerBoundCPUPercentile: 0.5, UpperBoundCPUPercentile: 0.95,
			ConfidenceIntervalCPU:  24 * time.Hour,
			TargetMemoryPercentile: 0.9, LowerBoundMemoryPercentile: 0.5, UpperBoundMemoryPercentile: 0.95,
			ConfidenceIntervalMemory: 24 * time.Hour,
		}),
	}
}

func (u *upstream) add(t time.Time, cpu, mem float64) {
	u.state.AddSample(&model.ContainerUsageSample{MeasureStart: t, Usage: model.CPUAmountFromCores(cpu), Resource: model.ResourceCPU})
	u.state.AddSample(&model.ContainerUsageSample{MeasureStart: t, Usage: model.MemoryAmountFromBytes(mem), Resource: model.ResourceMemory})
}

// recommend returns upstream's target/lower/upper in cores and bytes.
func (u *upstream) recommend() recommend.Recommendation {
	r := u.rec.GetRecommendedPodResources(model.ContainerNameToAggregateStateMap{"c": u.agg})["c"]
	cpu := func(res model.Resources) float64 { return model.CoresFromCPUAmount(res[model.ResourceCPU]) }
	mem := func(res model.Resources) float64 { return model.BytesFromMemoryAmount(res[model.ResourceMemory]) }
	return recommend.Recommendation{
		CPU:    recommend.Estimate{Target: cpu(r.Target), Lower: cpu(r.LowerBound), Upper: cpu(r.UpperBound)},
		Memory: recommend.Estimate{Target: mem(r.Target), Lower: mem(r.LowerBound), Upper: mem(r.UpperBound)},
	}
}

func newOurs(t *testing.T) *recommend.Recommender {
	t.Helper()
	p, err := recommend.Preset("vpa")
	if err != nil {
		t.Fatal(err)
	}
	r, err := recommend.New(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tally compares one resource value and counts exact and one-bucket matches.
type tally struct {
	n, exact, withinBucket int
	worst                  float64
}

// sameBucket: a and b lie within one 5 % bucket of each other (plus 1 unit
// of VPA's integer rounding).
func sameBucket(a, b, unit float64) bool {
	lo, hi := min(a, b), max(a, b)
	return hi <= lo*1.05+unit
}

func (tl *tally) compare(t *testing.T, what string, ours, theirs, unit float64) {
	t.Helper()
	tl.n++
	switch {
	case ours == theirs:
		tl.exact++
		tl.withinBucket++
	case sameBucket(ours, theirs, unit):
		tl.withinBucket++
	default:
		if tl.n-tl.withinBucket <= 3 {
			t.Errorf("%s: ours %v, upstream %v: more than one bucket apart", what, ours, theirs)
		}
	}
	if theirs > 0 {
		tl.worst = max(tl.worst, math.Abs(ours-theirs)/theirs)
	}
}

// TestHistogramMatchesUpstream feeds random samples, weights and times to
// both histograms and compares every percentile bit for bit.
func TestHistogramMatchesUpstream(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ours  recommend.HistogramOptions
		first float64
		maxV  float64
	}{
		{"cpu", recommend.CPUHistogramOptions(), 0.01, 1000},
		{"memory", recommend.MemoryHistogramOptions(), 1e7, 1e12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uo, err := util.NewExponentialHistogramOptions(tc.maxV, tc.first, 1.05, 1e-4)
			if err != nil {
				t.Fatal(err)
			}
			if uo.NumBuckets() != tc.ours.NumBuckets {
				t.Fatalf("upstream has %d buckets, ours %d", uo.NumBuckets(), tc.ours.NumBuckets)
			}
			for b := 0; b < uo.NumBuckets(); b++ {
				if got, want := tc.ours.BucketStart(b), uo.GetBucketStart(b); got != want {
					t.Fatalf("bucket %d starts at %v, upstream %v", b, got, want)
				}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			theirs := util.NewDecayingHistogram(uo, 24*time.Hour)
			ours, err := recommend.NewHistogram(tc.ours)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2013, 8, 1, 0, 0, 0, 0, time.UTC)
			for i := range 200_000 {
				v := tc.first * math.Exp(rng.Float64()*math.Log(tc.maxV*2/tc.first))
				if i%7 == 0 {
					v = rng.Float64() * tc.first // bucket 0
				}
				w := rng.Float64() * 2
				now = now.Add(time.Duration(rng.IntN(600)) * time.Second)
				if rng.IntN(5000) == 0 {
					now = now.Add(150 * 24 * time.Hour) // force a reference shift
				}
				if tc.ours.FindBucket(v) != uo.FindBucket(v) {
					t.Fatalf("value %v: bucket %d, upstream %d", v, tc.ours.FindBucket(v), uo.FindBucket(v))
				}
				ours.AddSample(v, w, now)
				theirs.AddSample(v, w, now)
				if i%1000 == 0 {
					ours.SubtractSample(v, w/2, now)
					theirs.SubtractSample(v, w/2, now)
				}
				if i%997 == 0 {
					for p := 0.0; p <= 1.0; p += 0.01 {
						if got, want := ours.Percentile(p), theirs.Percentile(p); got != want {
							t.Fatalf("sample %d p%.2f: ours %v, upstream %v", i, p, got, want)
						}
					}
				}
			}
		})
	}
}

// TestRecommenderMatchesUpstreamSynthetic drives both with bursty synthetic
// series including gaps, duplicates and an OOM, comparing at every hour.
func TestRecommenderMatchesUpstreamSynthetic(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var cpuT, memT tally
	for series := range 20 {
		ours, up := newOurs(t), newUpstream()
		now := time.Date(2013, 8, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(series) * 17 * time.Minute)
		next := now.Add(time.Hour)
		for i := range 3000 {
			now = now.Add(time.Duration(60+rng.IntN(600)) * time.Second)
			if rng.IntN(500) == 0 {
				now = now.Add(time.Duration(rng.IntN(72)) * time.Hour)
			}
			cpu := rng.ExpFloat64() * float64(series+1) * 0.05
			mem := 5e7 + rng.ExpFloat64()*float64(series+1)*1e8
			for !now.Before(next) {
				o, _ := ours.Recommend("c", next)
				u := up.recommend()
				for _, c := range []struct {
					tl         *tally
					what       string
					a, b, unit float64
				}{
					{&cpuT, "cpu target", o.CPU.Target, u.CPU.Target, 0.001},
					{&cpuT, "cpu lower", o.CPU.Lower, u.CPU.Lower, 0.001},
					{&cpuT, "cpu upper", o.CPU.Upper, u.CPU.Upper, 0.001},
					{&memT, "memory target", o.Memory.Target, u.Memory.Target, 1},
					{&memT, "memory lower", o.Memory.Lower, u.Memory.Lower, 1},
					{&memT, "memory upper", o.Memory.Upper, u.Memory.Upper, 1},
				} {
					c.tl.compare(t, c.what, c.a, c.b, c.unit)
				}
				next = next.Add(time.Hour)
			}
			if err := ours.Add("c", recommend.Sample{Time: now, CPUCores: cpu, MemoryBytes: mem}); err != nil {
				t.Fatal(err)
			}
			up.add(now, cpu, mem)
			if i == 1500 {
				req := 3e8
				if err := ours.RecordOOM("c", recommend.OOMEvent{Time: now, UsageBytes: mem, RequestBytes: req}); err != nil {
					t.Fatal(err)
				}
				if err := up.state.RecordOOM(now, model.MemoryAmountFromBytes(req)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, tl := range []*tally{&cpuT, &memT} {
		if tl.exact != tl.n {
			t.Errorf("%d of %d values differ from upstream (worst relative %.3g)", tl.n-tl.exact, tl.n, tl.worst)
		}
	}
	t.Logf("cpu: %d/%d exact; memory: %d/%d exact", cpuT.exact, cpuT.n, memT.exact, memT.n)
}

// TestRecommenderMatchesUpstreamOnTraces replays the real Bitbrains traces
// through both and compares target, lower and upper bounds at every hourly
// boundary of every series: every value must lie within one bucket of
// upstream's, and be identical to it.
func TestRecommenderMatchesUpstreamOnTraces(t *testing.T) {
	dir := tier.SharedData(t, "traces")
	files, _ := filepath.Glob(filepath.Join(dir, "bitbrains-*.csv.gz"))
	if len(files) == 0 {
		t.Skipf("no bitbrains-*.csv.gz in %s", dir)
	}
	every := 1
	if testing.Short() || os.Getenv("CGPILOT_VPACOMPAT_EVERY") != "" {
		every = 10
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			tr, err := recommend.ReadTraceFile(f)
			if err != nil {
				t.Fatal(err)
			}
			tr = tr.Subset(every)
			const step = int64(3600)
			anchor := tr.MinTS / step * step
			var cpuT, memT tally
			for _, s := range tr.Series {
				ours, up := newOurs(t), newUpstream()
				fed := 0
				for T := anchor + ((s.TS[0]-anchor)/step+1)*step; T <= s.TS[len(s.TS)-1]; T += step {
					for ; fed < len(s.TS) && s.TS[fed] < T; fed++ {
						at := time.Unix(s.TS[fed], 0)
						if err := ours.Add(s.Name, recommend.Sample{Time: at, CPUCores: s.CPU[fed], MemoryBytes: s.Mem[fed]}); err != nil {
							t.Fatal(err)
						}
						up.add(at, s.CPU[fed], s.Mem[fed])
					}
					o, _ := ours.Recommend(s.Name, time.Unix(T, 0))
					u := up.recommend()
					what := s.Name + " at " + time.Unix(T, 0).UTC().Format(time.RFC3339)
					cpuT.compare(t, what+" cpu target", o.CPU.Target, u.CPU.Target, 0.001)
					cpuT.compare(t, what+" cpu lower", o.CPU.Lower, u.CPU.Lower, 0.001)
					cpuT.compare(t, what+" cpu upper", o.CPU.Upper, u.CPU.Upper, 0.001)
					memT.compare(t, what+" memory target", o.Memory.Target, u.Memory.Target, 1)
					memT.compare(t, what+" memory lower", o.Memory.Lower, u.Memory.Lower, 1)
					memT.compare(t, what+" memory upper", o.Memory.Upper, u.Memory.Upper, 1)
				}
			}
			for name, tl := range map[string]*tally{"cpu": &cpuT, "memory": &memT} {
				if tl.withinBucket != tl.n {
					t.Errorf("%s: %d of %d values more than one bucket from upstream", name, tl.n-tl.withinBucket, tl.n)
				}
				// The engine mirrors upstream's arithmetic, so on amd64 every value
				// is identical, not merely within a bucket.
				if tl.exact != tl.n {
					t.Errorf("%s: %d of %d values not identical to upstream", name, tl.n-tl.exact, tl.n)
				}
				t.Logf("%s: %d series, %d values compared, %d identical, %d within one bucket, worst relative difference %.3g",
					name, len(tr.Series), tl.n, tl.exact, tl.withinBucket, tl.worst)
			}
		})
	}
}
