//go:build linux

package deploy

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// withoutAdded returns objs with the agent container's
// securityContext.capabilities.add removed, and what it held (nil: none).
func withoutAdded(t *testing.T, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, []string) {
	t.Helper()
	out := make([]*unstructured.Unstructured, len(objs))
	var added []string
	for i, o := range objs {
		out[i] = o.DeepCopy()
		if o.GetKind() != "DaemonSet" || o.GetName() != AgentName {
			continue
		}
		ctrs, _, _ := unstructured.NestedSlice(out[i].Object, "spec", "template", "spec", "containers")
		if len(ctrs) != 1 {
			t.Fatalf("daemonset %s: %d containers, want 1", AgentName, len(ctrs))
		}
		c := ctrs[0].(map[string]any)
		add, found, err := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "add")
		if err != nil {
			t.Fatalf("capabilities.add: %v", err)
		}
		if found {
			added = add
			if add == nil {
				added = []string{}
			}
			unstructured.RemoveNestedField(c, "securityContext", "capabilities", "add")
		}
		if drop, _, _ := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "drop"); !slices.Equal(drop, []string{"ALL"}) {
			t.Errorf("capabilities.drop %v, want [ALL]", drop)
		}
		if err := unstructured.SetNestedSlice(out[i].Object, ctrs, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
	}
	return out, added
}

func normalized(t *testing.T, objs []*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	n, err := Normalize(objs)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEBPFOOMComponentAddsOnlyItsCapabilities: the ebpf-oom component
// changes one field of the base, and of the base with each other agent
// component: the agent container's capabilities.add, to exactly
// EBPFOOMCapabilities (drop stays [ALL]); without it nothing is added.
func TestEBPFOOMComponentAddsOnlyItsCapabilities(t *testing.T) {
	for _, others := range [][]string{nil, {ComponentCgroupV2}, {ComponentCgroupV1Systemd, ComponentMetrics}, {ComponentAggregator}} {
		t.Run(fmtComponents(others), func(t *testing.T) {
			off, added := withoutAdded(t, render(t, others...))
			if added != nil {
				t.Fatalf("without the component the agent adds capabilities %v, want none", added)
			}
			on, added := withoutAdded(t, render(t, append(slices.Clone(others), ComponentEBPFOOM)...))
			if !slices.Equal(added, EBPFOOMCapabilities) {
				t.Errorf("with the component capabilities.add is %v, want %v", added, EBPFOOMCapabilities)
			}
			if d := Diff("without", normalized(t, off), "with", normalized(t, on)); d != "" {
				t.Errorf("the component changes more than capabilities.add:\n%s", d)
			}
		})
	}
}

// TestHelmEBPFOOMAddsOnlyItsCapabilities: the chart's ebpfOOM.enabled
// (default false; false given explicitly renders the defaults) adds
// exactly EBPFOOMCapabilities and changes nothing else; the same as the
// component (TestHelmMatchesKustomize's ebpf-oom layouts).
func TestHelmEBPFOOMAddsOnlyItsCapabilities(t *testing.T) {
	helm := helmBinary(t)
	root := repoRoot(t)
	decode := func(values map[string]any) []*unstructured.Unstructured { return helmObjects(t, helm, root, values) }
	def, added := withoutAdded(t, decode(nil))
	if added != nil {
		t.Fatalf("the chart's defaults add capabilities %v, want none", added)
	}
	off, added := withoutAdded(t, decode(map[string]any{"ebpfOOM": map[string]any{"enabled": false}}))
	if added != nil {
		t.Errorf("ebpfOOM.enabled=false adds capabilities %v, want none", added)
	}
	if d := Diff("defaults", normalized(t, def), "ebpfOOM.enabled=false", normalized(t, off)); d != "" {
		t.Errorf("ebpfOOM.enabled=false differs from the defaults:\n%s", d)
	}
	on, added := withoutAdded(t, decode(map[string]any{"ebpfOOM": map[string]any{"enabled": true}}))
	if !slices.Equal(added, EBPFOOMCapabilities) {
		t.Errorf("ebpfOOM.enabled=true: capabilities.add %v, want %v", added, EBPFOOMCapabilities)
	}
	if d := Diff("defaults", normalized(t, def), "ebpfOOM.enabled=true", normalized(t, on)); d != "" {
		t.Errorf("ebpfOOM.enabled=true changes more than capabilities.add:\n%s", d)
	}
}

func fmtComponents(c []string) string {
	if len(c) == 0 {
		return "base"
	}
	s := c[0]
	for _, x := range c[1:] {
		s += "+" + x
	}
	return s
}
