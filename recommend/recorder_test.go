package recommend

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// ingestTrace is a deterministic multi-container feed: containers start on
// different days (different histogram reference times), most rounds stamp
// every container with the round's time (decay-memo hits) and some stamp
// each container a few nanoseconds apart (misses); usage is bursty enough
// to move memory peaks.
type ingestStep struct {
	id string
	s  Sample
}

func ingestTrace(containers, rounds int) []ingestStep {
	rng := rand.New(rand.NewPCG(7, 11))
	var out []ingestStep
	for i := range rounds {
		round := t0.Add(time.Duration(i) * 10 * time.Minute)
		for c := range containers {
			if i < c*(rounds/containers)/2 { // staggered starts
				continue
			}
			at := round
			if i%5 == 4 {
				at = at.Add(time.Duration(c) * time.Nanosecond)
			}
			cpu := 0.05*float64(c+1) + rng.ExpFloat64()*0.1*float64(c%4+1)
			mem := 2e8*float64(c%5+1) + rng.Float64()*5e7 + float64(i%144)*1e6
			out = append(out, ingestStep{fmt.Sprintf("ns/pod-%d/c", c), Sample{Time: at, CPUCores: cpu, MemoryBytes: mem}})
		}
	}
	return out
}

// containerState is the checkpoint record of one container: every field
// and every histogram weight, bit for bit.
func containerState(t *testing.T, r *Recommender, id string) []byte {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		t.Fatalf("no state for %q", id)
	}
	return c.appendState(nil, id)
}

// TestRecorderMatchesReference proves the ingest paths bit-identical: the
// same samples through Recommender.Add, Recorder.Add, Recorder.AddBatch and
// the reference (a bare container without decay memo, FindBucket's log
// formula, math.Exp2 on every sample) give byte-identical container states
// and identical recommendations, for every preset.
func TestRecorderMatchesReference(t *testing.T) {
	const containers = 12
	trace := ingestTrace(containers, 600)
	for _, name := range PresetNames() {
		t.Run(name, func(t *testing.T) {
			p := mustPreset(t, name)
			viaAdd, viaRecorder, viaBatch := mustNew(t, p), mustNew(t, p), mustNew(t, p)
			recs, batches := map[string]*Recorder{}, map[string][]Sample{}
			for _, st := range trace {
				if err := viaAdd.Add(st.id, st.s); err != nil {
					t.Fatal(err)
				}
				if recs[st.id] == nil {
					recs[st.id] = viaRecorder.Recorder(st.id)
				}
				if err := recs[st.id].Add(st.s); err != nil {
					t.Fatal(err)
				}
				batches[st.id] = append(batches[st.id], st.s)
			}
			for id, samples := range batches {
				h := viaBatch.Recorder(id)
				for len(samples) > 0 { // uneven batches
					n := min(len(samples), 1+len(samples)%7)
					if err := h.AddBatch(samples[:n]); err != nil {
						t.Fatal(err)
					}
					samples = samples[n:]
				}
			}
			for id := range batches {
				for _, h := range containerHistograms(viaAdd, id) {
					if h.layout == nil || h.memo == nil {
						t.Fatalf("%s: histogram without bucket table or decay memo", id)
					}
				}
			}
			// The reference: bare containers on the formula and math.Exp2 path.
			ref := map[string]*container{}
			for _, st := range trace {
				c := ref[st.id]
				if c == nil {
					c = newContainer(&p, nil)
					for _, h := range c.histograms() {
						h.layout = nil
					}
					ref[st.id] = c
				}
				c.add(&p, st.s)
			}
			end := trace[len(trace)-1].s.Time.Add(time.Minute)
			for id, c := range ref {
				want := c.appendState(nil, id)
				for path, r := range map[string]*Recommender{"Recommender.Add": viaAdd, "Recorder.Add": viaRecorder, "Recorder.AddBatch": viaBatch} {
					if got := containerState(t, r, id); !bytes.Equal(got, want) {
						t.Errorf("%s %s: state differs from the reference (%d vs %d bytes)", path, id, len(got), len(want))
					}
					gotRec, ok := r.Recommend(id, end)
					// The fleet's λ (cgpilot-fleet) is the Recommender's,
					// solved at end over all its containers.
					wantRec, wantOK := c.recommend(&p, end, r.views(), budgetViews{}) // a first target: free
					if ok != wantOK || gotRec != wantRec {
						t.Errorf("%s %s: recommendation %+v %v, reference %+v %v", path, id, gotRec, ok, wantRec, wantOK)
					}
				}
			}
		})
	}
}

// views returns the fleet views in force, without a tick.
func (r *Recommender) views() fleetViews {
	r.mu.Lock()
	defer r.mu.Unlock()
	var fv fleetViews
	for i := range fv {
		fv[i] = fleetView{lambda: r.fleet[i].lambda, rate: r.fleet[i].rate()}
	}
	return fv
}

func mustNew(t *testing.T, p Policy) *Recommender {
	t.Helper()
	r, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// histograms lists a container's histograms.
func (c *container) histograms() []*Histogram {
	if c.vpa != nil {
		return []*Histogram{c.vpa.cpu, c.vpa.mem}
	}
	out := []*Histogram{c.cpu.hist, c.mem.hist}
	for _, f := range []*Histogram{c.cpu.fast, c.mem.fast} {
		if f != nil {
			out = append(out, f)
		}
	}
	return out
}

func containerHistograms(r *Recommender, id string) []*Histogram {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.containers[id].histograms()
}

// TestRecorderRejects: bad samples through a Recorder give the sentinel
// errors and change nothing; a batch is all or nothing and names the index.
func TestRecorderRejects(t *testing.T) {
	r := mustNew(t, mustPreset(t, DefaultPreset))
	h := r.Recorder("c")
	if h.ID() != "c" {
		t.Errorf("ID() = %q", h.ID())
	}
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	good := func(m int) Sample { return Sample{Time: at(m), CPUCores: 0.5, MemoryBytes: 1e9} }
	for m := range 5 {
		if err := h.Add(good(m)); err != nil {
			t.Fatal(err)
		}
	}
	before := containerState(t, r, "c")
	for _, tc := range []struct {
		name  string
		batch []Sample
		want  error
		index string
	}{
		{"negative cpu", []Sample{{Time: at(9), CPUCores: -1, MemoryBytes: 1}}, ErrInvalidSample, "sample 0 of 1"},
		{"NaN memory last", []Sample{good(6), good(7), {Time: at(8), CPUCores: 1, MemoryBytes: math.NaN()}}, ErrInvalidSample, "sample 2 of 3"},
		{"infinite cpu", []Sample{good(6), {Time: at(7), CPUCores: math.Inf(1)}}, ErrInvalidSample, "sample 1 of 2"},
		{"older than the state's last", []Sample{good(3)}, ErrStaleSample, "sample 0 of 1"},
		{"unsorted inside", []Sample{good(8), good(6)}, ErrStaleSample, "sample 1 of 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := h.AddBatch(tc.batch)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.index) || !strings.Contains(err.Error(), `"c"`) {
				t.Errorf("AddBatch: %v, want %v naming %q and the container", err, tc.want, tc.index)
			}
			if len(tc.batch) == 1 {
				if err := h.Add(tc.batch[0]); !errors.Is(err, tc.want) {
					t.Errorf("Add: %v, want %v", err, tc.want)
				}
			}
			if got := containerState(t, r, "c"); !bytes.Equal(got, before) {
				t.Errorf("state changed by a rejected batch")
			}
		})
	}
	if err := h.AddBatch(nil); err != nil {
		t.Errorf("empty batch: %v", err)
	}
	if err := h.AddBatch([]Sample{good(5), good(6)}); err != nil {
		t.Errorf("good batch: %v", err)
	}
}

// TestRecorderSurvivesForgetAndLoad: after Forget a Recorder starts a fresh
// state for its id; after LoadCheckpoint it records into the loaded state,
// never into the state that left the Recommender.
func TestRecorderSurvivesForgetAndLoad(t *testing.T) {
	r := mustNew(t, mustPreset(t, DefaultPreset))
	h := r.Recorder("c")
	at := func(m int) Sample {
		return Sample{Time: t0.Add(time.Duration(m) * time.Minute), CPUCores: 0.3, MemoryBytes: 5e8}
	}
	for m := range 10 {
		if err := h.Add(at(m)); err != nil {
			t.Fatal(err)
		}
	}
	samples := func() int64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.containers["c"].samples
	}
	saved, err := r.EncodeCheckpoint(t0)
	if err != nil {
		t.Fatal(err)
	}
	r.Forget("c")
	if r.Containers() != 0 {
		t.Fatalf("%d containers after Forget", r.Containers())
	}
	// A time before the forgotten state's last sample is fine: fresh state.
	if err := h.Add(at(3)); err != nil {
		t.Fatalf("Add after Forget: %v", err)
	}
	if r.Containers() != 1 || samples() != 1 {
		t.Fatalf("after Forget and Add: %d containers, %d samples, want 1 and 1", r.Containers(), samples())
	}
	for m := 4; m < 20; m++ {
		if err := h.Add(at(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.DecodeCheckpoint("saved", saved); err != nil {
		t.Fatal(err)
	}
	if err := h.Add(at(10)); err != nil {
		t.Fatalf("Add after load: %v", err)
	}
	if got := samples(); got != 11 {
		t.Errorf("loaded state has %d samples after one more Add, want 11", got)
	}
	if err := h.Add(at(9)); !errors.Is(err, ErrStaleSample) {
		t.Errorf("older time after load: %v, want ErrStaleSample", err)
	}
}

// TestRecorderConcurrent: recorders of many containers fed from several
// goroutines while another encodes checkpoints end in the same state as a
// sequential feed (run with -race).
func TestRecorderConcurrent(t *testing.T) {
	p := mustPreset(t, DefaultPreset)
	trace := ingestTrace(8, 300)
	seq, par := mustNew(t, p), mustNew(t, p)
	byID := map[string][]Sample{}
	for _, st := range trace {
		if err := seq.Add(st.id, st.s); err != nil {
			t.Fatal(err)
		}
		byID[st.id] = append(byID[st.id], st.s)
	}
	var wg sync.WaitGroup
	for id, samples := range byID {
		h := par.Recorder(id)
		wg.Go(func() {
			for _, s := range samples {
				if err := h.Add(s); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			// Recommend moves the target in force, so it reads an id outside
			// the feed; the checkpoint reads every histogram being fed.
			_, _ = par.Recommend("absent", t0)
			_ = par.Containers()
			if _, err := par.EncodeCheckpoint(t0); err != nil {
				t.Error(err)
			}
		}
	}()
	wg.Wait()
	<-done
	for id := range byID {
		if !bytes.Equal(containerState(t, par, id), containerState(t, seq, id)) {
			t.Errorf("%s: concurrent feed differs from sequential", id)
		}
	}
}

// TestDecayMemo: the memo returns math.Exp2's exact bits for repeated,
// colliding, zero, negative and underflowing arguments.
func TestDecayMemo(t *testing.T) {
	var m decayMemo
	rng := rand.New(rand.NewPCG(3, 5))
	args := []float64{0, math.Copysign(0, -1), -2000, -1075, 1, -1, 99.99, 1e-300}
	for range 2000 {
		args = append(args, (rng.Float64()-0.5)*200)
	}
	for round := range 3 {
		for i, x := range args {
			if round == 2 {
				x = args[(i*7)%len(args)]
			}
			if got, want := m.exp2(x), math.Exp2(x); math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("exp2(%v) = %v, math.Exp2 %v", x, got, want)
			}
		}
	}
}
