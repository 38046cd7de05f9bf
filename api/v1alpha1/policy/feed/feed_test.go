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
