package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	out, err := readCheckpoint(path)
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
		return `{"version":1,"checksum":"` + checksum([]byte(data)) + `","data":` + data + `}`
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
			got, err := readCheckpoint(path)
			if !errors.Is(err, tc.want) || got != nil {
				t.Fatalf("readCheckpoint = %v, %v; want nil, %v", got, err, tc.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
			var ce *CorruptCheckpointError
			if tc.name == "payload edited" && (!errors.As(err, &ce) || ce.Expected == ce.Actual || ce.Actual == "") {
				t.Fatalf("want expected/actual checksums, got %#v", err)
			}
		})
	}
}

func TestCheckpointMissingAndQuarantine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp")
	if _, err := readCheckpoint(path); !errors.Is(err, ErrCheckpointNotFound) {
		t.Fatalf("err = %v, want ErrCheckpointNotFound", err)
	}
	os.WriteFile(path, []byte("junk"), 0o600)
	aside, err := quarantineCheckpoint(path, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("corrupt checkpoint still in place")
	}
	if b, _ := os.ReadFile(aside); string(b) != "junk" {
		t.Fatalf("aside copy %s holds %q", aside, b)
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
