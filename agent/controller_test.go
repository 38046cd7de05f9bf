package agent

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgpilot/cgpilot/agent/podspec"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
)

func podWithCPU(ns, name, uid, limit string, ann map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Annotations: ann}}
	c := corev1.Container{Name: "c"}
	if limit != "" {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limit)}
	}
	p.Spec.Containers = []corev1.Container{c}
	return p
}

func TestCPUDemandAndQoS(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		demand int64
		qos    cgroup.QoS
	}{
		{"limit in millicores", podWithCPU("a", "p", "u", "1500m", nil), 1500, cgroup.QoSBurstable},
		{"no resources", podWithCPU("a", "p", "u", "", nil), 0, cgroup.QoSBestEffort},
		{"absurd limit saturates", podWithCPU("a", "p", "u", "9223372036854775807", nil), podspec.MaxMilli, cgroup.QoSBurstable},
		{"exponent limit saturates", podWithCPU("a", "p", "u", "1e18", nil), podspec.MaxMilli, cgroup.QoSBurstable},
		{"negative limit counts as none", podWithCPU("a", "p", "u", "-2", nil), 0, cgroup.QoSBurstable},
	} {
		if got := cpuDemandMilli(tc.pod); got != tc.demand {
			t.Errorf("%s: demand %d, want %d", tc.name, got, tc.demand)
		}
		if got := podspec.QoS(tc.pod); got != tc.qos {
			t.Errorf("%s: qos %s, want %s", tc.name, got, tc.qos)
		}
	}
	g := podWithCPU("a", "p", "u", "2", nil)
	r := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	g.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: r, Limits: r}
	g.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("1Gi")}, Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}
	if cpuDemandMilli(g) != 3000 || podspec.QoS(g) != cgroup.QoSGuaranteed {
		t.Errorf("guaranteed with larger init: demand %d qos %s", cpuDemandMilli(g), podspec.QoS(g))
	}
	g.Status.QOSClass = corev1.PodQOSBurstable // the kubelet's word wins
	if podspec.QoS(g) != cgroup.QoSBurstable {
		t.Error("status QoS class ignored")
	}
}

// TestPoolPodOfHostileSpec: a pod whose spec once crashed the agent (a CPU
// limit that overflowed the demand arithmetic, a 256 KiB annotation) is
// converted without a panic, with a bounded demand and a refusal.
func TestPoolPodOfHostileSpec(t *testing.T) {
	c := &controller{cfg: DefaultConfig()}
	p := podWithCPU("a", "p", "u", "9223372036854775807", map[string]string{
		local.AnnotationCPUPool: "exclusive", local.AnnotationCPUSet: strings.Repeat("0-8191,", (256<<10)/7),
	})
	p.Spec.Containers = append(p.Spec.Containers, p.Spec.Containers[0], p.Spec.Containers[0])
	info := c.poolPod(p, false)
	if info.DemandMilli != podspec.MaxMilli || info.DemandCPUs != podspec.MaxMilli/1000 {
		t.Fatalf("demand %d milli, %d cpus; want saturated at %d", info.DemandMilli, info.DemandCPUs, podspec.MaxMilli)
	}
	if !errors.Is(info.ReqErr, local.ErrInvalidAnnotation) {
		t.Fatalf("hostile annotation accepted: %v", info.ReqErr)
	}
}
