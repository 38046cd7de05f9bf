package policy

import (
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func object(t testing.TB, name, rv, spec string) *unstructured.Unstructured {
	t.Helper()
	var s map[string]any
	if err := yaml.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cgpilot.io/v1alpha1", "kind": "RightsizePolicy",
		"metadata": map[string]any{"name": name, "resourceVersion": rv}, "spec": s}}
}

// TestMatchUnknownNamespace: a namespace not cached yet is matched by
// its name label alone; a selector reading any other label is undecided.
// Before, the agent matched it with no labels at all (so a NotIn or
// DoesNotExist selector matched) and the aggregator with its name label
// (so it decided what it could not know), and the two could disagree.
func TestMatchUnknownNamespace(t *testing.T) {
	x := NewIndex()
	x.Upsert(object(t, "all", "1", `{mode: DryRun}`))
	x.Upsert(object(t, "by-name", "1", `{mode: DryRun, namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [shop]}]}}`))
	x.Upsert(object(t, "not-team", "1", `{mode: DryRun, namespaceSelector: {matchExpressions: [{key: team, operator: DoesNotExist}]}}`))
	x.Upsert(object(t, "team-web", "1", `{mode: DryRun, namespaceSelector: {matchLabels: {team: web}}, podSelector: {matchLabels: {app: web}}}`))
	x.Upsert(object(t, "broken", "1", `{mode: DryRun, podSelector: {matchLabels: {"a b": c}}}`))
	names := func(ps []*Policy) string {
		var s []string
		for _, p := range ps {
			s = append(s, p.Name)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		ns                 Namespace
		pod                map[string]string
		matched, undecided string
	}{
		{Namespace{Name: "shop"}, map[string]string{"app": "web"}, "all,by-name", "not-team,team-web"},
		{Namespace{Name: "other"}, map[string]string{"app": "db"}, "all", "not-team"},
		{Namespace{Name: "shop", Known: true, Labels: map[string]string{"team": "web"}}, map[string]string{"app": "web"}, "all,by-name,team-web", ""},
		{Namespace{Name: "shop", Known: true}, map[string]string{"app": "web"}, "all,by-name,not-team", ""},
		// A namespace object without its name label (a fake, an old
		// cluster) gets it.
		{Namespace{Name: "shop", Known: true, Labels: map[string]string{"team": "db"}}, nil, "all,by-name", ""},
	} {
		m, u := x.Match(tc.ns, tc.pod)
		if names(m) != tc.matched || strings.Join(u, ",") != tc.undecided {
			t.Errorf("%+v %v: matched %q undecided %q, want %q %q", tc.ns, tc.pod, names(m), u, tc.matched, tc.undecided)
		}
	}
	if e, ok := x.Get("broken"); !ok || e.Err == nil || e.Policy != nil {
		t.Errorf("broken: %+v", e)
	}
	if got := strings.Join(x.Presets(), ","); got != "cgpilot-balanced" {
		t.Errorf("presets %s", got)
	}
}

// TestIndexUpsert: the same resourceVersion is not compiled again, a new
// one is, and a delete forgets; concurrent readers see whole entries.
func TestIndexUpsert(t *testing.T) {
	x := NewIndex()
	a, _ := x.Upsert(object(t, "p", "1", `{mode: DryRun}`))
	if b, _ := x.Upsert(object(t, "p", "1", `{mode: InPlace}`)); b != a {
		t.Error("the same resourceVersion was compiled again")
	}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				if m, _ := x.Match(Namespace{Name: "n"}, nil); len(m) > 1 {
					t.Errorf("%d matched", len(m))
				}
			}
		}()
	}
	for j := 0; j < 200; j++ {
		x.Upsert(object(t, "p", string(rune('a'+j%20)), `{mode: InPlace}`))
	}
	wg.Wait()
	if e, _ := x.Get("p"); e.Policy.Mode != ModeInPlace {
		t.Errorf("mode %s", e.Policy.Mode)
	}
	x.Delete("p")
	if len(x.Entries()) != 0 {
		t.Error("delete kept the policy")
	}
}
