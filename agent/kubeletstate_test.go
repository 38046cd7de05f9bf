package agent

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestParseKubeletState(t *testing.T) {
	for _, tc := range []struct {
		name, in, taken string
		pods            int
		wantErr         bool
	}{
		{"none policy", `{"policyName":"none","defaultCpuSet":"","checksum":1}`, "", 0, false},
		{"static empty", `{"policyName":"static","defaultCpuSet":"0-7","checksum":1}`, "", 0, false},
		{"static two pods", `{"policyName":"static","defaultCpuSet":"0,5-7","entries":{"u1":{"app":"1-2"},"u2":{"db":"3","side":"4"}},"checksum":1}`, "1-4", 2, false},
		{"garbage", `{"policyName":`, "", 0, true},
		{"bad list", `{"policyName":"static","entries":{"u1":{"app":"x"}}}`, "", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ks, err := parseKubeletState("f", []byte(tc.in))
			if tc.wantErr {
				if !errors.Is(err, ErrKubeletState) || ks.Taken.Size() != 0 || len(ks.Pods) != 0 {
					t.Fatalf("want ErrKubeletState and nothing taken, got %v %+v", err, ks)
				}
				return
			}
			if err != nil || ks.Taken.String() != tc.taken || len(ks.Pods) != tc.pods {
				t.Fatalf("got %+v, %v", ks, err)
			}
		})
	}
	// A missing file (no static policy ever ran) is not an error.
	ks, err := readKubeletState(filepath.Join(t.TempDir(), "cpu_manager_state"))
	if err != nil || ks.Taken.Size() != 0 {
		t.Fatalf("missing file: %+v %v", ks, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "s"), []byte(`{"policyName":"static","entries":{"u":{"c":"2"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if ks, err := readKubeletState(filepath.Join(dir, "s")); err != nil || !ks.Pods["u"] {
		t.Fatalf("file: %+v %v", ks, err)
	}
}

func FuzzParseKubeletState(f *testing.F) {
	f.Add([]byte(`{"policyName":"static","entries":{"u1":{"app":"1-2"}}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ks, err := parseKubeletState("fuzz", b)
		if err != nil && (ks.Taken.Size() != 0 || len(ks.Pods) != 0) {
			t.Fatal("partial state with an error")
		}
	})
}

// TestKubeletMayOwn: a Guaranteed pod with an integer CPU request may hold
// cores of the kubelet's static CPU manager that the agent's view does
// not show yet; a fractional request, another QoS, a pod the view already
// shows, the none policy or no kubelet source never triggers a re-read.
func TestKubeletMayOwn(t *testing.T) {
	guaranteed := func(cpu string) *corev1.Pod {
		p := podWithCPU("a", "p", "u1", cpu, nil)
		r := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Mi")}
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: r, Limits: r}
		p.Status.QOSClass = corev1.PodQOSGuaranteed
		return p
	}
	burstable := guaranteed("2")
	burstable.Status.QOSClass = corev1.PodQOSBurstable
	cfg := DefaultConfig()
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		kubelet kubeletStatic
		noSrc   bool
		want    bool
	}{
		{"guaranteed, 2 cpus, unknown", guaranteed("2"), kubeletStatic{Policy: "podresources"}, false, true},
		{"guaranteed, 1500m", guaranteed("1500m"), kubeletStatic{Policy: "podresources"}, false, false},
		{"burstable", burstable, kubeletStatic{Policy: "podresources"}, false, false},
		{"already the kubelet's", guaranteed("2"), kubeletStatic{Policy: "static", Pods: map[string]bool{"u1": true}}, false, false},
		{"none policy", guaranteed("2"), kubeletStatic{Policy: "none"}, false, false},
		{"no kubelet source", guaranteed("2"), kubeletStatic{}, true, false},
	} {
		c := &controller{cfg: cfg, kubelet: tc.kubelet}
		if tc.noSrc {
			c.cfg.KubeletCPUManagerState = ""
		}
		if got := c.kubeletMayOwn(tc.pod); got != tc.want {
			t.Errorf("%s: kubeletMayOwn %v, want %v", tc.name, got, tc.want)
		}
	}
}
