//go:build linux

package harness

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProcStopTermThenKill(t *testing.T) {
	dir := t.TempDir()
	polite, err := startProc("polite", filepath.Join(dir, "p.log"), false, nil, "sleep", "60")
	if err != nil {
		t.Fatal(err)
	}
	stubborn, err := startProc("stubborn", filepath.Join(dir, "s.log"), false, nil, "sh", "-c", `trap "" TERM; echo trapped; while :; do sleep 0.1; done`)
	if err != nil {
		t.Fatal(err)
	}
	if !polite.Alive() || !stubborn.Alive() || polite.StartTime == 0 {
		t.Fatalf("not alive after start: %+v %+v", polite, stubborn)
	}
	waitLog(t, stubborn.Log, "trapped")
	start := time.Now()
	if err := polite.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("SIGTERM stop took %v", d)
	}
	start = time.Now()
	if err := stubborn.Stop(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("stubborn process stopped in %v, before the grace period: SIGTERM was not ignored?", d)
	}
	if polite.Alive() || stubborn.Alive() {
		t.Fatal("alive after Stop")
	}
	if err := polite.Stop(time.Second); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestProcAliveRejectsReusedPID(t *testing.T) {
	self := ProcRecord{PID: os.Getpid()}
	st, err := procStartTime(self.PID)
	if err != nil {
		t.Fatal(err)
	}
	self.StartTime = st
	if !self.Alive() {
		t.Fatal("this process is not alive")
	}
	self.StartTime = st + 1
	if self.Alive() {
		t.Fatal("a PID with another start time counts as alive: a reused PID could be signalled")
	}
	if (ProcRecord{PID: 1 << 30}).Alive() {
		t.Fatal("a nonexistent PID is alive")
	}
}

// TestNodePID: a recorded, live process gives its pid; an unrecorded
// name, or a record whose pid now belongs to another process, gives none.
func TestNodePID(t *testing.T) {
	st, err := procStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{State: &NodeState{Procs: []ProcRecord{
		{Name: "containerd", PID: os.Getpid(), StartTime: st + 1}, // the pid reused
		{Name: "kubelet", PID: os.Getpid(), StartTime: st},
	}}}
	if pid, ok := n.PID("kubelet"); !ok || pid != os.Getpid() {
		t.Errorf("PID(kubelet) = %d, %v; want %d, true", pid, ok, os.Getpid())
	}
	if pid, ok := n.PID("containerd"); ok {
		t.Errorf("PID(containerd) = %d, true for a reused pid", pid)
	}
	if pid, ok := n.PID("etcd"); ok {
		t.Errorf("PID(etcd) = %d, true for a process the node never started", pid)
	}
}

func TestTailFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := range 100 {
		b.WriteString(strings.Repeat("x", i%7) + "\n")
	}
	b.WriteString("last line\n")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(tailFile(p, 3), "\n")
	if len(got) != 3 || got[2] != "last line" {
		t.Fatalf("tail = %q", got)
	}
	if !strings.Contains(tailFile(filepath.Join(p, "missing"), 3), "no log") {
		t.Error("missing log not reported")
	}
}

// fakeBins writes shell scripts standing in for etcd and kube-apiserver,
// to drive the harness's failure paths (the real binaries are tested in
// test/e2e).
func fakeBins(t *testing.T, apiserver string) string {
	t.Helper()
	d := t.TempDir()
	for name, body := range map[string]string{
		"etcd":           "while :; do sleep 0.2; done",
		"kube-apiserver": apiserver,
	} {
		if err := os.WriteFile(filepath.Join(d, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func TestStartFailsWithLogTailAndLeavesNothing(t *testing.T) {
	for name, tc := range map[string]struct {
		apiserver string
		want      []string
	}{
		"exits":     {"echo 'E0101 fatal: cannot bind'; exit 1", []string{"kube-apiserver exited before ready", "fatal: cannot bind"}},
		"not ready": {"echo 'still starting'; while :; do sleep 0.2; done", []string{"not ready", "within 1.5s", "still starting"}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bed")
			_, err := StartControlPlane(context.Background(), Options{BinDir: fakeBins(t, tc.apiserver), Dir: dir, ReadyTimeout: 1500 * time.Millisecond})
			if !errors.Is(err, ErrStart) {
				t.Fatalf("err = %v, want ErrStart", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
				t.Errorf("state dir %s left behind", dir)
			}
			if pids := procsMatching(dir); len(pids) > 0 { // any program
				t.Errorf("processes left: %v", pids)
			}
		})
	}
}

func TestStartNamesMissingBinary(t *testing.T) {
	_, err := StartControlPlane(context.Background(), Options{BinDir: t.TempDir(), Controllers: true})
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "etcd not in") || !strings.Contains(err.Error(), "build.sh") {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadStateRejectsForeignDir(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	s := &State{Dir: a}
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(a, StateFile), filepath.Join(b, StateFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadState(b); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("err = %v", err)
	}
	if err := Teardown(t.TempDir()); !errors.Is(err, ErrTeardown) {
		t.Fatalf("Teardown of an empty dir: %v", err)
	}
}

func waitLog(t *testing.T, path, want string) {
	t.Helper()
	for range 100 {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never showed %q", path, want)
}

func TestProcsMatchingFiltersByProgram(t *testing.T) {
	dir := t.TempDir()
	p, err := startProc("sleeper", filepath.Join(dir, "log"), false, nil, "sh", "-c", "sleep 30 # "+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	waitFor := func(want int, programs ...string) {
		t.Helper()
		for range 100 {
			if len(procsMatching(dir, programs...)) == want {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("procsMatching(%s, %v) = %v, want %d", dir, programs, procsMatching(dir, programs...), want)
	}
	waitFor(1)
	waitFor(1, "sh")
	waitFor(0, "kubelet", "containerd")
}

func TestNodeLock(t *testing.T) {
	nodeLockPath = filepath.Join(t.TempDir(), "lock")
	defer func() { nodeLockPath = NodeLockFile }()
	ctx := context.Background()
	if err := acquireNodeLock(ctx, "/tmp/bed-a", time.Second); err != nil {
		t.Fatal(err)
	}
	dir, owner := readNodeLock()
	if dir != "/tmp/bed-a" || owner.PID != os.Getpid() || !owner.Alive() {
		t.Fatalf("lock names %q owned by %+v", dir, owner)
	}
	// Held by a live owner (us): a second taker waits, then gives up.
	start := time.Now()
	err := acquireNodeLock(ctx, "/tmp/bed-b", 1500*time.Millisecond)
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "still runs") || time.Since(start) < time.Second {
		t.Fatalf("second acquire after %v: %v", time.Since(start), err)
	}
	// A dead owner and no live node: stale, with the command that cleans it.
	if err := os.WriteFile(nodeLockPath, []byte("/tmp/bed-gone\n999999999 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = acquireNodeLock(ctx, "/tmp/bed-b", time.Minute)
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "testbed down --dir /tmp/bed-gone") {
		t.Fatalf("stale lock: %v", err)
	}
	// A garbled lock counts as stale, never as a live owner.
	if err := os.WriteFile(nodeLockPath, []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, owner := readNodeLock(); owner.Alive() {
		t.Fatalf("garbled lock has a live owner %+v", owner)
	}
}
