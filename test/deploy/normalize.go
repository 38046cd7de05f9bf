package deploy

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// HelmOnlyLabels are the labels the chart adds for Helm's bookkeeping;
// kustomize has no equivalent. Normalize drops exactly these.
var HelmOnlyLabels = []string{"app.kubernetes.io/managed-by", "helm.sh/chart"}

// ChecksumAnnotation on the chart's pod template rolls the DaemonSet when
// its config changes (the kustomize base's ConfigMap has a fixed name and
// needs a rollout restart instead). Normalize drops it.
const ChecksumAnnotation = "checksum/config"

// Normalize returns each object, keyed by Key, with what differs only by
// the tool that rendered it removed, and lists whose order carries no
// meaning sorted:
//   - HelmOnlyLabels and ChecksumAnnotation;
//   - ConfigMap data named *.yaml parsed into values (comments, quoting and
//     key order are not content);
//   - a pod template's volumes and each container's volumeMounts, env,
//     ports and args (the kubelet and the agent's flag parser take them in
//     any order; the contract test checks flags are not repeated).
//
// Two objects are the same when their normalised forms are DeepEqual.
func Normalize(objs []*unstructured.Unstructured) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	for _, o := range objs {
		c := o.DeepCopy()
		k := Key(c)
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%w: %s rendered twice", ErrRender, k)
		}
		dropKeys(c.Object, []string{"metadata", "labels"}, HelmOnlyLabels)
		if c.GetKind() == "ConfigMap" {
			data, _, _ := unstructured.NestedStringMap(c.Object, "data")
			for name, v := range data {
				if !strings.HasSuffix(name, ".yaml") {
					continue
				}
				var parsed any
				if err := yaml.Unmarshal([]byte(v), &parsed); err != nil {
					return nil, fmt.Errorf("%w: %s data %s: %v", ErrRender, k, name, err)
				}
				if err := unstructured.SetNestedField(c.Object, parsed, "data", name); err != nil {
					return nil, fmt.Errorf("%w: %s data %s: %v", ErrRender, k, name, err)
				}
			}
		}
		if tmpl, ok, _ := unstructured.NestedMap(c.Object, "spec", "template"); ok {
			dropKeys(tmpl, []string{"metadata", "annotations"}, []string{ChecksumAnnotation})
			dropKeys(tmpl, []string{"metadata", "labels"}, HelmOnlyLabels)
			if spec, ok := tmpl["spec"].(map[string]any); ok {
				sortBy(spec, "volumes", "name")
				for _, field := range []string{"containers", "initContainers"} {
					cs, _ := spec[field].([]any)
					for _, ci := range cs {
						if ctr, ok := ci.(map[string]any); ok {
							sortBy(ctr, "volumeMounts", "mountPath")
							sortBy(ctr, "env", "name")
							sortBy(ctr, "ports", "containerPort")
							if args, ok := ctr["args"].([]any); ok {
								sort.Slice(args, func(i, j int) bool { return fmt.Sprint(args[i]) < fmt.Sprint(args[j]) })
							}
						}
					}
				}
			}
			if err := unstructured.SetNestedMap(c.Object, tmpl, "spec", "template"); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrRender, k, err)
			}
		}
		out[k] = c.Object
	}
	return out, nil
}

// dropKeys deletes keys from the map at path in m, and the map itself when
// that leaves it empty.
func dropKeys(m map[string]any, path []string, keys []string) {
	parent := m
	for _, p := range path[:len(path)-1] {
		next, ok := parent[p].(map[string]any)
		if !ok {
			return
		}
		parent = next
	}
	last := path[len(path)-1]
	target, ok := parent[last].(map[string]any)
	if !ok {
		return
	}
	for _, k := range keys {
		delete(target, k)
	}
	if len(target) == 0 {
		delete(parent, last)
	}
}

// sortBy sorts the list m[field] of maps by their key field.
func sortBy(m map[string]any, field, key string) {
	l, ok := m[field].([]any)
	if !ok {
		return
	}
	sort.SliceStable(l, func(i, j int) bool {
		a, _ := l[i].(map[string]any)
		b, _ := l[j].(map[string]any)
		return fmt.Sprint(a[key]) < fmt.Sprint(b[key])
	})
}

// Diff describes the first differences between two normalised renders:
// objects only in one, and for objects in both the first differing field.
// Empty when they are equal.
func Diff(aName string, a map[string]map[string]any, bName string, b map[string]map[string]any) string {
	var lines []string
	for _, k := range unionKeys(a, b) {
		x, inA := a[k]
		y, inB := b[k]
		switch {
		case !inB:
			lines = append(lines, fmt.Sprintf("%s: only in %s", k, aName))
		case !inA:
			lines = append(lines, fmt.Sprintf("%s: only in %s", k, bName))
		default:
			if d := firstDiff(x, y, ""); d != "" {
				lines = append(lines, fmt.Sprintf("%s: %s (%s vs %s)", k, d, aName, bName))
			}
		}
	}
	return strings.Join(lines, "\n")
}

func firstDiff(a, b any, path string) string {
	if reflect.DeepEqual(a, b) {
		return ""
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		for _, k := range unionKeys(am, bm) {
			if d := firstDiff(am[k], bm[k], path+"."+k); d != "" {
				return d
			}
		}
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		for i := range al {
			if d := firstDiff(al[i], bl[i], fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
	}
	return fmt.Sprintf("%s: %s vs %s", strings.TrimPrefix(path, "."), brief(a), brief(b))
}

// unionKeys returns the keys of a and b, sorted.
func unionKeys[V any](a, b map[string]V) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range []map[string]V{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

func brief(v any) string {
	if v == nil {
		return "<absent>"
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return strings.ReplaceAll(s, "\n", " ⏎ ")
}
