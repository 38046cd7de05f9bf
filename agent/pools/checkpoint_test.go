package pools

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cgpilot/cgpilot/internal/atomicfile"
)

func TestCheckpointRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "cp")
	in := map[string]Assignment{
		"u1": {UID: "u1", Namespace: "ns", Name: "db", CPUs: mustSet(t, "2-3")},
		"u2": {UID: "u2", Namespace: "ns", Name: "cache", CPUs: mustSet(t, "5"), ReleaseIsolation: true},
	}
	if err := writeCheckpoint(path, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || !out["u1"].CPUs.Equals(in["u1"].CPUs) || out["u2"].ReleaseIsolation != true || out["u2"].Name != "cache" {
		t.Fatalf("round trip: %+v", out)
	}
	// No temp files left behind.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("dir has %d entries, want only the checkpoint", len(entries))
	}
	// Equal states encode to equal bytes.
	if string(encodeCheckpoint(in)) != string(encodeCheckpoint(out)) {
		t.Fatal("encoding is not deterministic")
	}
}

func TestCheckpointBad(t *testing.T) {
	good := string(encodeCheckpoint(map[string]Assignment{"u1": {UID: "u1", CPUs: mustSet(t, "1")}}))
	reencode := func(data string) string {
		return `{"version":1,"checksum":"` + atomicfile.Checksum([]byte(data)) + `","data":` + data + `}`
	}
	for _, tc := range []struct {
		name    string
		content string
		want    error
	}{
		{"empty file", "", ErrCheckpointCorrupt},
		{"truncated", good[:len(good)/2], ErrCheckpointCorrupt},
		{"payload edited", strings.Replace(good, `"cpus":"1"`, `"cpus":"2"`, 1), ErrCheckpointCorrupt},
		{"checksum edited", strings.Replace(good, `"checksum":"`, `"checksum":"0`, 1), ErrCheckpointCorrupt},
		{"future version", strings.Replace(good, `"version":1`, `"version":2`, 1), ErrCheckpointVersion},
		{"future version needing a newer reader", strings.Replace(good, `"version":1`, `"version":3,"minReader":2`, 1), ErrCheckpointVersion},
		{"version 0", strings.Replace(good, `"version":1`, `"version":0`, 1), ErrCheckpointCorrupt},
		{"id out of bounds", reencode(`{"assignments":[{"uid":"a","namespace":"","name":"","cpus":"0-9000"}]}`), ErrCheckpointCorrupt},
		{"unknown envelope field", strings.Replace(good, `"version":1`, `"version":1,"x":1`, 1), ErrCheckpointCorrupt},
		{"trailing garbage", good + "{}", ErrCheckpointCorrupt},
		{"overlap with valid checksum", reencode(`{"assignments":[{"uid":"a","namespace":"","name":"","cpus":"1-2"},{"uid":"b","namespace":"","name":"","cpus":"2"}]}`), ErrCheckpointCorrupt},
		{"bad cpus with valid checksum", reencode(`{"assignments":[{"uid":"a","namespace":"","name":"","cpus":"x"}]}`), ErrCheckpointCorrupt},
		{"empty cpus with valid checksum", reencode(`{"assignments":[{"uid":"a","namespace":"","name":"","cpus":""}]}`), ErrCheckpointCorrupt},
		{"duplicate uid", reencode(`{"assignments":[{"uid":"a","namespace":"","name":"","cpus":"1"},{"uid":"a","namespace":"","name":"","cpus":"2"}]}`), ErrCheckpointCorrupt},
		{"no uid", reencode(`{"assignments":[{"uid":"","namespace":"","name":"","cpus":"1"}]}`), ErrCheckpointCorrupt},
		{"unknown data field", reencode(`{"assignments":[],"more":1}`), ErrCheckpointCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cp")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ReadCheckpoint(path)
			if !errors.Is(err, tc.want) || got != nil {
				t.Fatalf("readCheckpoint = %v, %v; want nil, %v", got, err, tc.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
			var ce *CorruptCheckpointError
			if tc.name == "payload edited" && (!errors.As(err, &ce) || ce.Want == ce.Got || ce.Got == "") {
				t.Fatalf("want expected/actual checksums, got %#v", err)
			}
		})
	}
}

func TestCheckpointMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp")
	if _, err := ReadCheckpoint(path); !errors.Is(err, ErrCheckpointNotFound) {
		t.Fatalf("err = %v, want ErrCheckpointNotFound", err)
	}
}

// TestCheckpointFixtureV1 keeps today's format readable: the file was
// written by the agent before the pools had their own package, and it
// still encodes to the same bytes.
func TestCheckpointFixtureV1(t *testing.T) {
	got, err := ReadCheckpoint("testdata/checkpoint-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	a, b := got["5d1c9a7e-0b7e-4c1e-9a2b-000000000001"], got["5d1c9a7e-0b7e-4c1e-9a2b-000000000002"]
	if len(got) != 2 || a.CPUs.String() != "2-3" || a.Name != "postgres-0" || b.CPUs.String() != "6-9" || !b.ReleaseIsolation || b.Namespace != "trading" {
		t.Fatalf("fixture decoded as %+v", got)
	}
	raw, _ := os.ReadFile("testdata/checkpoint-v1.json")
	if string(encodeCheckpoint(got)) != string(raw) {
		t.Fatalf("re-encoding differs from the fixture:\n%s\n%s", encodeCheckpoint(got), raw)
	}
}

// TestCheckpointNewerReadable: a later format that says this reader may
// read it (minReader 1) is decoded for the fields it knows.
func TestCheckpointNewerReadable(t *testing.T) {
	data := `{"assignments":[{"uid":"a","namespace":"n","name":"p","cpus":"1-2","future":true}],"more":{}}`
	b := `{"version":2,"minReader":1,"checksum":"` + atomicfile.Checksum([]byte(data)) + `","data":` + data + `}`
	got, err := decodeCheckpoint("cp", []byte(b))
	if err != nil || got["a"].CPUs.String() != "1-2" {
		t.Fatalf("decode: %+v, %v", got, err)
	}
}

func TestCheckpointStateRollsBackOnWriteFailure(t *testing.T) {
	dir := t.TempDir()
	s := &checkpointState{memState: newMemState(mustSet(t, "0-3"), mustSet(t, "")), file: filepath.Join(dir, "cp")}
	if err := s.setAssignment(Assignment{UID: "a", CPUs: mustSet(t, "1")}); err != nil {
		t.Fatal(err)
	}
	// Make the directory unwritable by replacing the file path's parent with a file.
	s.file = filepath.Join(dir, "cp", "nested")
	err := s.setAssignment(Assignment{UID: "b", CPUs: mustSet(t, "2")})
	if !errors.Is(err, ErrCheckpointWrite) {
		t.Fatalf("err = %v, want ErrCheckpointWrite", err)
	}
	if _, ok := s.Assignment("b"); ok {
		t.Fatal("failed write left the assignment in memory")
	}
	if err := s.deleteAssignment("a"); !errors.Is(err, ErrCheckpointWrite) {
		t.Fatalf("delete err = %v", err)
	}
	if _, ok := s.Assignment("a"); !ok {
		t.Fatal("failed delete dropped the assignment from memory")
	}
}

// TestCheckpointFlushLeavesTheStateFree: while flush writes the file, a
// change of release-isolation (the next annotation toggle) is not held
// behind it; it stays unsaved, and the next flush writes it.
func TestCheckpointFlushLeavesTheStateFree(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cp")
	s := &checkpointState{memState: newMemState(mustSet(t, "0-3"), mustSet(t, "")), file: file}
	a := Assignment{UID: "a", Namespace: "n", Name: "p", CPUs: mustSet(t, "1")}
	if err := s.setAssignment(a); err != nil {
		t.Fatal(err)
	}
	released := func() bool {
		t.Helper()
		cp, err := ReadCheckpoint(file)
		if err != nil {
			t.Fatal(err)
		}
		return cp["a"].ReleaseIsolation
	}
	a.ReleaseIsolation = true
	if err := s.setAssignment(a); err != nil || !s.unsaved() || released() {
		t.Fatalf("release: %v, unsaved %v, file released %v", err, s.unsaved(), released())
	}
	writes := 0
	s.write = func(path string, assigned map[string]Assignment) error {
		writes++
		if writes == 1 {
			if !s.mu.TryLock() {
				t.Error("flush holds the state's lock while it writes the file")
			} else {
				s.mu.Unlock()
				a.ReleaseIsolation = false // restored during the write
				if err := s.setAssignment(a); err != nil {
					t.Errorf("restore during the flush: %v", err)
				}
			}
		}
		return writeCheckpoint(path, assigned)
	}
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Assignment("a"); writes != 1 || !released() || got.ReleaseIsolation || !s.unsaved() {
		t.Fatalf("after the first flush: %d writes, file released %v, memory %+v, unsaved %v; want 1, true, restored, true",
			writes, released(), got, s.unsaved())
	}
	if err := s.flush(); err != nil || writes != 2 || released() || s.unsaved() {
		t.Fatalf("second flush: %v, %d writes, file released %v, unsaved %v; want 2, false, false", err, writes, released(), s.unsaved())
	}
}

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add(encodeCheckpoint(map[string]Assignment{"u": {UID: "u", CPUs: mustSet(f, "1-3")}}))
	f.Add([]byte(`{"version":1,"checksum":"","data":{}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeCheckpoint("fuzz", b)
		if err != nil {
			if got != nil {
				t.Fatal("partial state with error")
			}
			return
		}
		seen := mustSet(t, "")
		for _, a := range got {
			if a.CPUs.IsEmpty() || !seen.Intersection(a.CPUs).IsEmpty() {
				t.Fatalf("accepted bad assignment %+v", a)
			}
			seen = seen.Union(a.CPUs)
		}
		// Whatever decodes re-encodes to something that decodes the same.
		again, err := decodeCheckpoint("fuzz", encodeCheckpoint(got))
		if err != nil || len(again) != len(got) {
			t.Fatalf("re-encode: %v", err)
		}
	})
}
