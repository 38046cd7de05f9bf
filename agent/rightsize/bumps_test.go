package rightsize

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/internal/atomicfile"
)

func newTestEngine(t *testing.T, dir string) *Engine {
	t.Helper()
	e, warns, err := NewEngine(EngineOptions{CheckpointDir: dir})
	if err != nil || len(warns) > 0 {
		t.Fatalf("NewEngine: %v %v", err, warns)
	}
	return e
}

// TestBumpsSurviveARestart: the bumps a policy's maxOOMBumpsPerDay counts
// are read back by the next agent, so a restart grants no extra raises;
// bumps older than the window no longer count, and expire from the log.
func TestBumpsSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	e := newTestEngine(t, dir)
	for _, ago := range []time.Duration{30 * time.Hour, 2 * time.Hour, time.Minute} {
		if err := e.RecordBump("uid-1/app", now.Add(-ago), OOMWindow); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.RecordBump("uid-2/side", now, OOMWindow); err != nil {
		t.Fatal(err)
	}
	if n := e.Bumps("uid-1/app", now, OOMWindow); n != 2 {
		t.Fatalf("bumps in the window: %d, want 2", n)
	}

	again := newTestEngine(t, dir)
	for inst, want := range map[string]int{"uid-1/app": 2, "uid-2/side": 1, "uid-3/app": 0} {
		if n := again.Bumps(inst, now, OOMWindow); n != want {
			t.Errorf("after a restart %s has %d bumps, want %d", inst, n, want)
		}
	}
	// A day later nothing counts, and expiry empties the log.
	later := now.Add(OOMWindow + time.Minute)
	again.ExpireKills(later, OOMWindow)
	if n := again.Bumps("uid-1/app", later, OOMWindow); n != 0 {
		t.Fatalf("a day later: %d bumps", n)
	}
	if len(again.bumps) != 0 {
		t.Fatalf("expiry left %v", again.bumps)
	}
}

// TestBumpsInMemoryWithoutADirectory: without a checkpoint directory the
// log is kept in memory and nothing is written.
func TestBumpsInMemoryWithoutADirectory(t *testing.T) {
	e := newTestEngine(t, "")
	now := time.Now()
	for i := 0; i < 3; i++ {
		if err := e.RecordBump("u/app", now, OOMWindow); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.Bumps("u/app", now, OOMWindow); n != 3 {
		t.Fatalf("%d bumps, want 3", n)
	}
}

// TestBumpsKeptBounded: however many bumps are recorded, an instance
// keeps at most maxBumpsKept times, the newest.
func TestBumpsKeptBounded(t *testing.T) {
	dir := t.TempDir()
	e := newTestEngine(t, dir)
	now := time.Now()
	for i := 0; i < 3*maxBumpsKept; i++ {
		if err := e.RecordBump("u/app", now.Add(time.Duration(i)*time.Second), OOMWindow); err != nil {
			t.Fatal(err)
		}
	}
	end := now.Add(time.Duration(3*maxBumpsKept) * time.Second)
	if n := e.Bumps("u/app", end, OOMWindow); n != maxBumpsKept {
		t.Fatalf("%d bumps kept, want %d", n, maxBumpsKept)
	}
	if n := newTestEngine(t, dir).Bumps("u/app", end, OOMWindow); n != maxBumpsKept {
		t.Fatalf("%d bumps read back, want %d", n, maxBumpsKept)
	}
}

// TestBumpsFileFaults: a bump log that does not verify is moved aside with
// a warning that names it, and the counts start at 0; a time in the future
// counts as now; a directory that cannot be written still counts the bump
// and says it was not saved.
func TestBumpsFileFaults(t *testing.T) {
	now := time.Now()
	valid := func(t *testing.T, dir string) []byte {
		e := newTestEngine(t, dir)
		if err := e.RecordBump("u/app", now, OOMWindow); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, bumpsFile))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	for _, tc := range []struct {
		name   string
		mangle func([]byte) []byte
		reason string
	}{
		{"not JSON", func([]byte) []byte { return []byte("\x00garbage") }, "invalid character"},
		{"a tampered time", func(b []byte) []byte { return []byte(strings.Replace(string(b), `"u/app":[`, `"u/app":[1,`, 1)) }, "checksum"},
		{"another format", func(b []byte) []byte { return []byte(strings.Replace(string(b), `"version":1`, `"version":9`, 1)) }, "version 9"},
		{"empty", func([]byte) []byte { return nil }, "envelope: EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, bumpsFile)
			if err := os.WriteFile(path, tc.mangle(valid(t, dir)), 0o600); err != nil {
				t.Fatal(err)
			}
			e, warns, err := NewEngine(EngineOptions{CheckpointDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if len(warns) != 1 || !errors.Is(warns[0], ErrCorruptBumps) || !strings.Contains(warns[0].Error(), tc.reason) || !strings.Contains(warns[0].Error(), "moved aside") {
				t.Fatalf("warnings %v, want one corrupt bump log naming %q", warns, tc.reason)
			}
			if n := e.Bumps("u/app", now, OOMWindow); n != 0 {
				t.Fatalf("%d bumps from a corrupt log", n)
			}
			aside, err := atomicfile.Quarantined(path)
			if err != nil || len(aside) != 1 {
				t.Fatalf("quarantined copies %v (%v), want 1", aside, err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the corrupt log is still in place: %v", err)
			}
		})
	}

	t.Run("a time in the future counts as now", func(t *testing.T) {
		dir := t.TempDir()
		e := newTestEngine(t, dir)
		if err := e.RecordBump("u/app", now.Add(48*time.Hour), OOMWindow); err != nil {
			t.Fatal(err)
		}
		again := newTestEngine(t, dir)
		if n := again.Bumps("u/app", now.Add(time.Second), OOMWindow); n != 1 {
			t.Fatalf("%d bumps, want 1", n)
		}
		if n := again.Bumps("u/app", now.Add(OOMWindow+time.Hour), OOMWindow); n != 0 {
			t.Fatalf("a future bump still counts a day after the load: %d", n)
		}
	})

	t.Run("an unwritable directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		e := newTestEngine(t, dir)
		if err := os.WriteFile(dir, []byte("a file where the directory should be"), 0o600); err != nil {
			t.Fatal(err)
		}
		err := e.RecordBump("u/app", now, OOMWindow)
		if err == nil || !strings.Contains(err.Error(), "not saved") {
			t.Fatalf("RecordBump: %v, want an error saying the bump was not saved", err)
		}
		if n := e.Bumps("u/app", now, OOMWindow); n != 1 {
			t.Fatalf("%d bumps, want the unsaved one counted", n)
		}
	})
}

// FuzzLoadBumps: no bytes make the loader panic, return a corrupt log's
// times, or more than maxBumpsKept times of an instance.
func FuzzLoadBumps(f *testing.F) {
	dir := f.TempDir()
	now := time.Unix(1_800_000_000, 0)
	if err := saveBumps(filepath.Join(dir, "seed"), map[string][]time.Time{"u/app": {now, now.Add(-time.Hour)}}, now, OOMWindow); err != nil {
		f.Fatal(err)
	}
	seed, err := os.ReadFile(filepath.Join(dir, "seed"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{"version":1,"checksum":"","bumps":null}`))
	f.Add([]byte(`{"version":1,"bumps":{"a":[-9223372036854775808]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), bumpsFile)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		log, err := loadBumps(path, now)
		if err != nil && len(log) != 0 {
			t.Fatalf("an error (%v) with %d instances", err, len(log))
		}
		for inst, ts := range log {
			if len(ts) > maxBumpsKept {
				t.Fatalf("%s: %d times", inst, len(ts))
			}
			for _, ts := range ts {
				if ts.After(now) {
					t.Fatalf("%s: a time after now: %v", inst, ts)
				}
			}
		}
	})
}

// TestExpireKills: kills past their window leave the engine, recent ones
// stay and still count.
func TestExpireKills(t *testing.T) {
	e, _, err := NewEngine(EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	e.Kills("gone/app", t0, OOMWindow)
	e.Kills("recent/app", t0.Add(OOMWindow), OOMWindow)
	e.ExpireKills(t0.Add(OOMWindow+time.Hour), OOMWindow)
	if _, ok := e.ooms["gone/app"]; ok || len(e.ooms) != 1 {
		t.Fatalf("kills kept: %v", e.ooms)
	}
	if n := e.Kills("recent/app", t0.Add(OOMWindow+2*time.Hour), OOMWindow); n != 2 {
		t.Fatalf("recent kill lost: %d kills", n)
	}
}
