package kube

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgpilot/cgpilot/api/v1alpha1"
)

// TestInfoReadsThePolicyAsAgentsDo: preset, step, minHistory and the
// per-resource bounds reach the merged recommendation, so that it rests
// on the history the policy asks, as the agents' own do.
func TestInfoReadsThePolicyAsAgentsDo(t *testing.T) {
	minCPU, maxMem := resource.MustParse("100m"), resource.MustParse("1Gi")
	p := &v1alpha1.RightsizePolicy{Spec: v1alpha1.RightsizePolicySpec{Preset: "cgpilot-slo",
		Step: &metav1.Duration{Duration: 20 * time.Second}, MinHistory: &metav1.Duration{Duration: 30 * time.Second},
		CPU: &v1alpha1.ResourcePolicy{MinAllowed: &minCPU}, Memory: &v1alpha1.ResourcePolicy{MaxAllowed: &maxMem}}}
	pi := Info(p)
	if pi.Preset != "cgpilot-slo" || pi.Step != 20*time.Second {
		t.Fatalf("preset %q step %v", pi.Preset, pi.Step)
	}
	if pi.Overrides.MinHistory == nil || time.Duration(*pi.Overrides.MinHistory) != 30*time.Second {
		t.Fatalf("minHistory %v, want 30s", pi.Overrides.MinHistory)
	}
	if c, m := pi.Overrides.CPU.MinAllowed, pi.Overrides.Memory.MaxAllowed; c == nil || *c != 0.1 || m == nil || *m != 1<<30 {
		t.Fatalf("bounds cpu min %v memory max %v", c, m)
	}
	p.Spec.MinHistory = nil
	if pi := Info(p); pi.Overrides.MinHistory != nil {
		t.Fatalf("no minHistory in the spec: %v, want the preset's", *pi.Overrides.MinHistory)
	}
}
