package agent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
)

// TestOnlyOwnAnnotations: the echo of the agent's own status and
// recommendation patches is not reconciled again; any other change is,
// the user's annotations, the spec and the status included.
func TestOnlyOwnAnnotations(t *testing.T) {
	base := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "u1", ResourceVersion: "1",
			Annotations: map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationStatus: `{"state":"Pending"}`}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}},
	}
	for _, tc := range []struct {
		name   string
		change func(p *corev1.Pod)
		own    bool
	}{
		{"status annotation", func(p *corev1.Pod) { p.Annotations[local.AnnotationStatus] = `{"state":"Allocated"}` }, true},
		{"allocated cpus added", func(p *corev1.Pod) { p.Annotations[local.AnnotationAllocatedCPUs] = "1" }, true},
		{"recommendation", func(p *corev1.Pod) { p.Annotations[v1alpha1.AnnotationRecommendation] = "{}" }, true},
		{"nothing but the version", func(p *corev1.Pod) {}, true},
		{"the user's annotation", func(p *corev1.Pod) { p.Annotations[local.AnnotationCPUs] = "2" }, false},
		{"the pool annotation removed", func(p *corev1.Pod) { delete(p.Annotations, local.AnnotationCPUPool) }, false},
		{"a label", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "x"} }, false},
		{"deleted", func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }, false},
		{"spec resized", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("2")
		}, false},
		{"container started", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", ContainerID: "containerd://a"}}
		}, false},
		{"a container's resources in its status", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Resources: &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}
		}, false},
		{"the pod-level status.resources (the kubelet's first resync)", func(p *corev1.Pod) {
			p.Status.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
			p.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		}, true},
		{"pod-level status.resources with a phase change", func(p *corev1.Pod) {
			p.Status.Resources = &corev1.ResourceRequirements{}
			p.Status.Phase = corev1.PodRunning
		}, false},
	} {
		n := base.DeepCopy()
		n.ResourceVersion = "2"
		tc.change(n)
		if got := onlyOwnAnnotations(base, n); got != tc.own {
			t.Errorf("%s: only the agent's own annotations changed = %v, want %v", tc.name, got, tc.own)
		}
	}
	if base.Annotations[local.AnnotationStatus] == "" || base.ResourceVersion != "1" || base.Status.Resources != nil {
		t.Fatal("the comparison changed the cached pod")
	}
}
