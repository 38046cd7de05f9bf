//go:build linux

package runner

import (
	"fmt"
	"io/fs"
	"math/rand"
	"reflect"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cgpilot/cgpilot/agent/oomwatch"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	"github.com/cgpilot/cgpilot/cgroup"
)

// oomBenchPod tracks a pod of n containers (app, side-1, ...) with
// requests, limits and last samples, as a kill finds it.
func oomBenchPod(tb testing.TB, r *Runner, n int) *corev1.Pod {
	tb.Helper()
	p := r.addPod(tb, "hog")
	p = p.DeepCopy()
	p.Spec.Containers = nil
	ctrs := map[string]rsContainer{}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range n {
		name := "app"
		if i > 0 {
			name = fmt.Sprintf("side-%d", i)
		}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name,
			Resources: corev1.ResourceRequirements{Requests: rlist("100m", "256Mi"), Limits: rlist("1", "512Mi")}})
		id := "ctr-" + name
		ctrs[name] = rsContainer{id: id, memDir: "/sys/fs/cgroup/memory/kubepods/pod" + string(p.UID) + "/" + id}
		r.last[id] = lastSample{usage: 500 << 20, workingSet: 400 << 20}
	}
	r.pods[string(p.UID)].containers = ctrs
	if err := r.host.(*fakeHost).idx.Update(p); err != nil {
		tb.Fatal(err)
	}
	return p
}

// oomBenchPolicy bumps by 20 % up to three times a day.
func oomBenchPolicy(tb testing.TB) *rightsize.Policy {
	f := 0.2
	pol := &rightsize.Policy{Name: "web", Mode: rightsize.ModeInPlace, OOMFactor: &f, MaxOOMBumpsPerDay: 3}
	if err := pol.Check(); err != nil {
		tb.Fatal(err)
	}
	return pol
}

// BenchmarkOOMInput is what onOOM does between finding a kill's container
// and its cgroup write, in a pod of four containers: the input built from
// the tracked pod, the container's usage, and rightsize.OOMBump.
func BenchmarkOOMInput(b *testing.B) {
	r, _ := unitRightsizer(b)
	p := oomBenchPod(b, r, 4)
	pol := oomBenchPolicy(b)
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		in, used, ok := r.oomInput(p, "app", now)
		if !ok {
			b.Fatal("the pod is not tracked")
		}
		spec, _ := in.Spec()
		usage := max(spec.Limits.Memory, used)
		if _, _, why := rightsize.OOMBump(in, pol, usage, 1, 0); why != "" {
			b.Fatal(why)
		}
	}
}

// oomInputOfDecision is what onOOM took from the decision's view of the
// pod (input) before it built its own: the container's spec, usage and
// refused limit, and the pod's specs and bounds.
func oomInputOfDecision(in rightsize.Pod, name string) (rightsize.OOMInput, float64) {
	out := rightsize.OOMInput{Container: name, QoS: in.QoS, LimitRange: in.LimitRange, Allocatable: in.Allocatable}
	used := 0.0
	for _, c := range in.Containers {
		out.Specs = append(out.Specs, rightsize.ContainerSpec{Name: c.Name, Spec: c.Spec})
		if c.Name == name {
			out.RefusedMemoryLimit, used = c.RefusedMemoryLimit, c.Usage
		}
	}
	return out, used
}

// TestOOMInputMatchesDecisionInput: over random tracked pods (containers
// sampled or not, values written to the cgroups, recent and expired OOM
// bumps, refused limits), the OOM path's own input is what it used to
// take from the decision's (input), for every container and one not in
// the spec.
func TestOOMInputMatchesDecisionInput(t *testing.T) {
	r, _ := unitRightsizer(t)
	rng := rand.New(rand.NewSource(20))
	mem := func() string { return fmt.Sprintf("%dMi", 1+rng.Intn(4096)) }
	now := time.Now()
	for run := range 500 {
		p := r.addPod(t, fmt.Sprintf("p%d", run)).DeepCopy()
		p.Spec.Containers = nil
		uid := string(p.UID)
		r.mu.Lock()
		rp := r.pods[uid]
		rp.containers = map[string]rsContainer{}
		rp.oomFloor, rp.refused = map[string]float64{}, map[string]float64{}
		rp.oomFloorUntil = now.Add(time.Duration(rng.Intn(3)-1) * time.Hour)
		names := []string{"ghost"}
		for i := range 1 + rng.Intn(4) {
			name := fmt.Sprintf("c%d", i)
			names = append(names, name)
			c := corev1.Container{Name: name}
			switch rng.Intn(3) {
			case 0:
				c.Resources = corev1.ResourceRequirements{Requests: rlist("100m", mem()), Limits: rlist("1", mem())}
			case 1:
				c.Resources = corev1.ResourceRequirements{Requests: rlist("250m", mem())}
			}
			p.Spec.Containers = append(p.Spec.Containers, c)
			if rng.Intn(4) > 0 {
				id := fmt.Sprintf("%s-%s", uid, name)
				rp.containers[name] = rsContainer{id: id}
				if rng.Intn(4) > 0 {
					r.last[id] = lastSample{usage: float64(rng.Intn(1 << 32)), workingSet: float64(rng.Intn(1 << 32))}
				}
			}
			if rng.Intn(3) == 0 {
				rp.oomFloor[name] = float64(rng.Intn(1 << 33))
			}
			if rng.Intn(3) == 0 {
				rp.refused[name] = float64(rng.Intn(1 << 33))
			}
			if rng.Intn(3) == 0 {
				r.apply.mu.Lock()
				if r.apply.cgroupValues[uid] == nil {
					r.apply.cgroupValues[uid] = map[string]rightsize.Requirements{}
				}
				r.apply.cgroupValues[uid][name] = rightsize.Requirements{Limits: rightsize.Resources{Memory: float64(rng.Intn(1 << 33))}}
				r.apply.mu.Unlock()
			}
		}
		if rng.Intn(4) == 0 { // tracked state of a container the spec lacks: never read
			id := uid + "-ghost"
			rp.containers["ghost"], r.last[id] = rsContainer{id: id}, lastSample{usage: 1 << 30, workingSet: 1 << 30}
			rp.oomFloor["ghost"], rp.refused["ghost"] = 1<<31, 1<<31
		}
		r.mu.Unlock()
		dec, _, ok := r.input(p, now)
		if !ok {
			t.Fatalf("run %d: the pod is not tracked", run)
		}
		for _, name := range names {
			want, wantUsed := oomInputOfDecision(dec, name)
			got, used, ok := r.oomInput(p, name, now)
			if !ok || !reflect.DeepEqual(got, want) || used != wantUsed {
				t.Fatalf("run %d, container %s: ok %v\n got %+v used %v\nwant %+v used %v", run, name, ok, got, used, want, wantUsed)
			}
		}
	}
}

// TestOOMPathBuildsNoDecisionInput: onOOM handles a kill without the
// decision's view of the pod (input asks the host whether the pod holds
// exclusive cores; an OOM bump does not need to know), and a decision
// still builds it.
func TestOOMPathBuildsNoDecisionInput(t *testing.T) {
	r, h := unitRightsizer(t)
	p := oomBenchPod(t, r, 2)
	dir := r.pods[string(p.UID)].containers["app"].memDir
	r.mu.Lock()
	r.dirs[dir] = ctrRef{uid: string(p.UID), container: "app"}
	r.mu.Unlock()
	r.onOOM(oomwatch.Event{Dir: dir, Time: time.Now(), PID: 42, Comm: "hog"})
	if n := h.exclusiveAsked.Load(); n != 0 {
		t.Fatalf("onOOM built the decision's input (%d exclusive-core lookups)", n)
	}
	if got := len(h.events); got != 1 || h.events[0].Reason != "OOMKilled" {
		t.Fatalf("events %+v, want the kill recorded", h.events)
	}
	r.decide(p, time.Now())
	if n := h.exclusiveAsked.Load(); n != 1 {
		t.Fatalf("a decision made %d exclusive-core lookups, want 1: the test no longer tells the two apart", n)
	}
}

// TestSameOOM: a kill from before the container's last raise was written
// belongs to the OOM that raise answered (memory.oom.group kills every
// process at one OOM); so does a kill shortly after it in the same
// group-killed cgroup (a process killed late, a counter reporting late);
// a kill after it is otherwise a new OOM at the raised limit.
func TestSameOOM(t *testing.T) {
	const raised = 10 * time.Second // the raise's write, CLOCK_MONOTONIC
	const dir, next = "/sys/fs/cgroup/kubepods/burstable/pod1/c1", "/sys/fs/cgroup/kubepods/burstable/pod1/c2"
	plain := oomAnswer{at: raised, dir: dir}
	group := oomAnswer{at: raised, dir: dir, group: true}
	for _, tc := range []struct {
		name string
		ev   oomwatch.Event
		last oomAnswer
		want bool
	}{
		{"no raise yet", oomwatch.Event{Kernel: 9 * time.Second, Seen: 9 * time.Second, Dir: dir}, oomAnswer{}, false},
		{"group kill before the raise", oomwatch.Event{Kernel: raised - 3*time.Millisecond, Seen: raised + time.Millisecond, Dir: dir}, plain, true},
		{"killed as it was written", oomwatch.Event{Kernel: raised, Seen: raised + time.Millisecond, Dir: dir}, plain, true},
		{"a new OOM after the raise", oomwatch.Event{Kernel: raised + time.Millisecond, Seen: raised + 2*time.Millisecond, Dir: dir}, plain, false},
		{"counters: seen before the raise", oomwatch.Event{Seen: raised - time.Millisecond, Dir: dir}, plain, true},
		{"counters: seen after the raise", oomwatch.Event{Seen: raised + time.Second, Dir: dir}, plain, false},
		{"no time at all", oomwatch.Event{Dir: dir}, plain, false},
		{"group-killed cgroup: a process killed after the raise", oomwatch.Event{Kernel: raised + 90*time.Millisecond, Seen: raised + 91*time.Millisecond, Dir: dir}, group, true},
		{"group-killed cgroup: a counter reporting after the raise", oomwatch.Event{Seen: raised + 2*time.Second, Dir: dir}, group, true},
		{"group-killed cgroup: past the grace", oomwatch.Event{Kernel: raised + oomGroupGrace + time.Millisecond, Dir: dir}, group, false},
		{"group-killed cgroup: the next container's OOM", oomwatch.Event{Kernel: raised + time.Second, Dir: next}, group, false},
		{"group-killed cgroup: a kill with no directory", oomwatch.Event{Kernel: raised + time.Second}, oomAnswer{at: raised, group: true}, false},
	} {
		if got := sameOOM(tc.ev, tc.last); got != tc.want {
			t.Errorf("%s: sameOOM = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestDirectWriteFailure: a raise whose container's cgroup was already
// removed (cgroup v2's group kill, seen late) is no failure to warn of;
// any other failed write is.
func TestDirectWriteFailure(t *testing.T) {
	for _, tc := range []struct {
		err    error
		label  string
		failed bool
	}{
		{fmt.Errorf("cgroup: read /x/memory.max: %w: %w", cgroup.ErrGone, fs.ErrNotExist), "gone", false},
		{fmt.Errorf("cgroup: write /x/memory.max: %w: %w", cgroup.ErrWrite, syscall.EBUSY), "failed", true},
		{fmt.Errorf("cgroup: read /x/memory.max: %w", fs.ErrNotExist), "failed", true}, // not the cgroup package's sentinel
	} {
		label, note, failed := directWriteFailure(tc.err)
		if label != tc.label || failed != tc.failed || note == "" {
			t.Errorf("directWriteFailure(%v) = %q, %q, %v; want %q, a note, %v", tc.err, label, note, failed, tc.label, tc.failed)
		}
	}
}
