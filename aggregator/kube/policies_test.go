package kube

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
)

// TestInfoReadsThePolicyAsAgentsDo: preset, step, minHistory and the
// per-resource bounds reach the merged recommendation, so that it rests
// on the history the policy asks, as the agents' own do. A policy without
// minHistory means the CRD's default, 24h, as it does to the agents (the
// aggregator used to leave it to the preset's 1h).
func TestInfoReadsThePolicyAsAgentsDo(t *testing.T) {
	minCPU, maxMem := resource.MustParse("100m"), resource.MustParse("1Gi")
	rp := &v1alpha1.RightsizePolicy{Spec: v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeInPlace, Preset: "cgpilot-slo",
		Step: &metav1.Duration{Duration: 20 * time.Second}, MinHistory: &metav1.Duration{Duration: 30 * time.Second},
		CPU: &v1alpha1.ResourcePolicy{MinAllowed: &minCPU}, Memory: &v1alpha1.ResourcePolicy{MaxAllowed: &maxMem}}}
	p, err := policy.Compile(rp)
	if err != nil {
		t.Fatal(err)
	}
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
	rp.Spec.MinHistory = nil
	if p, err = policy.Compile(rp); err != nil {
		t.Fatal(err)
	}
	if pi := Info(p); pi.Overrides.MinHistory == nil || time.Duration(*pi.Overrides.MinHistory) != 24*time.Hour {
		t.Fatalf("no minHistory in the spec: %v, want the CRD's default 24h", pi.Overrides.MinHistory)
	}
}
