//go:build linux

package runner

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgpilot/cgpilot/agent/history"
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

// TestHousekeepingOncePerPeriod: what walks every pod (the unsampled
// safety net among it) runs at the first sweep and then once per
// HousekeepEvery, not at every sweep tick.
func TestHousekeepingOncePerPeriod(t *testing.T) {
	r, h := unitRightsizer(t)
	r.cfg.HousekeepEvery = time.Minute
	hist, err := history.Open(history.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r.hist = hist
	st := corev1.ContainerStatus{Name: "app", ContainerID: "containerd://unsampled", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	if err := h.idx.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "unsampled", UID: "uid-unsampled"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{st}}}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	var ran []bool
	for _, at := range []time.Duration{0, 10 * time.Second, 59 * time.Second, time.Minute, 70 * time.Second} {
		ran = append(ran, r.housekeep(t0.Add(at)))
	}
	if want := []bool{true, false, false, true, false}; !slices.Equal(ran, want) {
		t.Fatalf("housekeeping ran %v at 0, 10 s, 59 s, 60 s, 70 s; want %v", ran, want)
	}
	if len(h.requeued) != 2 {
		t.Fatalf("the unsampled pod queued %d times, want 2 (once per housekeeping)", len(h.requeued))
	}
}
