//go:build linux

package runner

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/test/cgtest"
	"github.com/cgpilot/cgpilot/test/tier"
)

// kernelRightsizer is unitRightsizer over a kubelet-style tree of real
// cgroups (kernel tier).
func kernelRightsizer(t *testing.T) (*cgtest.KubeletTree, *Runner, *fakeHost) {
	t.Helper()
	tier.Kernel(t)
	k := cgtest.NewKubeletTree(t, "cgroupfs")
	kp, err := cgroup.OpenKubepods(k.SB.AsRoots(), cgroup.KubepodsConfig{Layout: cgroup.LayoutConfig{Driver: cgroup.DriverCgroupfs, KubepodsPath: "/" + k.KubepodsName}})
	if err != nil {
		t.Fatal(err)
	}
	r, h := unitRightsizer(t)
	r.cgroups = kp
	return k, r, h
}

// TestTrackRetriesANewUnsampledContainer (kernel tier: real cgroups): a
// container running for less than unsampledRetryFor whose cgroup is not
// there yet when Track sees it is asked again after unsampledRetry,
// without waiting for the housekeeping's safety net; an older one is left
// to the safety net; once its cgroup is there the retry samples it and
// asks no more.
func TestTrackRetriesANewUnsampledContainer(t *testing.T) {
	k, r, h := kernelRightsizer(t)
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	pod := func(name string, started time.Time) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: "containerd://" + id,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}}}}}
	}
	r.Track(pod("fresh", time.Now().Add(-5*time.Second)), false, cgroup.QoSBurstable)
	r.Track(pod("old", time.Now().Add(-10*time.Minute)), false, cgroup.QoSBurstable)
	if got, want := strings.Join(h.requeuedAfter, ","), fmt.Sprintf("default/fresh after %v", unsampledRetry); got != want {
		t.Fatalf("requeued %q, want %q", got, want)
	}
	explained := func() bool { // what cgpilotctl explain shows
		v := local.ExplainView{Containers: []local.ContainerView{{Name: "app", ID: "containerd://" + id, State: "running"}}}
		r.Explain("uid-fresh", &v)
		return v.Containers[0].Sampled
	}
	if explained() {
		t.Fatal("explain says sampled before the container's cgroup is there")
	}
	k.SB.MkdirPod("cgroupfs", "burstable", "uid-fresh", id)
	r.Track(pod("fresh", time.Now().Add(-7*time.Second)), false, cgroup.QoSBurstable)
	if !r.coll.Sampled("containerd://" + id) {
		t.Fatal("the container is not sampled once its cgroup is there")
	}
	if !explained() {
		t.Fatal("explain says not sampled once the container is sampled")
	}
	if len(h.requeuedAfter) != 1 {
		t.Fatalf("requeued %v after the container was sampled", h.requeuedAfter)
	}
}

// TestVerifyOfAnEndedContainer (kernel tier): a resized container whose
// cgroup is gone when the kubelet's status comes (on cgroup v2 an OOM
// kills all of it, and its successor starts) gets no verdict: no
// ResizeCgroupDiffers Warning naming a missing file, and the pod stays
// waiting for the update that reports the successor.
func TestVerifyOfAnEndedContainer(t *testing.T) {
	k, r, h := kernelRightsizer(t)
	const id = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	res := corev1.ResourceRequirements{Requests: rlist("100m", "64Mi"), Limits: rlist("500m", "173Mi")}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hog", UID: "uid-hog"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: res}}},
		Status: corev1.PodStatus{QOSClass: corev1.PodQOSBurstable, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: "containerd://" + id,
			Resources: res.DeepCopy(), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}}
	_, ctrs := k.SB.MkdirPod("cgroupfs", "burstable", "uid-hog", id)
	r.Track(p, false, cgroup.QoSBurstable)
	r.mu.Lock()
	rp := r.pods["uid-hog"]
	if rp == nil || rp.containers["app"].path == "" {
		r.mu.Unlock()
		t.Fatal("the container is not tracked")
	}
	rp.state = stateResized
	r.mu.Unlock()
	for key := range k.SB.Dirs {
		if err := os.Remove(k.SB.Path(key, ctrs[0])); err != nil {
			t.Fatal(err)
		}
	}
	r.Verify(p)
	for _, ev := range h.events {
		if ev.Reason == "ResizeCgroupDiffers" {
			t.Errorf("a Warning for an ended container: %s", ev.Message)
		}
	}
	r.mu.Lock()
	state := rp.state
	r.mu.Unlock()
	if state != stateResized {
		t.Errorf("state %q after verifying an ended container, want %q (no verdict)", state, stateResized)
	}
}
