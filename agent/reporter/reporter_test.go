//go:build linux

package reporter

import (
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/agent/rightsize"
	"github.com/cgpilot/cgpilot/api/report"
)

// TestMergedForFreshness: a merged recommendation is used until its
// FreshUntil, never after, and never without both targets.
func TestMergedForFreshness(t *testing.T) {
	now := time.Now()
	key := report.Key{Workload: report.Workload{Namespace: "ns", Kind: "Deployment", Name: "web"}, Container: "app"}
	rp := &Reporter{sampleInterval: 10 * time.Second}
	if rp.MergedFor(key.String(), now) != nil {
		t.Fatal("merged before any fetch")
	}
	w := &report.WorkloadRecommendation{Key: key, Preset: "cgpilot-balanced", Nodes: 3, Samples: 360, FreshUntil: now.Add(time.Minute),
		Recommendation: report.Recommendation{CPU: report.Estimate{Target: 0.5}, Memory: report.Estimate{Target: 1 << 28}}}
	noMem := *w
	noMem.Key.Container = "side"
	noMem.Memory.Target = 0
	rp.merged.Store(&mergedIndex{byKey: map[string]*report.WorkloadRecommendation{key.String(): w, noMem.Key.String(): &noMem}})
	m := rp.MergedFor(key.String(), now)
	if m == nil || m.CPU.Target != 0.5 || m.Nodes != 3 || m.History != time.Hour || m.Preset != "cgpilot-balanced" {
		t.Fatalf("fresh: %+v", m)
	}
	if rp.MergedFor(key.String(), now.Add(time.Minute)) != nil {
		t.Fatal("used at its FreshUntil")
	}
	if rp.MergedFor(noMem.Key.String(), now) != nil {
		t.Fatal("used without a memory target")
	}
	var off *Reporter
	if off.MergedFor(key.String(), now) != nil {
		t.Fatal("a nil reporter (aggregator off) has merged recommendations")
	}
}

func TestAdjustability(t *testing.T) {
	for _, tc := range []struct {
		state, policy string
		ok            bool
		reason        string
	}{
		{rightsize.StateResize, "web", true, ""},
		{rightsize.StateDryRun, "web", true, ""},
		{rightsize.StateConflict, "", false, "MatchedByTwoPolicies"},
		{rightsize.StateNotAdjustable, "web", false, "BestEffort"},
		{rightsize.StateOff, "", false, "NoPolicy"},
		{rightsize.StateOff, "web", false, "ModeOff"},
	} {
		ok, reason := adjustability(rightsize.Pod{QoS: "BestEffort"}, rightsize.Decision{State: tc.state, Policy: tc.policy})
		if ok != tc.ok || reason != tc.reason {
			t.Errorf("%s/%s: %v %q, want %v %q", tc.state, tc.policy, ok, reason, tc.ok, tc.reason)
		}
	}
}
