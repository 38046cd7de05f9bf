//go:build linux

package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/agent/collector"
	"github.com/cgpilot/cgpilot/agent/oomwatch"
	"github.com/cgpilot/cgpilot/agent/pools"
	"github.com/cgpilot/cgpilot/agent/rightsize"
)

// unitRightsizer is a controller and its rightsizer with no kernel and no
// API server: an informer cache filled by hand, pools that write nothing.
func unitRightsizer(t *testing.T) *rightsizer {
	t.Helper()
	pm, err := pools.New(pools.Options{All: cpuset.New(0, 1), Checkpoint: filepath.Join(t.TempDir(), "cp")})
	if err != nil {
		t.Fatal(err)
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{uidIndex: func(obj any) ([]string, error) {
		return []string{string(obj.(*corev1.Pod).UID)}, nil
	}})
	c := &controller{cfg: DefaultConfig(), indexer: idx, pools: pm, metrics: newMetrics(), log: testr.New(t),
		events:  newEventLog(record.NewFakeRecorder(100), "node"),
		statusQ: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		kubelet: kubeletStatic{Taken: cpuset.New(), Pods: map[string]bool{}}, known: map[string]*knownPod{}}
	t.Cleanup(c.statusQ.ShutDown)
	e, _, err := rightsize.NewEngine(rightsize.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := newRightsizer(c, e, collector.New(collector.Options{Interval: time.Second}), nil, nil)
	r.apply = newApplier(c, true)
	r.apply.r = r
	t.Cleanup(r.apply.q.ShutDown)
	c.rs = r
	return r
}

// addPod puts a pod in the informer cache and tracks it, as a reconcile does.
func (r *rightsizer) addPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: rlist("100m", "64Mi")}}}}}
	if err := r.c.indexer.Add(p); err != nil {
		t.Fatal(err)
	}
	r.track(context.Background(), p, r.c.podInfo(p))
	return p
}

// TestDecideAllPodForgottenMidRound reproduces the demo's crash under pod
// churn deterministically: a pod is deleted (untracked by its reconcile)
// between decideAll's locked listing of the due pods and input's lookup of
// the tracked pod. The round must decide the other pods, make no decision
// and queue no change or annotation for the forgotten one, and not track
// it again.
func TestDecideAllPodForgottenMidRound(t *testing.T) {
	r := unitRightsizer(t)
	gone, stays := r.addPod(t, "gone"), r.addPod(t, "stays")
	forgotten := 0
	r.beforeLookup = func(uid string) {
		if uid == string(gone.UID) {
			r.untrack(uid) // the pod's delete, reconciled in the window
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
		r.decideAll(now)
	}()
	if forgotten != 1 {
		t.Fatalf("the window was hit %d times, want once: the test no longer reproduces the race", forgotten)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pods[string(gone.UID)]; ok {
		t.Error("the forgotten pod is tracked again after the round")
	}
	if _, ok := r.pendingRec[keyOf(gone.Namespace, gone.Name)]; ok {
		t.Error("a recommendation annotation was queued for the forgotten pod")
	}
	if rp := r.pods[string(stays.UID)]; rp == nil || rp.decision.State == "" || !rp.next.After(now) {
		t.Errorf("the other pod was not decided in the same round: %+v", rp)
	}
	r.apply.mu.Lock()
	defer r.apply.mu.Unlock()
	if _, ok := r.apply.want[keyOf(gone.Namespace, gone.Name)]; ok {
		t.Error("a resize was queued for the forgotten pod")
	}
}

// TestOOMOfPodForgottenMidEvent: the same window on the OOM path, a kill
// whose pod is forgotten between onOOM's lookup of the cgroup and input's.
func TestOOMOfPodForgottenMidEvent(t *testing.T) {
	r := unitRightsizer(t)
	p := r.addPod(t, "hog")
	dir := "/sys/fs/cgroup/memory/kubepods/pod" + string(p.UID) + "/ctr"
	r.mu.Lock()
	r.pods[string(p.UID)].containers = map[string]rsContainer{"app": {id: "ctr", memDir: dir}}
	r.dirs[dir] = ctrRef{uid: string(p.UID), container: "app"}
	r.mu.Unlock()
	hit := 0
	r.beforeLookup = func(uid string) {
		hit++
		r.untrack(uid)
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
	if got := fmt.Sprint(r.apply.want); got != "map[]" {
		t.Errorf("a memory raise was queued for the forgotten pod: %s", got)
	}
}
