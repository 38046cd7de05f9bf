package aggregator

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestReloaded: with no value every call loads (and fails alike); a
// value is kept while its file is unchanged or while a reload fails, and
// is loaded again when the file changes, looked at no more than every
// 10 s.
func TestReloaded(t *testing.T) {
	f := filepath.Join(t.TempDir(), "ca.crt")
	var r reloaded[string]
	loads := 0
	load := func() (string, error) {
		loads++
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 || b[0] == '!' {
			return "", errors.New("bad file")
		}
		return string(b), nil
	}
	for range 2 {
		if _, err := r.get([]string{f}, load); err == nil {
			t.Fatal("no file: want an error")
		}
	}
	if loads != 2 {
		t.Fatalf("%d loads without a value, want 2 (one a call)", loads)
	}
	write := func(s string, mod time.Time) {
		t.Helper()
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now().Add(-time.Hour)
	write("one", t0)
	if v, err := r.get([]string{f}, load); v != "one" || err != nil {
		t.Fatalf("get = %q, %v; want one", v, err)
	}
	write("two", t0.Add(time.Minute))
	if v, _ := r.get([]string{f}, load); v != "one" {
		t.Fatalf("within 10 s: %q, want the held one", v)
	}
	r.checked = r.checked.Add(-time.Minute)
	if v, _ := r.get([]string{f}, load); v != "two" {
		t.Fatalf("file changed: %q, want two", v)
	}
	write("!bad", t0.Add(2*time.Minute))
	r.checked = r.checked.Add(-time.Minute)
	if v, err := r.get([]string{f}, load); v != "two" || err != nil {
		t.Fatalf("failed reload: %q, %v; want two kept", v, err)
	}
	n := loads
	r.checked = r.checked.Add(-time.Minute)
	write("two", t0.Add(time.Minute)) // back to the stamp held: no load
	if v, _ := r.get([]string{f}, load); v != "two" || loads != n {
		t.Fatalf("unchanged stamp: %q after %d loads, want two and none", v, loads-n)
	}
}
