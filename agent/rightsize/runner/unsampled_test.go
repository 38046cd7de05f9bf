//go:build linux

package runner

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestSweepRequeuesUnsampledPods: the sweep queues again a managed pod
// whose running container is not sampled (no event may ever come for it
// again), and leaves alone pods that are terminating, not running yet, or
// not the agent's (an ignored namespace).
func TestSweepRequeuesUnsampledPods(t *testing.T) {
	r, h := unitRightsizer(t)
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
		if err := h.idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	pod("default", "unsampled", true, false)
	pod("default", "terminating", true, true)
	pod("default", "creating", false, false)
	pod("kube-system", "ignored", true, false)

	r.requeueUnsampled()
	if got := strings.Join(h.requeued, ","); got != "default/unsampled" {
		t.Fatalf("queued %q, want default/unsampled", got)
	}
	if v := testutil.ToFloat64(r.m.unsampled); v != 1 {
		t.Fatalf("cgpilot_unsampled_requeues_total %v, want 1", v)
	}
}
