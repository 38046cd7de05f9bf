package feed

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
)

func object(name, rv, mode string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cgpilot.io/v1alpha1", "kind": "RightsizePolicy",
		"metadata": map[string]any{"name": name, "resourceVersion": rv}, "spec": map[string]any{"mode": mode}}}
}

// TestHandler: adds and updates are compiled in, a deletion and a
// tombstone's deletion remove, changed runs after each, and an object of
// another type changes nothing.
func TestHandler(t *testing.T) {
	idx := policy.NewIndex()
	changes := 0
	h := Handler(idx, func() { changes++ })
	h.OnAdd(object("a", "1", "DryRun"), false)
	h.OnAdd(object("b", "1", "DryRun"), false)
	h.OnUpdate(nil, object("a", "2", "InPlace"))
	if e, ok := idx.Get("a"); !ok || e.Object.ResourceVersion != "2" {
		t.Fatalf("a after update: %+v, %v", e, ok)
	}
	h.OnDelete(object("a", "2", "InPlace"))
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "b", Obj: object("b", "1", "DryRun")})
	h.OnAdd("not a policy", false)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "c", Obj: "not a policy"})
	for _, n := range []string{"a", "b"} {
		if _, ok := idx.Get(n); ok {
			t.Errorf("%s still indexed after its deletion", n)
		}
	}
	if changes != 5 {
		t.Errorf("changed ran %d times, want 5", changes)
	}
	// A nil changed is allowed (the aggregator's).
	Handler(idx, nil).OnAdd(object("d", "1", "DryRun"), false)
	if _, ok := idx.Get("d"); !ok {
		t.Error("d not indexed with a nil changed")
	}
}

// TestHandlerStatusIsNoChange: an update of a policy's status (every
// node's agent writes its entry) or metadata, or a resync, is indexed
// (the status is read for the totals) but is no change; a new generation
// or spec, or a policy that stops or starts compiling, is.
func TestHandlerStatusIsNoChange(t *testing.T) {
	idx := policy.NewIndex()
	changes := 0
	h := Handler(idx, func() { changes++ })
	obj := func(rv string, gen int64, mode string, status map[string]any) *unstructured.Unstructured {
		u := object("a", rv, mode)
		u.SetGeneration(gen)
		if status != nil {
			u.Object["status"] = status
		}
		return u
	}
	steps := []struct {
		name   string
		u      *unstructured.Unstructured
		change bool
	}{
		{"added", obj("1", 1, "DryRun", nil), true},
		{"resync", obj("1", 1, "DryRun", nil), false},
		{"a node's status entry", obj("2", 1, "DryRun", map[string]any{"matchedPods": int64(3), "nodes": []any{map[string]any{"node": "n1", "matchedPods": int64(3)}}}), false},
		{"a label", func() *unstructured.Unstructured {
			u := obj("3", 1, "DryRun", map[string]any{"matchedPods": int64(3)})
			u.SetLabels(map[string]string{"team": "web"})
			return u
		}(), false},
		{"the spec", obj("4", 2, "InPlace", map[string]any{"matchedPods": int64(3)}), true},
		{"a generation alone", obj("5", 3, "InPlace", nil), true},
		{"invalid", obj("6", 4, "Sometimes", nil), true},
		{"invalid, its status", obj("7", 4, "Sometimes", map[string]any{"matchedPods": int64(0)}), false},
		{"valid again", obj("8", 5, "InPlace", nil), true},
	}
	for _, s := range steps {
		before := changes
		h.OnUpdate(nil, s.u)
		if got := changes > before; got != s.change {
			t.Errorf("%s: changed ran %v, want %v", s.name, got, s.change)
		}
		if e, ok := idx.Get("a"); !ok || e.Object.ResourceVersion != s.u.GetResourceVersion() {
			t.Errorf("%s: not indexed: %+v", s.name, e)
		}
	}
	if e, _ := idx.Get("a"); e.Err != nil {
		t.Errorf("valid again: %v", e.Err)
	}
}
