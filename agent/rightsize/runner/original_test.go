//go:build linux

package runner

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
)

// TestOriginalSurvivesInTheAnnotation: the requests before right-sizing
// are read back from the recommendation annotation after a restart, and
// from the spec when the annotation has none or cannot be read.
func TestOriginalSurvivesInTheAnnotation(t *testing.T) {
	pod := func(ann string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns", Annotations: map[string]string{}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: rlist("250m", "300Mi")}}}}}
		if ann != "" {
			p.Annotations[v1alpha1.AnnotationRecommendation] = ann
		}
		return p
	}
	rec := local.Recommendation{Containers: []local.ContainerRecommendation{{Name: "app",
		CPU:    &local.ResourceRecommendation{Target: "250m", Original: "2"},
		Memory: &local.ResourceRecommendation{Target: "300Mi", Original: "2Gi"}}}}
	got := originalOf(pod(rec.Encode()))["app"]
	if got.Requests.CPU != 2 || got.Requests.Memory != 2<<30 {
		t.Fatalf("from the annotation: %+v", got)
	}
	for _, ann := range []string{"", "{not json", `{"containers":[{"name":"app","cpu":{"target":"1","original":"x"},"memory":{"target":"1Mi","original":"1Mi"}}]}`} {
		got := originalOf(pod(ann))["app"]
		if got.Requests.CPU != 0.25 || got.Requests.Memory != 300<<20 {
			t.Fatalf("annotation %q: %+v, want the spec's", ann, got)
		}
	}
}

func rlist(cpu, mem string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
}
