//go:build linux

package cgroup_test

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/test/cgtest"
)

// Kernel tier for known.go: ApplyPod trusting the values the tree wrote
// and read while its watch runs, and ending right when that record is
// wrong because someone else wrote a file the watch has not reported yet.

// heldWatch runs kp's watch with a handler that can be held: while held,
// the watch reads no further event, so a write made meanwhile is not yet
// known to the tree's record (the window between a foreign write and its
// event). onWrite runs for every FileWritten handled.
type heldWatch struct {
	mu      sync.Mutex
	hold    bool
	entered chan struct{}
	gate    chan struct{}
}

func startHeldWatch(t *testing.T, kp *cgroup.Kubepods, onWrite func(cgroup.WatchEvent)) *heldWatch {
	t.Helper()
	h := &heldWatch{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done, err := kp.Watch(ctx, func(ev cgroup.WatchEvent) {
		h.mu.Lock()
		hold := h.hold
		h.hold = false
		h.mu.Unlock()
		if hold {
			h.entered <- struct{}{}
			<-h.gate
		}
		if ev.Kind == cgroup.FileWritten && onWrite != nil {
			onWrite(ev)
		}
	}, func(err error) { t.Errorf("watch: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// holdOn makes the handler stop at the next event, which poke causes, and
// returns once it has.
func (h *heldWatch) holdOn(t *testing.T, poke func()) {
	t.Helper()
	h.mu.Lock()
	h.hold = true
	h.mu.Unlock()
	poke()
	select {
	case <-h.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch never handled the poke")
	}
}

func (h *heldWatch) release() { close(h.gate) }

// quiet waits until f holds, polling.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if f() {
			return
		}
	}
	t.Fatalf("not within 10 s: %s", what)
}

func writeCPUs(t *testing.T, k *cgtest.KubeletTree, rel, value string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(k.SB.Path(k.CPUSetKey, rel), "cpuset.cpus"), []byte(value), 0); err != nil {
		t.Fatal(err)
	}
}

// TestKernelApplyPodWrongRecordSkippedWrite: a container's cpuset written
// by someone else while the watch has not reported it yet is trusted as
// the tree recorded it, so an apply of the same target writes nothing
// there (the record is used, not the file); once the watch reports the
// write, the record is dropped before the handler runs, and the handler's
// apply (the agent's sync) reads the file and sets it back.
func TestKernelApplyPodWrongRecordSkippedWrite(t *testing.T) {
	for _, driver := range []string{"cgroupfs", "systemd"} {
		t.Run(driver, func(t *testing.T) {
			k, kp := openKubepods(t, driver)
			all := k.CPUs
			one := cpuset.New(all.List()[1])
			rel, pids := k.Pod("rec", "Burstable", "a", "b")
			podPath := "/" + rel
			plan := cgroup.PodCPUs{UID: "rec", Path: podPath, Containers: []string{podPath + "/a", podPath + "/b"}, CPUs: all}
			var fixes sync.WaitGroup
			var mu sync.Mutex
			h := startHeldWatch(t, kp, func(ev cgroup.WatchEvent) {
				// The agent's handler: a value the pools do not want
				// syncs the pod (Agrees false), which reads it.
				if got, err := cpuset.Parse(ev.Value); ev.File != "cpuset.cpus" || err != nil || got.Equals(all) {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if _, err := kp.ApplyPod(plan); err != nil {
					t.Errorf("the handler's apply: %v", err)
				}
				fixes.Done()
			})
			verify := plan
			verify.Verify = true
			if _, err := kp.ApplyPod(verify); err != nil {
				t.Fatal(err)
			}
			h.holdOn(t, func() { writeCPUs(t, k, rel+"/b", all.String()) })
			fixes.Add(1)
			writeCPUs(t, k, rel+"/a", one.String()) // someone else, not yet reported
			mu.Lock()
			written, err := kp.ApplyPod(plan)
			mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			if len(written) != 0 || k.CPUSet(rel+"/a") != one.String() {
				t.Fatalf("trusted apply wrote %v, a = %s: want no write, a still %s (the record stood for the file)", written, k.CPUSet(rel+"/a"), one)
			}
			h.release()
			fixes.Wait()
			eventually(t, "a set back to every CPU", func() bool { return k.CPUSet(rel+"/a") == all.String() })
			if got := cgtest.Allowed(t, pids[0]); got != all.String() {
				t.Fatalf("a's task may run on %s, want %s", got, all)
			}
		})
	}
}

// TestKernelApplyPodWrongRecordRejected: on v1, when someone else narrowed
// a pod and its containers and the watch has not reported it, the trusted
// apply of another CPU fails in the kernel (a container asks for a CPU its
// pod lacks); the writer rolls back, drops the record and applies the
// plan again reading every file, which succeeds: every cgroup and task
// ends on the target.
func TestKernelApplyPodWrongRecordRejected(t *testing.T) {
	k, kp := openKubepods(t, "cgroupfs")
	if k.SB.Unified {
		t.Skip("v1 only: v2 bounds a child by its parent instead of refusing the write, so there is no refusal to fall back from; the kernel tier on a cgroup v1 host runs it")
	}
	all := k.CPUs
	first, second := cpuset.New(all.List()[0]), cpuset.New(all.List()[1])
	rel, pids := k.Pod("rej", "Burstable", "a", "b")
	podPath := "/" + rel
	plan := cgroup.PodCPUs{UID: "rej", Path: podPath, Containers: []string{podPath + "/a", podPath + "/b"}, CPUs: all, Verify: true}
	h := startHeldWatch(t, kp, nil)
	if _, err := kp.ApplyPod(plan); err != nil {
		t.Fatal(err)
	}
	h.holdOn(t, func() { writeCPUs(t, k, rel+"/b", all.String()) })
	defer h.release()
	for _, c := range []string{"/a", "/b", ""} { // someone else, children first
		writeCPUs(t, k, rel+c, second.String())
	}
	plan.CPUs, plan.Verify = first, false
	if _, err := kp.ApplyPod(plan); err != nil {
		t.Fatalf("apply on a wrong record: %v", err)
	}
	for _, c := range []string{"", "/a", "/b"} {
		if got := k.CPUSet(rel + c); got != first.String() {
			t.Fatalf("%s%s = %s, want %s", rel, c, got, first)
		}
	}
	for _, pid := range pids {
		if got := cgtest.Allowed(t, pid); got != first.String() {
			t.Fatalf("pid %d may run on %s, want %s", pid, got, first)
		}
	}
}

// TestKernelApplyPodTrustedUnplannedChild: a trusted apply lists no
// children, so a child missing from the plan (the sandbox) with a CPU the
// pod drops makes v1 reject the pod's narrowing after the containers were
// narrowed: those writes are rolled back (the audit shows it), the pod
// is listed afresh and every cgroup, the unplanned one included, ends on
// the target.
func TestKernelApplyPodTrustedUnplannedChild(t *testing.T) {
	k, _ := openKubepods(t, "cgroupfs")
	if k.SB.Unified {
		t.Skip("v1 only: v2 bounds a child by its parent instead of refusing the write, so there is no refusal to fall back from; the kernel tier on a cgroup v1 host runs it")
	}
	var audit []cgroup.Write
	var amu sync.Mutex
	kp, err := cgroup.OpenKubepods(k.SB.AsRoots(), cgroup.KubepodsConfig{Root: "/sys/fs/cgroup", Layout: cgroup.LayoutConfig{KubepodsPath: "/" + k.KubepodsName},
		Writer: cgroup.WriterOptions{Audit: func(w cgroup.Write) { amu.Lock(); audit = append(audit, w); amu.Unlock() }}})
	if err != nil {
		t.Fatal(err)
	}
	all := k.CPUs
	first := cpuset.New(all.List()[0])
	rel, _ := k.Pod("unp", "Burstable", "a", "b")
	podPath := "/" + rel
	startHeldWatch(t, kp, nil)
	plan := cgroup.PodCPUs{UID: "unp", Path: podPath, Containers: []string{podPath + "/a", podPath + "/b"}, CPUs: all, Verify: true}
	if _, err := kp.ApplyPod(plan); err != nil {
		t.Fatal(err)
	}
	k.SB.Mkdir(rel + "/sandbox")
	writeCPUs(t, k, rel+"/sandbox", all.String())
	amu.Lock()
	audit = nil
	amu.Unlock()
	plan.CPUs, plan.Verify = first, false
	if _, err := kp.ApplyPod(plan); err != nil {
		t.Fatalf("apply: %v", err)
	}
	for _, c := range []string{"", "/a", "/b", "/sandbox"} {
		if got := k.CPUSet(rel + c); got != first.String() {
			t.Fatalf("%s%s = %s, want %s", rel, c, got, first)
		}
	}
	amu.Lock()
	defer amu.Unlock()
	rolledBack := false
	for _, w := range audit {
		if w.Rollback && path.Base(path.Dir(w.Path)) == "b" && w.New == all.String() {
			rolledBack = true
		}
	}
	if !rolledBack {
		t.Fatalf("no rollback of b's narrowing in the audit %+v: the trusted run did not meet the kernel's refusal", audit)
	}
}

// TestKernelApplyPodRecreatedCgroup: the tree writes a watched cgroup's
// files through descriptors it holds open; a container cgroup removed and
// made again at the same path before the watch reports it leaves a
// descriptor of the removed one (ENODEV): the write fails, the plan is
// applied again reading every file through a fresh descriptor, and the new
// cgroup ends on the target.
func TestKernelApplyPodRecreatedCgroup(t *testing.T) {
	k, kp := openKubepods(t, "cgroupfs")
	all := k.CPUs
	first, second := cpuset.New(all.List()[0]), cpuset.New(all.List()[1])
	rel, _ := k.SB.MkdirPod("cgroupfs", "Burstable", "again", "a")
	podPath := "/" + rel
	h := startHeldWatch(t, kp, nil)
	plan := cgroup.PodCPUs{UID: "again", Path: podPath, Containers: []string{podPath + "/a"}, CPUs: first, Verify: true}
	written, err := kp.ApplyPod(plan)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(written, func(w cgroup.Written) bool { return w.Cgroup == podPath+"/a" }) {
		t.Fatalf("a not written (%v): no descriptor of it held", written)
	}
	h.holdOn(t, func() { writeCPUs(t, k, rel, all.String()) })
	defer h.release()
	dir := k.SB.Path(k.CPUSetKey, rel+"/a")
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if !k.SB.Unified {
		writeCPUs(t, k, rel+"/a", all.String()) // v1: a new cpuset is empty until written
	}
	plan.CPUs, plan.Verify = second, false
	if _, err := kp.ApplyPod(plan); err != nil {
		t.Fatalf("apply through a descriptor of the removed cgroup: %v", err)
	}
	for _, c := range []string{"", "/a"} {
		if got := k.CPUSet(rel + c); got != second.String() {
			t.Fatalf("%s%s = %s, want %s", rel, c, got, second)
		}
	}
}
