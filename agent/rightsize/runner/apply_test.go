package runner

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgpilot/cgpilot/agent/rightsize"
)

// TestSpecShows: verify judges only a pod whose spec holds the accepted
// pods/resize; an informer view from before it (the old spec, which its
// old status matches while the kubelet has already written the new
// cgroups) is not judged, so no false ResizeCgroupDiffers.
func TestSpecShows(t *testing.T) {
	pod := func(cpuReq, cpuLim, memReq, memLim string) *corev1.Pod {
		q := resource.MustParse
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: q(cpuReq), corev1.ResourceMemory: q(memReq)},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: q(cpuLim), corev1.ResourceMemory: q(memLim)}}}}}}
	}
	before := pod("300m", "600m", "256Mi", "512Mi")
	body, err := resizePatch(before, map[string]rightsize.Requirements{"web": {
		Requests: rightsize.Resources{CPU: 0.1, Memory: 100 << 20}, Limits: rightsize.Resources{CPU: 0.2, Memory: 200 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    *corev1.Pod
		want bool
	}{
		{"before the resize", before, false},
		{"after it", pod("100m", "200m", "100Mi", "200Mi"), true},
		{"after it, other spellings", pod("0.1", "200m", "104857600", "200Mi"), true},
		{"a later change of the limit", pod("100m", "300m", "100Mi", "200Mi"), false},
	} {
		if got := specShows(tc.p, body); got != tc.want {
			t.Errorf("%s: specShows = %v, want %v (body %s)", tc.name, got, tc.want, body)
		}
	}
	if specShows(before, []byte("{")) {
		t.Error("a body that does not parse shows in any spec")
	}
}
