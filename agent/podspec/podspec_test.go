package podspec

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/cgpilot/cgpilot/cgroup"
)

func TestKey(t *testing.T) {
	for _, tc := range []struct{ ns, name, want string }{
		{"shop", "web-1", "shop/web-1"},
		{"", "web-1", "web-1"}, // client-go's object name: no leading slash
	} {
		if got := Key(tc.ns, tc.name); got != tc.want {
			t.Errorf("Key(%q, %q) = %q, want %q", tc.ns, tc.name, got, tc.want)
		}
	}
}

// TestRequirementsSaturate: amounts from a spec are whole millicores and
// bytes, saturated (CPU at MaxMilli, memory at a petabyte), and negative
// or absent amounts are none.
func TestRequirementsSaturate(t *testing.T) {
	q := resource.MustParse
	for _, tc := range []struct {
		name               string
		cpu, mem           string
		wantCPU, wantBytes float64
	}{
		{"plain", "250m", "300Mi", 0.25, 300 << 20},
		{"sub-millicore rounds up", "1.5u", "1", 0.001, 1},
		{"huge CPU saturates", "9223372036854775807", "1Gi", MaxMilli / 1000, 1 << 30},
		{"exponent CPU saturates", "1e20", "1Gi", MaxMilli / 1000, 1 << 30},
		{"huge memory saturates", "1", "100Ei", 1, 1 << 50},
		{"negative is none", "-2", "-1Gi", 0, 0},
	} {
		l := corev1.ResourceList{corev1.ResourceCPU: q(tc.cpu), corev1.ResourceMemory: q(tc.mem)}
		req, lim := Requirements(corev1.ResourceRequirements{Requests: l, Limits: l})
		if req.CPU != tc.wantCPU || req.Memory != tc.wantBytes || req != lim {
			t.Errorf("%s: requests %+v limits %+v, want cpu %v memory %v", tc.name, req, lim, tc.wantCPU, tc.wantBytes)
		}
	}
	if req, lim := Requirements(corev1.ResourceRequirements{}); req.CPU != 0 || req.Memory != 0 || lim.CPU != 0 || lim.Memory != 0 {
		t.Errorf("no resources: %+v %+v", req, lim)
	}
}

// TestQoSCountsInitContainers: an init container without limits makes a
// pod whose app containers are Guaranteed Burstable, as the kubelet says.
func TestQoSCountsInitContainers(t *testing.T) {
	r := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: r, Limits: r}}}}}
	if got := QoS(p); got != cgroup.QoSGuaranteed {
		t.Fatalf("requests = limits: %s", got)
	}
	p.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: r}}}
	if got := QoS(p); got != cgroup.QoSBurstable {
		t.Fatalf("with an init container without limits: %s, want Burstable", got)
	}
}
