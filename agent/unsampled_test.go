//go:build linux

package agent

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/workqueue"
)

// TestSweepRequeuesUnsampledPods: the sweep queues again a managed pod
// whose running container is not sampled (no event may ever come for it
// again), and leaves alone pods that are terminating, not running yet, or
// not the agent's (an ignored namespace).
func TestSweepRequeuesUnsampledPods(t *testing.T) {
	r := unitRightsizer(t)
	c := r.c
	c.lister = corelisters.NewPodLister(c.indexer)
	c.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	t.Cleanup(c.queue.ShutDown)
	c.since = map[string]time.Time{}
	pod := func(ns, name string, running, deleting bool) {
		st := corev1.ContainerStatus{Name: "app", ContainerID: "containerd://" + name}
		if running {
			st.State.Running = &corev1.ContainerStateRunning{}
		} else {
			st.ContainerID = ""
			st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{st}}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		if err := c.indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	pod("default", "unsampled", true, false)
	pod("default", "terminating", true, true)
	pod("default", "creating", false, false)
	pod("kube-system", "ignored", true, false)

	r.requeueUnsampled()
	if n := c.queue.Len(); n != 1 {
		t.Fatalf("%d keys queued, want 1 (default/unsampled)", n)
	}
	if k, _ := c.queue.Get(); k != "default/unsampled" {
		t.Fatalf("queued %q, want default/unsampled", k)
	}
	if v := testutil.ToFloat64(c.metrics.unsampled); v != 1 {
		t.Fatalf("cgpilot_unsampled_requeues_total %v, want 1", v)
	}
}
