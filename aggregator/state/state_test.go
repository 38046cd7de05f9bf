package state

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/recommend"
)

var t0 = time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)

var web = report.Key{Workload: report.Workload{Namespace: "shop", Kind: report.KindDeployment, Name: "web"}, Container: "app"}

// podSample is one sample of one pod.
type podSample struct {
	node, pod string
	t         time.Time
	cpu, mem  float64
}

// genSamples makes windows×nodes×pods samples every 10 s.
func genSamples(seed uint64, windows, nodes, podsPerNode int) []podSample {
	rng := rand.New(rand.NewPCG(seed, 7))
	var out []podSample
	for w := range windows {
		level := 0.4 + 0.3*math.Sin(float64(w)/60)
		for r := range 6 {
			ts := t0.Add(time.Duration(w)*time.Minute + time.Duration(r)*10*time.Second)
			for n := range nodes {
				for p := range podsPerNode {
					out = append(out, podSample{node: "node-" + string(rune('a'+n)), pod: "web-" + string(rune('a'+n)) + string(rune('0'+p)),
						t: ts, cpu: level * rng.ExpFloat64(), mem: 3e8 + 1e8*rng.NormFloat64()})
				}
			}
		}
	}
	return out
}

// reportsFrom builds per node (node "" = one node for all samples) the
// reports of the samples, numbered from 1.
func reportsFrom(t testing.TB, samples []podSample, oneNode bool) map[string][]*report.Decoded {
	t.Helper()
	builders := map[string]*report.Builder{}
	for _, s := range samples {
		node := s.node
		if oneNode {
			node = "all"
		}
		b := builders[node]
		if b == nil {
			var err error
			if b, err = report.NewBuilder(report.BuilderConfig{Node: node}); err != nil {
				t.Fatal(err)
			}
			b.Describe(web, report.ContainerInfo{Current: report.Resources{CPURequest: 1, MemoryRequest: 5e8}, Adjustable: true, Policy: "p"})
			builders[node] = b
		}
		b.Sample(web, s.pod, s.t, s.cpu, s.mem)
	}
	out := map[string][]*report.Decoded{}
	for node, b := range builders {
		for i, r := range b.Cut(t0.Add(100 * 24 * time.Hour)) {
			r.APIVersion, r.Agent, r.Sequence = report.APIVersion, report.Agent{ID: "agent-" + node, Started: t0}, uint64(i+1)
			body, err := report.Encode(r, false)
			if err != nil {
				t.Fatal(err)
			}
			d, err := report.Decode(bytes.NewReader(body), "")
			if err != nil {
				t.Fatal(err)
			}
			out[node] = append(out[node], d)
		}
	}
	return out
}

// TestStoreMergeIsExact: five nodes' reports, applied in a shuffled order
// within each window, give after Fold the same state, bit for bit, as one
// node reporting every pod.
func TestStoreMergeIsExact(t *testing.T) {
	samples := genSamples(3, 180, 5, 3)
	perNode := reportsFrom(t, samples, false)
	single := reportsFrom(t, samples, true)["all"]

	cfg := Config{Step: time.Minute}
	merged, one := New(cfg), New(cfg)
	rng := rand.New(rand.NewPCG(9, 9))
	for w := range single {
		now := single[w].WindowEnd.Add(10 * time.Second)
		var batch []*report.Decoded
		for _, rs := range perNode {
			batch = append(batch, rs[w])
		}
		rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		for _, d := range batch {
			if err := merged.Apply(d, now); err != nil {
				t.Fatal(err)
			}
		}
		if err := one.Apply(single[w], now); err != nil {
			t.Fatal(err)
		}
		merged.Fold(now)
		one.Fold(now)
	}
	end := single[len(single)-1].WindowEnd.Add(time.Hour)
	merged.Fold(end)
	one.Fold(end)
	rm, _ := merged.recommender(recommend.DefaultPreset)
	ro, _ := one.recommender(recommend.DefaultPreset)
	a, _ := rm.EncodeContainer(web.String(), end)
	b, _ := ro.EncodeContainer(web.String(), end)
	if !bytes.Equal(a, b) || len(a) == 0 {
		t.Fatal("merged state differs from one node's")
	}
	ra, rb := merged.Recommendation(web), one.Recommendation(web)
	if ra == nil || rb == nil || ra.Recommendation != rb.Recommendation {
		t.Fatalf("recommendations %+v, %+v", ra, rb)
	}
	if ra.Nodes != 5 || rb.Nodes != 1 || ra.Samples != int64(len(samples)) {
		t.Errorf("nodes %d/%d, samples %d of %d", ra.Nodes, rb.Nodes, ra.Samples, len(samples))
	}
	if st := merged.Stats(); st.LateReports != 0 || st.Accepted != uint64(5*len(single)) || st.PendingEntries != 0 {
		t.Errorf("stats %+v", st)
	}
	t.Logf("%d samples, %d windows, 5 nodes: CPU %.3f cores, memory %.0f MiB, identical to one node", len(samples), len(single), ra.CPU.Target, ra.Memory.Target/(1<<20))
}

func TestStoreRefuses(t *testing.T) {
	s := New(Config{})
	rs := reportsFrom(t, genSamples(1, 3, 1, 1), false)["node-a"]
	now := rs[2].WindowEnd
	if err := s.Apply(rs[1], now); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(rs[1], now); !errors.Is(err, ErrReplayed) {
		t.Errorf("same sequence again: %v", err)
	}
	if err := s.Apply(rs[0], now); !errors.Is(err, ErrReplayed) {
		t.Errorf("lower sequence: %v", err)
	}
	// A new agent process starts afresh whatever its clock says (issue
	// 19: one restarted with its clock behind its previous start was
	// refused until the aggregator restarted); the old one's reports stay
	// replays.
	behind := *rs[2]
	behind.Agent = report.Agent{ID: "x", Started: t0.Add(-time.Hour)}
	if err := s.Apply(&behind, now); err != nil {
		t.Errorf("an agent restarted with its clock behind: %v", err)
	}
	if err := s.Apply(&behind, now); !errors.Is(err, ErrReplayed) {
		t.Errorf("its report again: %v", err)
	}
	if err := s.Apply(rs[1], now); !errors.Is(err, ErrReplayed) {
		t.Errorf("the previous agent's report again: %v", err)
	}
	// A window the node reported already, under a new sequence or agent:
	// its samples would count twice.
	again := *rs[2]
	again.Agent, again.Sequence = report.Agent{ID: "z", Started: t0}, 7
	if err := s.Apply(&again, now); !errors.Is(err, ErrReplayed) {
		t.Errorf("a window reported twice: %v", err)
	}
	restarted := *rs[2]
	restarted.WindowEnd = rs[2].WindowEnd.Add(time.Minute)
	restarted.Agent = report.Agent{ID: "y", Started: t0.Add(time.Hour)}
	if err := s.Apply(&restarted, now); err != nil {
		t.Errorf("restarted agent: %v", err)
	}
	wrongPeriod := *rs[2]
	wrongPeriod.PeriodSeconds = 30
	if err := s.Apply(&wrongPeriod, now); !errors.Is(err, ErrWindow) {
		t.Errorf("period 30 s: %v", err)
	}
	future := *rs[2]
	future.Sequence = 99
	future.Agent = restarted.Agent
	if err := s.Apply(&future, now.Add(-2*time.Minute)); !errors.Is(err, ErrWindow) {
		t.Errorf("future window: %v", err)
	}
	if st := s.Stats(); st.Accepted != 3 || st.Replayed != 5 || st.BadWindow != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestStoreLateAndRestore: a window merged late keeps its samples; a new
// store restored from an export continues exactly where the first was.
func TestStoreLateAndRestore(t *testing.T) {
	rs := reportsFrom(t, genSamples(5, 120, 2, 2), false)
	cfg := Config{Step: time.Minute}
	s := New(cfg)
	// node-a reports on time; node-b's first 10 windows arrive late.
	for w := range rs["node-a"] {
		now := rs["node-a"][w].WindowEnd.Add(5 * time.Second)
		if err := s.Apply(rs["node-a"][w], now); err != nil {
			t.Fatal(err)
		}
		if w >= 10 {
			if w == 10 {
				for _, d := range rs["node-b"][:10] {
					if err := s.Apply(d, now); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := s.Apply(rs["node-b"][w], now); err != nil {
				t.Fatal(err)
			}
		}
		s.Fold(now)
	}
	st := s.Stats()
	if st.LateReports != 10-2 { // windows 8 and 9 were still open (grace 2 min)
		t.Errorf("late reports %d, want 8", st.LateReports)
	}
	half := rs["node-a"][119].WindowEnd.Add(time.Hour)
	s.Fold(half)
	if r := s.Recommendation(web); r == nil || r.Samples != 120*6*4 {
		if r != nil {
			t.Fatalf("recommendation from %d samples, want all %d", r.Samples, 120*6*4)
		}
		t.Fatalf("recommendation %+v, want all %d samples", r, 120*6*4)
	}
	dirty := s.Dirty()
	if len(dirty) != 1 || dirty[0] != web.Workload {
		t.Fatalf("dirty %v", dirty)
	}
	ws := s.Export(web.Workload, half)
	if len(s.Dirty()) != 0 || len(ws.Containers) != 1 || len(ws.Containers[0].State) == 0 {
		t.Fatalf("export %+v", ws)
	}
	s2 := New(cfg)
	if err := s2.Restore(ws, half); err != nil {
		t.Fatal(err)
	}
	r1, r2 := s.Recommendation(web), s2.Recommendation(web)
	if r1 == nil || r2 == nil || *r1 != *r2 {
		t.Fatalf("restored recommendation %+v, want %+v", r2, r1)
	}
	// Both continue with the same new window and agree.
	more := reportsFrom(t, genSamples(11, 1, 1, 1), false)["node-a"][0]
	more.WindowEnd = half.Add(time.Minute).Truncate(time.Minute)
	more.Agent, more.Sequence = report.Agent{ID: "agent-node-a-2", Started: half}, 1
	later := more.WindowEnd.Add(2 * time.Hour)
	for _, st := range []*Store{s, s2} {
		if err := st.Apply(more, more.WindowEnd); err != nil {
			t.Fatal(err)
		}
		st.Fold(later)
	}
	a, b := s.Recommendation(web), s2.Recommendation(web)
	if a == nil || b == nil || a.Recommendation != b.Recommendation || a.Samples != b.Samples {
		t.Errorf("after more data: %+v vs %+v", a, b)
	}
	recs, ok := s.ForNode("node-a")
	if !ok || len(recs) != 1 || recs[0].Key != web {
		t.Errorf("ForNode: %v %+v", ok, recs)
	}
	if _, ok := s.ForNode("nope"); ok {
		t.Error("ForNode of an unknown node")
	}
	// Nothing seen after later: everything expires, the workload is gone.
	if gone := s.Expire(later.Add(time.Hour)); len(gone) != 1 || gone[0] != web.Workload {
		t.Errorf("expired %v", gone)
	}
	if st := s.Stats(); st.Containers != 0 {
		t.Errorf("%d containers after expiry", st.Containers)
	}
}

func TestStoreNotMergeable(t *testing.T) {
	s := New(Config{Policies: func(name string) (PolicyInfo, bool) {
		return PolicyInfo{Preset: "vpa"}, name == "vpa-policy"
	}})
	rs := reportsFrom(t, genSamples(2, 5, 1, 1), false)["node-a"]
	for _, d := range rs {
		d.Containers[0].Policy = "vpa-policy"
		if err := s.Apply(d, d.WindowEnd); err != nil {
			t.Fatal(err)
		}
	}
	s.Fold(rs[4].WindowEnd.Add(time.Hour))
	var e Entry
	s.Entries(func(x Entry) { e = x })
	if e.NotMergeable == "" || e.Rec != nil || e.Preset != "vpa" {
		t.Errorf("vpa entry %+v", e)
	}
}
