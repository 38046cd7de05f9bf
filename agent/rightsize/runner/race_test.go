//go:build linux

package runner

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/agent/collector"
	"github.com/cgpilot/cgpilot/agent/oomwatch"
	"github.com/cgpilot/cgpilot/agent/podspec"
	"github.com/cgpilot/cgpilot/agent/rightsize"
)

// fakeHost is the agent's side for unit tests: an informer cache filled
// by hand, Events and status keys kept.
type fakeHost struct {
	idx cache.Indexer
	// exclusiveAsked counts HoldsExclusive calls: the decision's input
	// asks it, the OOM path must not.
	exclusiveAsked atomic.Int32

	mu            sync.Mutex
	events        []Event
	queued        []string
	requeued      []string
	requeuedAfter []string
}

func (h *fakeHost) PodByUID(uid string) *corev1.Pod {
	objs, _ := h.idx.ByIndex("uid", uid)
	if len(objs) != 1 {
		return nil
	}
	p, _ := objs[0].(*corev1.Pod)
	return p
}

func (h *fakeHost) Pod(namespace, name string) (*corev1.Pod, error) {
	obj, ok, err := h.idx.GetByKey(podspec.Key(namespace, name))
	if err != nil || !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	return obj.(*corev1.Pod), nil
}

func (h *fakeHost) HoldsExclusive(*corev1.Pod) bool {
	h.exclusiveAsked.Add(1)
	return false
}

func (h *fakeHost) Emit(_ *PodRef, ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev)
}

// Pods are the cached pods.
func (h *fakeHost) Pods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range h.idx.List() {
		out = append(out, o.(*corev1.Pod))
	}
	return out
}

// Manages: every namespace but kube-system (the agent's default ignores it).
func (h *fakeHost) Manages(p *corev1.Pod) bool { return p.Namespace != "kube-system" }

func (h *fakeHost) Requeue(p *corev1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requeued = append(h.requeued, podspec.Key(p.Namespace, p.Name))
}

func (h *fakeHost) RequeueAfter(p *corev1.Pod, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requeuedAfter = append(h.requeuedAfter, fmt.Sprintf("%s after %v", podspec.Key(p.Namespace, p.Name), d))
}

func (h *fakeHost) QueueStatus(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.queued = append(h.queued, key)
}

// unitRightsizer is right-sizing with no kernel and no API server: a
// fake host, no cgroups, no OOM watcher.
func unitRightsizer(t testing.TB) (*Runner, *fakeHost) {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{"uid": func(obj any) ([]string, error) {
		return []string{string(obj.(*corev1.Pod).UID)}, nil
	}})
	h := &fakeHost{idx: idx}
	e, _, err := rightsize.NewEngine(rightsize.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r := newRunner(Options{Host: h, Log: testr.NewWithInterface(t, testr.Options{}), Metrics: NewMetrics(nil), Engine: e, Registerer: reg,
		Writes: prometheus.NewCounter(prometheus.CounterOpts{Name: "w"}), Drift: prometheus.NewCounter(prometheus.CounterOpts{Name: "d"})})
	r.coll = collector.New(collector.Options{Interval: time.Second})
	r.apply = newApplier(r, true)
	t.Cleanup(r.apply.q.ShutDown)
	return r, h
}

// addPod puts a pod in the informer cache and tracks it, as a reconcile does.
func (r *Runner) addPod(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: rlist("100m", "64Mi")}}}}}
	if err := r.host.(*fakeHost).idx.Add(p); err != nil {
		t.Fatal(err)
	}
	r.Track(p, false, podspec.QoS(p))
	return p
}

// TestDecideAllPodForgottenMidRound reproduces the demo's crash under pod
// churn deterministically: a pod is deleted (untracked by its reconcile)
// between decideAll's locked listing of the due pods and input's lookup of
// the tracked pod. The round must decide the other pods, make no decision
// and queue no change or annotation for the forgotten one, and not track
// it again.
func TestDecideAllPodForgottenMidRound(t *testing.T) {
	r, _ := unitRightsizer(t)
	gone, stays := r.addPod(t, "gone"), r.addPod(t, "stays")
	forgotten := 0
	r.beforeLookup = func(uid string) {
		if uid == string(gone.UID) {
			r.Untrack(uid) // the pod's delete, reconciled in the window
			forgotten++
		}
	}
	now := time.Now()
	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Fatalf("decideAll panicked on a pod forgotten between its listing and its lookup: %v", v)
			}
		}()
		r.decideAll(now, time.Second)
	}()
	if forgotten != 1 {
		t.Fatalf("the window was hit %d times, want once: the test no longer reproduces the race", forgotten)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pods[string(gone.UID)]; ok {
		t.Error("the forgotten pod is tracked again after the round")
	}
	if _, ok := r.pendingRec.get(podspec.Key(gone.Namespace, gone.Name)); ok {
		t.Error("a recommendation annotation was queued for the forgotten pod")
	}
	if rp := r.pods[string(stays.UID)]; rp == nil || rp.decision.State == "" || !rp.next.After(now) {
		t.Errorf("the other pod was not decided in the same round: %+v", rp)
	}
	if _, ok := r.apply.want.get(podspec.Key(gone.Namespace, gone.Name)); ok {
		t.Error("a resize was queued for the forgotten pod")
	}
}

// TestOOMOfPodForgottenMidEvent: the same window on the OOM path, a kill
// whose pod is forgotten between onOOM's lookup of the cgroup and input's.
func TestOOMOfPodForgottenMidEvent(t *testing.T) {
	r, _ := unitRightsizer(t)
	p := r.addPod(t, "hog")
	dir := "/sys/fs/cgroup/memory/kubepods/pod" + string(p.UID) + "/ctr"
	r.mu.Lock()
	r.pods[string(p.UID)].containers = map[string]rsContainer{"app": {id: "ctr", memDir: dir}}
	r.dirs[dir] = ctrRef{uid: string(p.UID), container: "app"}
	r.mu.Unlock()
	hit := 0
	r.beforeLookup = func(uid string) {
		hit++
		r.Untrack(uid)
	}
	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Fatalf("onOOM panicked on a pod forgotten mid-event: %v", v)
			}
		}()
		r.onOOM(oomwatch.Event{Dir: dir, Time: time.Now(), PID: 42, Comm: "hog"})
	}()
	if hit != 1 {
		t.Fatalf("the window was hit %d times, want once", hit)
	}
	if n := r.apply.want.len(); n != 0 {
		t.Errorf("a memory raise was queued for the forgotten pod: %d resizes wait", n)
	}
}
