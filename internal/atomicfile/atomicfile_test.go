package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteFileReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "state")
	for _, content := range []string{"one", "two, longer", "3"} {
		if err := WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
		st, _ := os.Stat(p)
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v, want 0600", st.Mode())
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Fatalf("directory holds %d files, want only the target", len(entries))
	}
}

// TestWriteFileFailureLeavesTarget: a write that cannot complete (the
// target is a directory, so the rename fails) leaves the old state and no
// temporary file.
func TestWriteFileFailureLeavesTarget(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state")
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(p, []byte("x"), 0o600)
	if err == nil || !strings.Contains(err.Error(), "rename") || !strings.Contains(err.Error(), p) {
		t.Fatalf("err = %v, want a rename error naming %s", err, p)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left %d entries, want only the directory", len(entries))
	}
}

func TestQuarantineAndClean(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cp")
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var aside []string
	for i := 0; i < 4; i++ {
		if err := os.WriteFile(p, []byte{byte(i)}, 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := Quarantine(p, t0.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		aside = append(aside, a)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("quarantined file still at %s: %v", p, err)
	}
	// A killed writer's temporary file, and an unrelated file that must stay.
	if err := os.WriteFile(filepath.Join(dir, ".cp.tmp-123"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other.corrupt-x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	removed, err := Clean(p, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 3 {
		t.Fatalf("removed %v, want the temp file and the two oldest copies", removed)
	}
	left, _ := Quarantined(p)
	if len(left) != 2 || left[0] != aside[2] || left[1] != aside[3] {
		t.Fatalf("kept %v, want the newest two %v", left, aside[2:])
	}
	if _, err := os.Stat(filepath.Join(dir, "other.corrupt-x")); err != nil {
		t.Fatalf("unrelated file removed: %v", err)
	}
	if removed, err := Clean(filepath.Join(dir, "missing", "cp"), 1); err != nil || len(removed) != 0 {
		t.Fatalf("clean of a missing directory: %v, %v", removed, err)
	}
}
