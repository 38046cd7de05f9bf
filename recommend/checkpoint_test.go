package recommend

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/internal/atomicfile"
)

var update = flag.Bool("update", false, "rewrite golden files and testdata samples")

func fedRecommender(t testing.TB, preset string, containers int) *Recommender {
	t.Helper()
	return fedWith(t, mustPreset(t, preset), containers)
}

// v1SamplePolicy is spelled out, not a preset, so that tuning presets never
// invalidates the committed v1 sample.
func v1SamplePolicy() Policy {
	rp := func(cost, minimum, round float64) ResourcePolicy {
		return ResourcePolicy{Percentile: 0.5, ViolationCost: cost, Saturation: 1, HalfLife: Duration(12 * time.Hour),
			Min: minimum, Round: round, MaxStepDown: 0.5, DownBand: 0.3}
	}
	return Policy{Name: "checkpoint-v1-sample", Engine: EngineCgpilot, CPU: rp(12, 0.025, 0.001), Memory: rp(500e9, 32*mib, mib),
		MinHistory: Duration(time.Hour), ConfidenceHistory: Duration(24 * time.Hour), ShortHistoryMargin: 1,
		OOMFactor: 0.2, OOMWindow: Duration(24 * time.Hour)}
}

func fedWith(t testing.TB, p Policy, containers int) *Recommender {
	t.Helper()
	r, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	for c := range containers {
		id := "pod-" + string(rune('a'+c%26)) + "/c" + string(rune('0'+c/26%10))
		r.SetResources(id, Resources{CPURequest: 1, CPULimit: 2, MemoryRequest: 1e9, MemoryLimit: 2e9})
		for i := range 600 {
			at := t0.Add(time.Duration(i) * 5 * time.Minute)
			cpu := 0.1 * float64(c%7+1) * (1 + float64(i%13)/13)
			if err := r.Add(id, Sample{Time: at, CPUCores: cpu, MemoryBytes: 3e8 + float64(c)*1e7 + float64(i%17)*1e6}); err != nil {
				t.Fatal(err)
			}
		}
		if c == 0 {
			if err := r.RecordOOM(id, OOMEvent{Time: t0.Add(40 * time.Hour), UsageBytes: 9e8, LimitBytes: 1e9, RequestBytes: 5e8}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return r
}

func recommendAll(r *Recommender, at time.Time) map[string]Recommendation {
	out := map[string]Recommendation{}
	r.mu.Lock()
	ids := make([]string, 0, len(r.containers))
	for id := range r.containers {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	for _, id := range ids {
		out[id], _ = r.Recommend(id, at)
	}
	return out
}

// TestCheckpointRoundTrip: a restored recommender behaves exactly like the
// original, now and after more samples, for both engines and the fleet
// controller (saved after a decision round, so that targets in force,
// trackers and λ are part of the state).
func TestCheckpointRoundTrip(t *testing.T) {
	for _, preset := range []string{"vpa", DefaultPreset, FleetPreset} {
		t.Run(preset, func(t *testing.T) {
			orig := fedRecommender(t, preset, 30)
			recommendAll(orig, t0.Add(50*time.Hour))
			for i := range 30 { // violations and samples since that round
				orig.Add("pod-b/c0", Sample{Time: t0.Add(50*time.Hour + time.Duration(i)*time.Minute), CPUCores: 5, MemoryBytes: 5e9})
			}
			if preset == FleetPreset && !(orig.views()[0].lambda > 0) {
				t.Fatal("no λ solved before the save: the test does not cover the fleet state")
			}
			path := filepath.Join(t.TempDir(), "recommend.ckpt")
			if err := orig.SaveCheckpoint(path, t0); err != nil {
				t.Fatal(err)
			}
			restored, _ := New(mustPreset(t, preset))
			if err := restored.LoadCheckpoint(path); err != nil {
				t.Fatal(err)
			}
			later := t0.Add(60 * time.Hour)
			for _, r := range []*Recommender{orig, restored} {
				for i := range 20 {
					r.Add("pod-a/c0", Sample{Time: later.Add(time.Duration(i) * time.Minute), CPUCores: 3, MemoryBytes: 2e9})
				}
			}
			if a, b := recommendAll(orig, later.Add(time.Hour)), recommendAll(restored, later.Add(time.Hour)); !reflect.DeepEqual(a, b) {
				t.Errorf("restored recommender differs:\n%v\n%v", a, b)
			}
			entries, _ := os.ReadDir(filepath.Dir(path))
			if len(entries) != 1 {
				t.Errorf("directory holds %d entries, want only the checkpoint (no temp files)", len(entries))
			}
		})
	}
}

func TestCheckpointLoadErrors(t *testing.T) {
	r := fedRecommender(t, DefaultPreset, 3)
	good, err := r.EncodeCheckpoint(t0)
	if err != nil {
		t.Fatal(err)
	}
	payload := good[checkpointHeader:]
	// reseal puts a valid header and checksum on a modified payload, so that
	// the payload decoder itself is exercised.
	reseal := func(p []byte) []byte {
		out := append([]byte(nil), good[:12]...)
		sum := sha256.Sum256(p)
		return append(append(out, sum[:]...), p...)
	}
	edit := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	withPayload := func(f func([]byte) []byte) []byte { return reseal(f(append([]byte(nil), payload...))) }
	other := fedRecommender(t, "vpa", 1)
	otherData, _ := other.EncodeCheckpoint(t0)
	negative := fedRecommender(t, DefaultPreset, 1)
	for _, c := range negative.containers {
		c.mem.held = -1
	}
	negData, _ := negative.EncodeCheckpoint(t0)
	var corrupt *CorruptCheckpointError
	var version *VersionError
	for _, tc := range []struct {
		name    string
		data    []byte
		wantErr any
	}{
		{"empty", nil, &corrupt},
		{"JSON instead", []byte(`{"version":1}`), &corrupt},
		{"short header", good[:20], &corrupt},
		{"bad magic", edit(func(b []byte) []byte { b[0] = 'x'; return b }), &corrupt},
		{"flipped payload byte", edit(func(b []byte) []byte { b[len(b)-5] ^= 0x40; return b }), &corrupt},
		{"flipped checksum byte", edit(func(b []byte) []byte { b[20] ^= 1; return b }), &corrupt},
		{"truncated", good[:len(good)-1], &corrupt},
		{"future version", edit(func(b []byte) []byte { b[8] = 7; return b }), &version},
		{"version 0", edit(func(b []byte) []byte { b[8] = 0; return b }), &version},
		{"payload version mismatch", withPayload(func(p []byte) []byte { p[0] = 1; return p }), &corrupt},
		{"truncated payload", withPayload(func(p []byte) []byte { return p[:len(p)-9] }), &corrupt},
		{"trailing payload bytes", withPayload(func(p []byte) []byte { return append(p, 0) }), &corrupt},
		{"huge container count", withPayload(func(p []byte) []byte {
			// version, name, engine, time, then the count: rewrite it.
			d := decoder{buf: p[4:]}
			d.string(1 << 10)
			d.string(64)
			d.time()
			at := len(p) - len(d.buf)
			return append(append(p[:at:at], 0xff, 0xff, 0xff, 0xff, 0x0f), p[at+1:]...)
		}), &corrupt},
		{"other policy", otherData, &corrupt},
		{"negative target in force", negData, &corrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh, _ := New(mustPreset(t, DefaultPreset))
			fresh.Add("existing", Sample{Time: t0, CPUCores: 1, MemoryBytes: 1})
			path := filepath.Join(t.TempDir(), "ckpt")
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			err := fresh.LoadCheckpoint(path)
			if !errors.Is(err, ErrCheckpoint) || !errors.As(err, tc.wantErr) {
				t.Fatalf("err = %v, want %T", err, tc.wantErr)
			}
			if fresh.Containers() != 1 {
				t.Errorf("state changed: %d containers after a failed load", fresh.Containers())
			}
			aside, _ := atomicfile.Quarantined(path)
			if tc.name == "future version" {
				// A newer format stays where it is, untouched.
				if b, err := os.ReadFile(path); err != nil || string(b) != string(tc.data) || len(aside) != 0 {
					t.Errorf("newer checkpoint not left in place: %v, aside %v", err, aside)
				}
				return
			}
			if len(aside) != 1 {
				t.Errorf("corrupt file not moved aside: %v", aside)
			}
		})
	}
	t.Run("checksum error names both sums", func(t *testing.T) {
		fresh, _ := New(mustPreset(t, DefaultPreset))
		bad := edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b })
		err := fresh.DecodeCheckpoint("x", bad)
		want := "sha256:" + hex.EncodeToString(good[12:44])
		if !errors.As(err, &corrupt) || corrupt.Want != want || corrupt.Got == "" || corrupt.Got == want {
			t.Errorf("err = %#v", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		fresh, _ := New(mustPreset(t, DefaultPreset))
		if err := fresh.LoadCheckpoint(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("err = %v, want fs.ErrNotExist", err)
		}
	})
}

// TestCheckpointV1Sample keeps a version-1 file in testdata: this build must
// keep reading it (regenerate only with a deliberate -update).
func TestCheckpointV1Sample(t *testing.T) {
	path := filepath.Join("testdata", "checkpoint-v1.bin")
	if *update {
		r := fedWith(t, v1SamplePolicy(), 2)
		data, err := r.EncodeCheckpoint(t0)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := New(v1SamplePolicy())
	if err := r.DecodeCheckpoint(path, data); err != nil {
		t.Fatal(err)
	}
	// A policy whose histograms decay differently must not load it.
	changed := v1SamplePolicy()
	changed.Memory.HalfLife = Duration(18 * time.Hour)
	c, _ := New(changed)
	var ce *CorruptCheckpointError
	if err := c.DecodeCheckpoint(path, data); !errors.As(err, &ce) || !strings.Contains(err.Error(), "histogram options differ") {
		t.Errorf("changed half-life: %v", err)
	}
	if r.Containers() != 2 {
		t.Fatalf("%d containers, want 2", r.Containers())
	}
	rec, ok := r.Recommend("pod-a/c0", t0.Add(50*time.Hour))
	if !ok || !(rec.CPU.Target > 0) || !(rec.Memory.Target > 0) {
		t.Errorf("recommendation from the v1 sample: %+v %v", rec, ok)
	}
	if binary.LittleEndian.Uint32(data[8:12]) != 1 {
		t.Error("sample is not version 1")
	}
	// Migrated: the trackers start empty with the v1 target in force, and
	// a save writes version 2 that loads back to the same recommendations.
	c0 := r.containers["pod-a/c0"]
	if c0.cpuT.n != 0 || c0.cpuT.inForce != c0.cpu.held {
		t.Errorf("migrated tracker %+v, held %v", c0.cpuT, c0.cpu.held)
	}
	v2, err := r.EncodeCheckpoint(t0)
	if err != nil || binary.LittleEndian.Uint32(v2[8:12]) != CheckpointVersion {
		t.Fatalf("re-encode: %v", err)
	}
	back, _ := New(v1SamplePolicy())
	if err := back.DecodeCheckpoint("v2", v2); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"pod-a/c0"} {
		a, _ := r.Recommend(id, t0.Add(60*time.Hour))
		b, _ := back.Recommend(id, t0.Add(60*time.Hour))
		if a != b {
			t.Errorf("%s after v1→v2: %+v, want %+v", id, b, a)
		}
	}
}

// TestCheckpointV2Sample keeps a version-2 file (written by the build
// before version 3) in testdata: it loads, its fleet controllers start
// unsolved, and a save writes version 3 that loads back to the same
// recommendations.
func TestCheckpointV2Sample(t *testing.T) {
	path := filepath.Join("testdata", "checkpoint-v2.bin")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint32(data[8:12]) != 2 {
		t.Fatal("sample is not version 2")
	}
	r, _ := New(v1SamplePolicy())
	if err := r.DecodeCheckpoint(path, data); err != nil {
		t.Fatal(err)
	}
	if r.Containers() != 2 || !reflect.DeepEqual(r.fleet, migrateV2()) {
		t.Fatalf("%d containers, fleet %+v", r.Containers(), r.fleet)
	}
	v3, err := r.EncodeCheckpoint(t0)
	if err != nil || binary.LittleEndian.Uint32(v3[8:12]) != CheckpointVersion {
		t.Fatalf("re-encode: %v", err)
	}
	back, _ := New(v1SamplePolicy())
	if err := back.DecodeCheckpoint("v3", v3); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"pod-a/c0", "pod-b/c0"} {
		a, aok := r.Recommend(id, t0.Add(60*time.Hour))
		b, bok := back.Recommend(id, t0.Add(60*time.Hour))
		if !aok || a != b || aok != bok {
			t.Errorf("%s after v2→v3: %+v %v, want %+v %v", id, b, bok, a, aok)
		}
	}
}

// TestCheckpointV3Sample: a version 3 file (written by the previous
// format, before the time-of-day state was kept) of a policy with daily
// periods loads with empty seasons and budgets, and re-encodes as the
// current version to the same recommendations.
func TestCheckpointV3Sample(t *testing.T) {
	path := filepath.Join("testdata", "checkpoint-v3.bin")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint32(data[8:12]) != 3 {
		t.Fatal("sample is not version 3")
	}
	p := v1SamplePolicy()
	p.Name = "checkpoint-v3-sample"
	p.CPU.DailyPeriods, p.Memory.DailyPeriods = 4, 4
	r, _ := New(p)
	if err := r.DecodeCheckpoint(path, data); err != nil {
		t.Fatal(err)
	}
	if r.Containers() != 2 {
		t.Fatalf("%d containers, want 2", r.Containers())
	}
	for id, c := range r.containers {
		for _, s := range []*resourceState{&c.cpu, &c.mem} {
			if s.season == nil || s.budget != 0 || s.season.hour[0] != math.MinInt64 || !s.season.periods[0].IsEmpty() {
				t.Fatalf("%s: the season of a version 3 file is not fresh", id)
			}
		}
	}
	cur, err := r.EncodeCheckpoint(t0)
	if err != nil || binary.LittleEndian.Uint32(cur[8:12]) != CheckpointVersion {
		t.Fatalf("re-encode: %v", err)
	}
	back, _ := New(p)
	if err := back.DecodeCheckpoint("current", cur); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"pod-a/c0", "pod-b/c0"} {
		a, aok := r.Recommend(id, t0.Add(60*time.Hour))
		b, bok := back.Recommend(id, t0.Add(60*time.Hour))
		if !aok || !reflect.DeepEqual(a, b) || aok != bok {
			t.Errorf("%s after v3→v%d: %+v %v, want %+v %v", id, CheckpointVersion, b, bok, a, aok)
		}
	}
}

func FuzzDecodeCheckpoint(f *testing.F) {
	r := fedRecommender(f, DefaultPreset, 2)
	good, _ := r.EncodeCheckpoint(t0)
	f.Add(good)
	v := fedRecommender(f, "vpa", 1)
	vg, _ := v.EncodeCheckpoint(t0)
	f.Add(vg)
	f.Add(append(append([]byte(nil), good[:8]...), 2, 0, 0, 0))
	fl := fedRecommender(f, FleetPreset, 2)
	recommendAll(fl, t0.Add(50*time.Hour))
	fg, _ := fl.EncodeCheckpoint(t0)
	f.Add(fg)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, preset := range []string{DefaultPreset, "vpa", FleetPreset} {
			x, _ := New(mustPreset(t, preset))
			x.Add("keep", Sample{Time: t0, CPUCores: 1, MemoryBytes: 1})
			if err := x.DecodeCheckpoint("fuzz", data); err != nil {
				if !errors.Is(err, ErrCheckpoint) {
					t.Fatalf("error %v does not wrap ErrCheckpoint", err)
				}
				if x.Containers() != 1 {
					t.Fatal("failed decode changed the state")
				}
				continue
			}
			// A decoded state must be usable.
			for id := range recommendAll(x, t0.Add(100*time.Hour)) {
				x.Add(id, Sample{Time: t0.Add(200 * time.Hour), CPUCores: 1, MemoryBytes: 1e9})
				x.Recommend(id, t0.Add(201*time.Hour))
			}
		}
	})
}

// TestCheckpointKeepsTheSeason: a cyclic container restored from a
// checkpoint follows its daily periods at once, as the original does,
// instead of spending three days to find its cycle again; both then
// recommend the same after more samples.
func TestCheckpointKeepsTheSeason(t *testing.T) {
	p := mustPreset(t, CyclicPreset)
	orig, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	const id = "shop/web"
	orig.SetResources(id, Resources{CPURequest: 1, CPULimit: 2, MemoryRequest: 1e9, MemoryLimit: 2e9})
	rng := rand.New(rand.NewPCG(11, 4))
	feed := func(r *Recommender, from, to time.Time) {
		for at := from; at.Before(to); at = at.Add(5 * time.Minute) {
			cpu := 0.4
			if h := at.UTC().Hour(); h >= 8 && h < 18 {
				cpu = 2
			}
			if err := r.Add(id, Sample{Time: at, CPUCores: cpu * (1 + 0.1*rng.NormFloat64()), MemoryBytes: 5e8}); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	saved := start.Add(5*24*time.Hour + 11*time.Hour) // a business hour of day 6
	feed(orig, start, saved)
	before, _ := orig.Recommend(id, saved)
	if !strings.HasPrefix(before.CPU.Explain.Mode, "daily period") {
		t.Fatalf("the original is not cyclic after 5 days (mode %q): the test does not cover the season", before.CPU.Explain.Mode)
	}
	path := filepath.Join(t.TempDir(), "recommend.ckpt")
	if err := orig.SaveCheckpoint(path, saved); err != nil {
		t.Fatal(err)
	}
	restored, _ := New(p)
	if err := restored.LoadCheckpoint(path); err != nil {
		t.Fatal(err)
	}
	later := saved.Add(7 * time.Hour) // the night period
	rng = rand.New(rand.NewPCG(12, 4))
	feed(orig, saved, later)
	rng = rand.New(rand.NewPCG(12, 4))
	feed(restored, saved, later)
	a, _ := orig.Recommend(id, later)
	b, _ := restored.Recommend(id, later)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("restored recommender differs after the restart:\n%+v\n%+v", a.CPU, b.CPU)
	}
	if !strings.HasPrefix(b.CPU.Explain.Mode, "daily period") {
		t.Errorf("restored recommender not cyclic (mode %q)", b.CPU.Explain.Mode)
	}
}
