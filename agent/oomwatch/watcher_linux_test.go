//go:build linux

package oomwatch

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"
)

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Poll: -time.Second},
		{EventBuffer: -1},
		{Backend: Backend(7)},
		{ProcRoot: t.TempDir()}, // no self/mountinfo
	} {
		if w, err := New(cfg); err == nil {
			w.Close()
			t.Errorf("New(%+v) succeeded, want an error", cfg)
		}
	}
}

func TestWatchRejectsNonCgroups(t *testing.T) {
	w, err := New(Config{Backend: BackendCounters, Kmsg: "-"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), "missing"), "/proc"} {
		if err := w.Watch(dir); !errors.Is(err, ErrNotCgroup) {
			t.Errorf("Watch(%s) = %v, want ErrNotCgroup", dir, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, ok := <-w.Events(); ok {
		t.Error("Events still open after Close")
	}
}

func TestInode(t *testing.T) {
	d := t.TempDir()
	if ino, err := Inode(d); err != nil || ino == 0 {
		t.Errorf("Inode(%s) = %d, %v", d, ino, err)
	}
	if _, err := Inode(filepath.Join(d, "missing")); !errors.Is(err, ErrNotCgroup) {
		t.Errorf("missing dir: %v, want ErrNotCgroup", err)
	}
}

func TestKmsgTake(t *testing.T) {
	now := Monotonic()
	line := func(memcg string, pid int, age time.Duration, usedBy ...string) kmsgOOM {
		return kmsgOOM{oomKillLine: oomKillLine{Constraint: "CONSTRAINT_MEMCG", TaskMemcg: memcg, Comm: "c", PID: pid}, read: now - age, usedBy: usedBy}
	}
	k := &kmsgReader{fd: -1, recent: []kmsgOOM{
		line("/pod/a", 1, time.Minute), // too old
		line("/pod/a", 2, 0, "/pod"),   // already explained a change of /pod
		line("/podx/a", 3, 0),          // sibling with a common prefix
		line("/pod", 4, 0),
		line("/pod/a", 5, 0),
		line("/pod/b", 6, 0),
	}}
	pids := func(ls []kmsgOOM) []int {
		var out []int
		for _, l := range ls {
			out = append(out, l.PID)
		}
		return out
	}
	if got := pids(k.take("/pod", 2)); !reflect.DeepEqual(got, []int{4, 5}) {
		t.Errorf("take(/pod, 2) = %v, want [4 5]", got)
	}
	if got := pids(k.take("/pod", 5)); !reflect.DeepEqual(got, []int{6}) {
		t.Errorf("second take = %v, want [6]: a line explains one change per cgroup", got)
	}
	// The same kills also explain changes in other watched levels (v2
	// counters are hierarchical).
	if got := pids(k.take("/pod/a", 5)); !reflect.DeepEqual(got, []int{2, 5}) {
		t.Errorf("take(/pod/a) = %v, want [2 5]", got)
	}
	if got := pids(k.take("/", 5)); !reflect.DeepEqual(got, []int{2, 3, 4, 5, 6}) {
		t.Errorf("take(/) = %v, want [2 3 4 5 6]", got)
	}
}

// A refused bpf(2) or setrlimit (EPERM, as cilium/ebpf wraps it) names
// the missing capabilities; any other failure gets no hint.
func TestPermissionHint(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("failed to set memlock rlimit: %w", syscall.EPERM), memlockHint},
		{fmt.Errorf("program on_mark_victim: %w", fs.ErrPermission), memlockHint},
		{fmt.Errorf("failed to set memlock rlimit: %w", syscall.EINVAL), ""},
		{errors.New("operation not permitted"), ""}, // text alone is not a refusal
	} {
		if got := permissionHint(tc.err, memlockHint); got != tc.want {
			t.Errorf("permissionHint(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
