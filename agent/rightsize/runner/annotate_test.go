package runner

import (
	"encoding/json"
	"testing"

	local "github.com/cgpilot/cgpilot/api/local"
)

// TestOnlyExplanationsDiffer: an annotation is rewritten when anything but
// its explanations changed (each write is a kubelet sync of the pod), and
// the value compared is never edited in place.
func TestOnlyExplanationsDiffer(t *testing.T) {
	base := func() local.Recommendation {
		return local.Recommendation{Policy: "web", Preset: "cgpilot-balanced", Mode: "InPlace", State: "Applied", Reason: "applied",
			Containers: []local.ContainerRecommendation{{Name: "app",
				CPU:    &local.ResourceRecommendation{Target: "100m", Lower: "100m", Upper: "200m", Request: "100m", Explain: "p50, 166 samples"},
				Memory: &local.ResourceRecommendation{Target: "100Mi", Lower: "100Mi", Upper: "200Mi", Request: "100Mi", Explain: "p50, 166 samples"}}}}
	}
	edit := func(f func(*local.Recommendation)) string {
		r := base()
		f(&r)
		return r.Encode()
	}
	current := base().Encode()
	for _, tc := range []struct {
		name  string
		value string
		want  bool
	}{
		{"identical", current, true},
		{"cpu explanation", edit(func(r *local.Recommendation) { r.Containers[0].CPU.Explain = "p50, 167 samples" }), true},
		{"both explanations", edit(func(r *local.Recommendation) {
			r.Containers[0].CPU.Explain, r.Containers[0].Memory.Explain = "x", "y"
		}), true},
		{"target", edit(func(r *local.Recommendation) { r.Containers[0].CPU.Target = "150m" }), false},
		{"upper bound", edit(func(r *local.Recommendation) { r.Containers[0].Memory.Upper = "300Mi" }), false},
		{"state", edit(func(r *local.Recommendation) { r.State = "Resized" }), false},
		{"source", edit(func(r *local.Recommendation) { r.Containers[0].Source, r.Containers[0].Nodes = "aggregator", 1 }), false},
		{"a container more", edit(func(r *local.Recommendation) {
			r.Containers = append(r.Containers, local.ContainerRecommendation{Name: "side"})
		}), false},
		{"memory gone", edit(func(r *local.Recommendation) { r.Containers[0].Memory = nil }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec local.Recommendation
			if err := json.Unmarshal([]byte(tc.value), &rec); err != nil {
				t.Fatal(err)
			}
			if got := onlyExplanationsDiffer(rec, tc.value, current); got != tc.want {
				t.Errorf("onlyExplanationsDiffer = %v, want %v\nvalue   %s\ncurrent %s", got, tc.want, tc.value, current)
			}
		})
	}
	for _, cur := range []string{"", "{", "not json"} {
		if onlyExplanationsDiffer(base(), current, cur) {
			t.Errorf("an unreadable annotation %q counted as the same", cur)
		}
	}
	// The comparison leaves the value it encoded untouched.
	r := base()
	_ = withoutExplanations(r)
	if r.Containers[0].CPU.Explain == "" || r.Containers[0].Memory.Explain == "" {
		t.Error("withoutExplanations cleared the caller's explanations")
	}
}
