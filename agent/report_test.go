//go:build linux

package agent

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgpilot/cgpilot/agent/rightsize"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
)

func TestReportKey(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"ns/Deployment/web/app", true},
		{"ns/Pod/web-1/app", true},
		{"ns/Deployment/web", false},
		{"ns//web/app", false},
		{"", false},
	} {
		k, ok := reportKey(tc.in)
		if ok != tc.ok || (ok && k.String() != tc.in) {
			t.Errorf("reportKey(%q) = %v %v", tc.in, k, ok)
		}
	}
}

// TestMergedForFreshness: a merged recommendation is used until its
// FreshUntil, never after, and never without both targets.
func TestMergedForFreshness(t *testing.T) {
	now := time.Now()
	key := report.Key{Workload: report.Workload{Namespace: "ns", Kind: "Deployment", Name: "web"}, Container: "app"}
	rp := &reporter{sampleInterval: 10 * time.Second}
	if rp.mergedFor(key.String(), now) != nil {
		t.Fatal("merged before any fetch")
	}
	w := &report.WorkloadRecommendation{Key: key, Preset: "cgpilot-balanced", Nodes: 3, Samples: 360, FreshUntil: now.Add(time.Minute),
		Recommendation: report.Recommendation{CPU: report.Estimate{Target: 0.5}, Memory: report.Estimate{Target: 1 << 28}}}
	noMem := *w
	noMem.Key.Container = "side"
	noMem.Memory.Target = 0
	rp.merged.Store(&mergedIndex{byKey: map[string]*report.WorkloadRecommendation{key.String(): w, noMem.Key.String(): &noMem}})
	m := rp.mergedFor(key.String(), now)
	if m == nil || m.CPU.Target != 0.5 || m.Nodes != 3 || m.History != time.Hour || m.Preset != "cgpilot-balanced" {
		t.Fatalf("fresh: %+v", m)
	}
	if rp.mergedFor(key.String(), now.Add(time.Minute)) != nil {
		t.Fatal("used at its FreshUntil")
	}
	if rp.mergedFor(noMem.Key.String(), now) != nil {
		t.Fatal("used without a memory target")
	}
	var off *reporter
	if off.mergedFor(key.String(), now) != nil {
		t.Fatal("a nil reporter (aggregator off) has merged recommendations")
	}
}

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

func rlist(cpu, mem string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
}
