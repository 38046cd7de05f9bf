package pools

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
)

// fakeCgroups is an in-memory Cgroups recording what it is asked to
// write; the real order and kernel rules are tested on real cgroups in
// kernel_test.go.
type fakeCgroups struct {
	cpus    map[string]cpuset.CPUSet // existing cgroups
	quota   map[string]string        // cpu.cfs_quota_us as set
	failOn  string                   // ApplyPod fails for this pod path
	applied []cgroup.PodCPUs
	onApply func(cgroup.PodCPUs) // called before ApplyPod writes
}

func newFakeCgroups() *fakeCgroups {
	f := &fakeCgroups{cpus: map[string]cpuset.CPUSet{}, quota: map[string]string{}}
	for _, q := range f.QoSPaths() {
		f.cpus[q] = cpuset.New(0)
	}
	return f
}

func (f *fakeCgroups) addPod(uid string, qos cgroup.QoS, containers ...string) {
	p, _ := f.PodPath(uid, qos)
	f.cpus[p] = cpuset.New()
	for _, c := range containers {
		f.cpus[path.Join(p, c)] = cpuset.New()
	}
}

func (f *fakeCgroups) PodPath(uid string, qos cgroup.QoS) (string, error) {
	if qos == cgroup.QoSGuaranteed {
		return "/kubepods/pod" + uid, nil
	}
	return "/kubepods/" + strings.ToLower(string(qos)) + "/pod" + uid, nil
}
func (f *fakeCgroups) ContainerPath(uid string, qos cgroup.QoS, id string) (string, error) {
	p, _ := f.PodPath(uid, qos)
	return path.Join(p, strings.TrimPrefix(id, "containerd://")), nil
}
func (f *fakeCgroups) QoSPaths() []string {
	return []string{"/kubepods", "/kubepods/burstable", "/kubepods/besteffort"}
}
func (f *fakeCgroups) Exists(p string) (bool, error) {
	_, exists := f.cpus[p]
	return exists, nil
}
func (f *fakeCgroups) Children(p string) ([]string, error) {
	if _, ok := f.cpus[p]; !ok {
		return nil, os.ErrNotExist
	}
	var out []string
	for c := range f.cpus {
		if path.Dir(c) == p && !strings.HasPrefix(path.Base(c), "pod") && c != p {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out, nil
}
func (f *fakeCgroups) KnownChildren(p string) ([]string, error) { return f.Children(p) }
func (f *fakeCgroups) ForgetChildren(string)                    {}
func (f *fakeCgroups) ReadCPUs(p string) (cpuset.CPUSet, error) {
	c, ok := f.cpus[p]
	if !ok {
		return cpuset.New(), os.ErrNotExist
	}
	return c, nil
}
func (f *fakeCgroups) WidenCPUs(p string, cpus cpuset.CPUSet) (int, error) {
	if c := f.cpus[p]; !cpus.IsSubsetOf(c) {
		f.cpus[p] = c.Union(cpus)
		return 1, nil
	}
	return 0, nil
}
func (f *fakeCgroups) ApplyPod(p cgroup.PodCPUs) ([]cgroup.Written, error) {
	if _, ok := f.cpus[p.Path]; !ok {
		return nil, nil
	}
	if p.Path == f.failOn {
		return nil, errors.New("EBUSY")
	}
	if f.onApply != nil {
		f.onApply(p)
	}
	f.applied = append(f.applied, p)
	var written []cgroup.Written
	for _, d := range append([]string{p.Path}, p.Containers...) {
		if old := f.cpus[d]; !old.Equals(p.CPUs) {
			f.cpus[d] = p.CPUs
			written = append(written, cgroup.Written{Cgroup: d, File: "/cpuset" + d + "/cpuset.cpus", Old: old.String(), New: p.CPUs.String()})
		}
		if p.UnlimitedQuota {
			f.quota[d] = "-1"
		}
		if p.Quotas != nil {
			if d == p.Path {
				f.quota[d] = fmt.Sprint(p.Quotas.Pod.QuotaUs)
			} else if q, ok := p.Quotas.Containers[d]; ok {
				f.quota[d] = fmt.Sprint(q.QuotaUs)
			}
		}
	}
	return written, nil
}

type poolsFixture struct {
	t     *testing.T
	cg    *fakeCgroups
	m     *Manager
	pods  map[string]Pod
	clock time.Time // the pool manager's now
}

// advance moves the pool manager's clock.
func (f *poolsFixture) advance(d time.Duration) { f.clock = f.clock.Add(d) }

func newPoolsFixture(t *testing.T) *poolsFixture {
	cg := newFakeCgroups()
	f := &poolsFixture{t: t, cg: cg, pods: map[string]Pod{}, clock: time.Unix(1e9, 0)}
	m, err := New(Options{All: mustSet(t, "0-7"), Reserved: mustSet(t, "0"), CapRatio: 2.0 / 3.0, Cgroups: cg, Now: func() time.Time { return f.clock }})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

func (f *poolsFixture) all() []Pod {
	var out []Pod
	for _, p := range f.pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func (f *poolsFixture) add(uid string, qos cgroup.QoS, ann map[string]string, demand int) Pod {
	req, err := local.ParseAnnotations(ann)
	p := Pod{Key: "ns/" + uid, UID: uid, Namespace: "ns", Name: uid, QoS: qos, Req: req, ReqErr: err, DemandCPUs: demand}
	f.pods[uid] = p
	f.cg.addPod(uid, qos, "ctr-a", "ctr-b")
	return p
}

func (f *poolsFixture) cpusOf(uid string) string {
	f.t.Helper()
	p := f.pods[uid]
	pp, _ := f.cg.PodPath(uid, p.QoS)
	want := f.cg.cpus[pp].String()
	kids, _ := f.cg.Children(pp)
	for _, k := range kids {
		if got := f.cg.cpus[k].String(); got != want {
			f.t.Fatalf("pod %s: container %s has %s, pod has %s", uid, k, got, want)
		}
	}
	return want
}

func TestPoolsExclusiveAndShared(t *testing.T) {
	f := newPoolsFixture(t)
	shared1 := f.add("s1", cgroup.QoSBurstable, nil, 1)
	shared2 := f.add("s2", cgroup.QoSBestEffort, nil, 0)
	f.m.Sync(shared1, f.all)
	f.m.Sync(shared2, f.all)
	if got := f.cpusOf("s1"); got != "1-7" {
		t.Fatalf("shared pod before any exclusive: %s, want 1-7 (all but reserved)", got)
	}
	db := f.add("db", cgroup.QoSGuaranteed, map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "2"}, 4)
	res := f.m.Sync(db, f.all)
	if res.Status.State != local.StateAllocated || res.AllocatedCPUs != "1-2" || !res.SharedChanged {
		t.Fatalf("exclusive sync: %+v", res)
	}
	if got := f.cpusOf("db"); got != "1-2" {
		t.Fatalf("exclusive pod cpus %s, want 1-2", got)
	}
	for _, s := range []string{"s1", "s2"} {
		if got := f.cpusOf(s); got != "3-7" {
			t.Fatalf("shared pod %s: %s, want 3-7", s, got)
		}
	}
	dbPath, _ := f.cg.PodPath("db", cgroup.QoSGuaranteed)
	if f.cg.quota[dbPath] != "-1" || f.cg.quota[dbPath+"/ctr-a"] != "-1" || f.cg.quota["/kubepods/burstable/pods1"] != "" {
		t.Fatalf("quota: exclusive pod and containers must be unlimited, shared not: %v", f.cg.quota)
	}
	if got := f.cg.cpus["/kubepods"].String(); got != "0-7" {
		t.Fatalf("kubepods widened to %s, want 0-7", got)
	}
	// Idempotent: the same sync writes nothing.
	if res := f.m.Sync(db, f.all); res.Written != 0 || len(res.Events) != 0 {
		t.Fatalf("second sync wrote %d, events %v", res.Written, res.Events)
	}
	// Grow live, then release isolation, then restore, then shrink.
	db.Req.CPUs = ptr(3)
	if res := f.m.Sync(db, f.all); res.AllocatedCPUs != "1-3" || f.cpusOf("s1") != "4-7" {
		t.Fatalf("grow: %+v, shared %s", res, f.cpusOf("s1"))
	}
	db.Req.ReleaseIsolation = true
	if res := f.m.Sync(db, f.all); res.Status.State != local.StateReleased || f.cpusOf("db") != "1-7" || f.cpusOf("s1") != "4-7" {
		t.Fatalf("release isolation: %+v, db %s", res.Status, f.cpusOf("db"))
	}
	db.Req.ReleaseIsolation = false
	db.Req.CPUs = ptr(1)
	if res := f.m.Sync(db, f.all); res.AllocatedCPUs != "1" || f.cpusOf("db") != "1" || f.cpusOf("s2") != "2-7" {
		t.Fatalf("shrink: %+v, db %s, shared %s", res, f.cpusOf("db"), f.cpusOf("s2"))
	}
	// Delete gives the cores back.
	delete(f.pods, "db")
	res = f.m.Forget("db", f.all)
	if !res.SharedChanged || f.cpusOf("s1") != "1-7" || len(res.Events) != 1 || res.Events[0].Reason != "Released" {
		t.Fatalf("forget: %+v, shared %s", res, f.cpusOf("s1"))
	}
}

func TestPoolsBadInputChangesNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ann    map[string]string
		reason string
	}{
		{"abc", map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "abc"}, "InvalidAnnotation"},
		{"negative", map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "-1"}, "InvalidAnnotation"},
		{"more than node", map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "64"}, "TooManyCPUs"},
		{"cap", map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "4"}, "CapExceeded"},
		{"overlap other pod", map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUSet: "2"}, "CPUsTaken"},
		{"overlap reserved", map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUSet: "0,7"}, "ReservedOverlap"},
		{"no demand", map[string]string{local.AnnotationCPUPool: "exclusive"}, "NoCPUCount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPoolsFixture(t)
			f.m.Sync(f.add("s1", cgroup.QoSBurstable, nil, 1), f.all)
			f.m.Sync(f.add("db", cgroup.QoSGuaranteed, map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "2"}, 0), f.all)
			before := encodeCheckpoint(f.m.state.snapshot())
			sharedBefore, dbBefore := f.cpusOf("s1"), f.cpusOf("db")
			bad := f.add("bad", cgroup.QoSBurstable, tc.ann, 0)
			res := f.m.Sync(bad, f.all)
			if res.Status == nil || res.Status.State != local.StateRefused || res.Status.Reason != tc.reason || res.Refusal != tc.reason {
				t.Fatalf("status %+v, want Refused/%s", res.Status, tc.reason)
			}
			if len(res.Events) != 1 || !res.Events[0].Warning {
				t.Fatalf("want one warning event, got %+v", res.Events)
			}
			if after := encodeCheckpoint(f.m.state.snapshot()); string(after) != string(before) {
				t.Fatalf("state changed:\n%s\n%s", before, after)
			}
			if f.cpusOf("s1") != sharedBefore || f.cpusOf("db") != dbBefore {
				t.Fatalf("other pods' cgroups changed")
			}
			// The refused pod itself runs on the shared pool.
			if got := f.cpusOf("bad"); got != sharedBefore {
				t.Fatalf("refused pod on %s, want the shared pool %s", got, sharedBefore)
			}
		})
	}
}

func TestPoolsRefusedResizeKeepsCores(t *testing.T) {
	f := newPoolsFixture(t)
	db := f.add("db", cgroup.QoSGuaranteed, map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "2"}, 0)
	f.m.Sync(db, f.all)
	db.Req.CPUs = ptr(6)
	res := f.m.Sync(db, f.all)
	if res.Status.State != local.StateRefused || res.Status.CPUs != "1-2" || f.cpusOf("db") != "1-2" {
		t.Fatalf("refused grow must keep 1-2: %+v, cgroup %s", res.Status, f.cpusOf("db"))
	}
}

func TestPoolsUntouchedAndLateContainers(t *testing.T) {
	f := newPoolsFixture(t)
	sys := f.add("sys", cgroup.QoSBurstable, nil, 1)
	sys.Untouched = true
	f.pods["sys"] = sys
	f.m.Sync(sys, f.all)
	if got := f.cpusOf("sys"); got != "" {
		t.Fatalf("untouched pod written: %s", got)
	}
	s1 := f.add("s1", cgroup.QoSBurstable, nil, 1)
	f.m.Sync(s1, f.all)
	// A container cgroup appears later: the next sync (queued by the
	// watcher) writes it, and that is not counted as drift.
	f.cg.cpus["/kubepods/burstable/pods1/ctr-late"] = cpuset.New()
	res := f.m.Sync(s1, f.all)
	if res.Written != 1 || res.Drift != 0 || f.cpusOf("s1") != "1-7" {
		t.Fatalf("late container: written %d drift %d cpus %s", res.Written, res.Drift, f.cpusOf("s1"))
	}
	// Someone rewrites a container we set (past the runtime's setup
	// window): the sweep puts it back, as drift.
	f.advance(f.m.settleAfter)
	f.cg.cpus["/kubepods/burstable/pods1/ctr-a"] = cpuset.New(0)
	res = f.m.Sweep(f.all())
	if res.Drift != 1 || res.DriftUIDs["s1"] != 1 || f.cpusOf("s1") != "1-7" {
		t.Fatalf("drift: %+v", res)
	}
}

func TestPoolsWriteFailureReported(t *testing.T) {
	f := newPoolsFixture(t)
	s1 := f.add("s1", cgroup.QoSBurstable, nil, 1)
	f.cg.failOn = "/kubepods/burstable/pods1"
	res := f.m.Sync(s1, f.all)
	if !errors.Is(res.Failed["s1"], ErrCgroupWrite) || res.Status.State != local.StateFailed || res.Status.Reason != "CgroupWriteFailed" {
		t.Fatalf("failure not reported: %+v", res)
	}
	f.cg.failOn = ""
	if res := f.m.Sync(s1, f.all); len(res.Failed) != 0 || res.Status.State != local.StateShared {
		t.Fatalf("retry: %+v", res)
	}
}

func TestPoolsRestoresQuotaWhenLeavingExclusive(t *testing.T) {
	f := newPoolsFixture(t)
	db := f.add("db", cgroup.QoSBurstable, map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "1"}, 0)
	db.CPULimitsMilli = map[string]int64{"containerd://ctr-a": 1500, "containerd://ctr-b": 500}
	f.m.Sync(db, f.all)
	dbPath, _ := f.cg.PodPath("db", cgroup.QoSBurstable)
	if f.cg.quota[dbPath] != "-1" || f.cg.quota[dbPath+"/ctr-a"] != "-1" {
		t.Fatalf("exclusive: %v", f.cg.quota)
	}
	db.Req = local.PodRequest{Pool: local.PoolShared}
	f.pods["db"] = db
	f.m.Sync(db, f.all)
	if f.cg.quota[dbPath] != "200000" || f.cg.quota[dbPath+"/ctr-a"] != "150000" || f.cg.quota[dbPath+"/ctr-b"] != "50000" {
		t.Fatalf("kubelet quotas not restored: %v", f.cg.quota)
	}
	if f.cpusOf("db") != "1-7" {
		t.Fatalf("db not back on the shared pool: %s", f.cpusOf("db"))
	}
}

// TestPoolsRuntimeFirstWriteIsNotDrift replays what runc does on a real
// node: the watcher lets the agent write a new container's cpuset right
// after mkdir, then the runtime writes its own first value (the kubelet's
// default set), possibly seconds later on a loaded node (runc sets a
// container's resources only after its rootfs). Setting that back is not
// drift; a change after the container runs (or, where nothing reports
// it, after the setup window) is.
func TestPoolsRuntimeFirstWriteIsNotDrift(t *testing.T) {
	all := cpuset.New(0, 1, 2, 3, 4, 5, 6, 7)
	for _, tc := range []struct {
		name     string
		running  bool // the kubelet reports the container running at the second pass
		reported bool // the pod's status lists the container, not running yet
	}{{name: "reported running", running: true}, {name: "no status at all"}, {name: "reported, not running yet", reported: true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPoolsFixture(t)
			s1 := f.add("s1", cgroup.QoSBurstable, nil, 1)
			if tc.reported {
				s1.Containers = []ContainerState{{ID: "containerd://ctr-a", Running: true}, {ID: "containerd://ctr-new"}}
				s1.Running = map[string]bool{"containerd://ctr-a": true}
				f.pods["s1"] = s1
			}
			f.m.Sync(s1, f.all)
			ctr := "/kubepods/burstable/pods1/ctr-new"
			f.cg.cpus[ctr] = cpuset.New() // mkdir by the runtime
			if res := f.m.Sync(s1, f.all); res.Written != 1 || res.Drift != 0 {
				t.Fatalf("first write: %+v", res)
			}
			f.cg.cpus[ctr] = all // the runtime's own first cpuset
			if tc.running {
				s1.Running = map[string]bool{"containerd://ctr-new": true}
				f.pods["s1"] = s1
			}
			res := f.m.Sync(s1, f.all)
			if res.Written != 1 || res.Drift != 0 || len(res.DriftUIDs) != 0 || f.cg.cpus[ctr].String() != "1-7" {
				t.Fatalf("runtime's first write counted as drift: %+v, cpus %s", res, f.cg.cpus[ctr])
			}
			if !tc.running {
				// Nothing reported running yet: a quick pass finding our
				// value in place proves nothing (the runtime may not have
				// written yet).
				if res := f.m.Sweep(f.all()); res.Written != 0 || res.Drift != 0 {
					t.Fatalf("quiet sweep: %+v", res)
				}
				f.cg.cpus[ctr] = all
				if res := f.m.Sweep(f.all()); res.Written != 1 || res.Drift != 0 {
					t.Fatalf("runtime write after a quiet pass counted as drift: %+v", res)
				}
				f.advance(f.m.settleAfter)
				if tc.reported {
					// The kubelet lists the container, so its runtime
					// is still at work: a write past the short window
					// is not drift yet (the v2 node's emulated runc
					// wrote cpu.max more than 5 s after mkdir).
					f.cg.cpus[ctr] = all
					if res := f.m.Sweep(f.all()); res.Written != 1 || res.Drift != 0 {
						t.Fatalf("runtime write of a reported container past %s counted as drift: %+v", f.m.settleAfter, res)
					}
					f.advance(f.m.settleReported - f.m.settleAfter)
				}
			}
			f.cg.cpus[ctr] = all // now someone really changes it
			res = f.m.Sweep(f.all())
			if res.Drift != 1 || res.DriftUIDs["s1"] != 1 || f.cg.cpus[ctr].String() != "1-7" {
				t.Fatalf("real drift not counted: %+v", res)
			}
			w := res.DriftWrites[0]
			if w.Cgroup != ctr || w.Old != all.String() || w.New != "1-7" {
				t.Fatalf("drift write does not say what was found: %+v", w)
			}
		})
	}
}

// TestPoolsReleaseWhenDeletedPodExited: a deleted exclusive pod gives its
// cores back as soon as none of its containers can run on them, and not
// a moment before.
func TestPoolsReleaseWhenDeletedPodExited(t *testing.T) {
	const (
		idA = "containerd://ctr-a"
		idB = "containerd://ctr-b"
	)
	running := ContainerState{Running: true}
	for _, tc := range []struct {
		name        string
		deleting    bool
		allReported bool
		a, b        ContainerState
		goneA       bool // ctr-a's cgroup removed
		unknownA    bool // ctr-a reported under an ID whose cgroup we never saw
		release     bool
	}{
		{name: "deleted, both terminated", deleting: true, allReported: true, a: ContainerState{Terminated: true}, b: ContainerState{Terminated: true}, release: true},
		{name: "deleted, one still running", deleting: true, allReported: true, a: running, b: ContainerState{Terminated: true}},
		{name: "deleted, exited but its cgroup not yet removed", deleting: true, allReported: true, a: running, b: ContainerState{Terminated: true}},
		{name: "deleted, status lags but cgroup removed", deleting: true, allReported: true, a: running, b: ContainerState{Terminated: true}, goneA: true, release: true},
		{name: "deleted, running under an unknown cgroup", deleting: true, allReported: true, a: running, b: ContainerState{Terminated: true}, unknownA: true},
		{name: "deleted, waiting container with live cgroup", deleting: true, allReported: true, a: ContainerState{}, b: ContainerState{Terminated: true}},
		{name: "deleted, never-started container", deleting: true, allReported: true, a: ContainerState{}, b: ContainerState{Terminated: true}, unknownA: true, release: true},
		{name: "deleted, some status missing", deleting: true, a: ContainerState{Terminated: true}, b: ContainerState{Terminated: true}},
		{name: "not deleted, containers exited (restarting)", allReported: true, a: ContainerState{Terminated: true}, b: ContainerState{Terminated: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPoolsFixture(t)
			s1 := f.add("s1", cgroup.QoSBurstable, nil, 1)
			f.m.Sync(s1, f.all)
			db := f.add("db", cgroup.QoSGuaranteed, map[string]string{local.AnnotationCPUPool: "exclusive"}, 2)
			if res := f.m.Sync(db, f.all); res.AllocatedCPUs != "1-2" || f.cpusOf("s1") != "3-7" {
				t.Fatalf("allocate: %+v, shared %s", res, f.cpusOf("s1"))
			}
			ctrA, _ := f.cg.ContainerPath("db", cgroup.QoSGuaranteed, idA)
			if tc.goneA {
				delete(f.cg.cpus, ctrA)
			}
			db.Deleting, db.AllReported = tc.deleting, tc.allReported
			tc.a.ID, tc.b.ID = idA, idB
			if tc.unknownA {
				tc.a.ID = "containerd://ctr-x"
				if !tc.a.Running {
					tc.a.ID = ""
				}
			}
			db.Containers = []ContainerState{tc.a, tc.b}
			f.pods["db"] = db
			res := f.m.Sync(db, f.all)
			_, still := f.m.State().Assignment("db")
			if still == tc.release {
				t.Fatalf("released %v, want %v: %+v", !still, tc.release, res)
			}
			if !tc.release {
				if got := f.cpusOf("s1"); got != "3-7" {
					t.Fatalf("shared pool widened while db may still run: %s", got)
				}
				return
			}
			if got := f.cpusOf("s1"); got != "1-7" || !res.SharedChanged || len(res.Events) != 1 || res.Events[0].Reason != "Released" {
				t.Fatalf("after release: shared %s, %+v", got, res)
			}
			// The dying pod's later updates never take cores again.
			db.Containers = []ContainerState{{ID: idA, Running: true}, {ID: idB, Running: true}}
			f.cg.cpus[ctrA] = cpuset.New(1, 2)
			if res := f.m.Sync(db, f.all); res.AllocatedCPUs != "" || len(f.m.State().Assignments()) != 0 {
				t.Fatalf("finished pod allocated again: %+v", res)
			}
		})
	}
}

// TestPoolsAgrees: the watch's question on each write it sees. Values the
// pools wrote (or want) agree; anything else on a managed pod does not; an
// untouched pod's files are never the pools' business.
func TestPoolsAgrees(t *testing.T) {
	f := newPoolsFixture(t)
	s1 := f.add("s1", cgroup.QoSBurstable, nil, 1)
	f.m.Sync(s1, f.all)
	db := f.add("db", cgroup.QoSGuaranteed, map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "2"}, 0)
	f.m.Sync(db, f.all)
	sys := f.add("sys", cgroup.QoSBurstable, nil, 1)
	sys.Untouched = true
	for _, tc := range []struct {
		pod         Pod
		file, value string
		want        bool
	}{
		{db, "cpuset.cpus", "1-2", true},
		{db, "cpuset.cpus", "1,2", true},
		{db, "cpuset.cpus", "0-7", false},
		{db, "cpuset.cpus", "garbage", false},
		{db, "cpu.cfs_quota_us", "-1", true},
		{db, "cpu.cfs_quota_us", "200000", false},
		{db, "cpu.max", "max 100000", true},
		{db, "cpu.max", "200000 100000", false},
		{s1, "cpuset.cpus", "3-7", true},
		{s1, "cpuset.cpus", "1-7", false},
		{s1, "cpu.cfs_quota_us", "50000", true}, // the kubelet's
		{sys, "cpuset.cpus", "0", true},
		{sys, "cpu.max", "1000 100000", true},
	} {
		if got := f.m.Agrees(tc.pod, tc.file, tc.value); got != tc.want {
			t.Errorf("%s %s = %q: agrees %v, want %v", tc.pod.UID, tc.file, tc.value, got, tc.want)
		}
	}
	// Back on the shared pool with the kubelet's quota not yet put back
	// (its write failed): an unlimited one does not agree until it is.
	db.Req = local.PodRequest{}
	f.m.Sync(db, f.all)
	f.m.mu.Lock()
	f.m.unlimited["db"] = true
	f.m.mu.Unlock()
	if f.m.Agrees(db, "cpu.cfs_quota_us", "-1") {
		t.Error("an exclusive pod's lifted quota agrees after it left the exclusive pool")
	}
}

// TestPoolsSweepCoversEveryPodInChunks: a sweep over more pods than one
// chunk sets every one back (drift counted per pod) and writes nothing
// where nothing changed.
func TestPoolsSweepCoversEveryPodInChunks(t *testing.T) {
	f := newPoolsFixture(t)
	n := 3*sweepChunk + 5
	for i := range n {
		f.m.Sync(f.add(fmt.Sprintf("s%02d", i), cgroup.QoSBurstable, nil, 1), f.all)
	}
	if res := f.m.Sweep(f.all()); res.Written != 0 || res.Drift != 0 {
		t.Fatalf("quiet sweep: %+v", res)
	}
	f.advance(f.m.settleAfter)
	for _, i := range []int{0, sweepChunk, n - 1} {
		f.cg.cpus[fmt.Sprintf("/kubepods/burstable/pods%02d/ctr-b", i)] = cpuset.New(0)
	}
	res := f.m.Sweep(f.all())
	if res.Drift != 3 || len(res.DriftUIDs) != 3 || res.DriftUIDs[fmt.Sprintf("s%02d", n-1)] != 1 {
		t.Fatalf("drift in three chunks: %+v", res)
	}
	for i := range n {
		if got := f.cpusOf(fmt.Sprintf("s%02d", i)); got != "1-7" {
			t.Fatalf("s%02d on %s after the sweep", i, got)
		}
	}
}

// TestIsolationCheckpointedAfterTheCgroups: a change of ownership (a pod's
// cores) is in the checkpoint before any cgroup shows it, but a change of
// release-isolation alone, which owns nothing, is left to Flush (its fsync
// was on the annotation's path); a failed Flush leaves it for the next.
func TestIsolationCheckpointedAfterTheCgroups(t *testing.T) {
	cg := newFakeCgroups()
	file := filepath.Join(t.TempDir(), "cp")
	m, err := New(Options{All: mustSet(t, "0-7"), Reserved: mustSet(t, "0"), CapRatio: 2.0 / 3.0, Cgroups: cg, Checkpoint: file})
	if err != nil {
		t.Fatal(err)
	}
	f := &poolsFixture{t: t, cg: cg, m: m, pods: map[string]Pod{}}
	db := f.add("db", cgroup.QoSGuaranteed, map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "2"}, 2)
	dbPath, _ := cg.PodPath("db", cgroup.QoSGuaranteed)
	// onDisk is the checkpoint's entry of db when db's cgroup is written.
	var onDisk []Assignment
	cg.onApply = func(p cgroup.PodCPUs) {
		if p.Path != dbPath {
			return
		}
		cp, err := ReadCheckpoint(file)
		if err != nil {
			t.Fatalf("checkpoint at db's cgroup write: %v", err)
		}
		onDisk = append(onDisk, cp["db"])
	}
	released := func() bool {
		t.Helper()
		cp, err := ReadCheckpoint(file)
		if err != nil {
			t.Fatal(err)
		}
		return cp["db"].ReleaseIsolation
	}
	step := func(name string, wantCPUs string, wantAtWrite, wantUnsaved bool) {
		t.Helper()
		onDisk = nil
		res := m.Sync(db, f.all)
		if len(res.Failed) != 0 {
			t.Fatalf("%s: %v", name, res.Failed)
		}
		if len(onDisk) != 1 || onDisk[0].CPUs.String() != wantCPUs || onDisk[0].ReleaseIsolation != wantAtWrite {
			t.Fatalf("%s: checkpoint at the cgroup write %+v, want cpus %s released %v", name, onDisk, wantCPUs, wantAtWrite)
		}
		if res.Unsaved != wantUnsaved || released() != wantAtWrite {
			t.Fatalf("%s: unsaved %v, checkpoint released %v after the sync", name, res.Unsaved, released())
		}
	}
	step("allocate", "1-2", false, false) // ownership: written before
	db.Req.ReleaseIsolation = true
	step("release", "1-2", false, true) // isolation alone: left to Flush
	if err := m.Flush(); err != nil || !released() {
		t.Fatalf("flush: %v, released %v", err, released())
	}
	db.Req.ReleaseIsolation = false
	db.Req.CPUs = ptr(3)
	step("restore and grow", "1-3", false, false) // with ownership: before
	// A failed Flush: memory and cgroups hold the new isolation, the file
	// the old one, and the next Flush writes it.
	db.Req.ReleaseIsolation = true
	cg.onApply = nil
	if res := m.Sync(db, f.all); !res.Unsaved || len(res.Failed) != 0 {
		t.Fatalf("release again: %+v", res)
	}
	m.state.file = filepath.Join(file, "nested")
	if err := m.Flush(); !errors.Is(err, ErrCheckpointWrite) {
		t.Fatalf("flush to a bad path: %v", err)
	}
	if a, _ := m.state.Assignment("db"); !a.ReleaseIsolation || f.cpusOf("db") != "1-7" || released() {
		t.Fatalf("after the failed flush: %+v, cgroup %s, file released %v", a, f.cpusOf("db"), released())
	}
	m.state.file = file
	if err := m.Flush(); err != nil || !released() {
		t.Fatalf("the retry: %v, released %v", err, released())
	}
	if err := m.Flush(); err != nil || m.state.unsaved() {
		t.Fatalf("a flush with nothing to write: %v", err)
	}
}

// TestPoolsWhoVerifies: the pod being synced and every pod a sweep checks
// are read before they are written (PodCPUs.Verify); the other pods of a
// pool-wide refresh trust what the cgroup tree recorded of its own writes.
func TestPoolsWhoVerifies(t *testing.T) {
	f := newPoolsFixture(t)
	for _, uid := range []string{"s1", "s2"} {
		f.m.Sync(f.add(uid, cgroup.QoSBurstable, nil, 1), f.all)
	}
	verified := func() map[string]bool {
		out := map[string]bool{}
		for _, p := range f.cg.applied {
			out[p.UID] = p.Verify
		}
		f.cg.applied = nil
		return out
	}
	verified()
	db := f.add("db", cgroup.QoSGuaranteed, map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "1"}, 1)
	f.m.Sync(db, f.all)
	if got := verified(); !got["db"] || got["s1"] || got["s2"] || len(got) != 3 {
		t.Fatalf("exclusive sync: verified %v, want db only of db, s1, s2", got)
	}
	delete(f.pods, "db")
	f.m.Forget("db", f.all)
	if got := verified(); got["s1"] || got["s2"] || len(got) != 2 {
		t.Fatalf("forget: verified %v, want none of s1, s2", got)
	}
	f.m.Sweep(f.all())
	if got := verified(); !got["s1"] || !got["s2"] {
		t.Fatalf("sweep: verified %v, want every pod", got)
	}
}
