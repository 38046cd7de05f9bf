package policy

import (
	"reflect"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/cgpilot/cgpilot/api/v1alpha1"
)

// index.go: the cluster's policies and which of them select a pod.

// NamespaceNameLabel is the label the API server puts on every namespace,
// its name (corev1.LabelMetadataName).
const NamespaceNameLabel = "kubernetes.io/metadata.name"

// Namespace is what resolution knows of a pod's namespace.
type Namespace struct {
	Name   string
	Labels map[string]string
	// Known is false while the namespace is not in the caller's cache (a
	// namespace created a moment ago): then only its name is known, and
	// a policy whose namespaceSelector reads any other label is
	// undecided, never guessed.
	Known bool
}

// Entry is one policy of an Index: compiled, or why it is not.
type Entry struct {
	Name string
	// Object is the policy as decoded (only its name and generation when
	// it did not decode).
	Object *v1alpha1.RightsizePolicy
	// Policy is nil when Err is set.
	Policy *Policy
	Err    error
}

// Index holds the cluster's policies, compiled once per change; it is
// safe for concurrent use. Callers feed it from their informers (Upsert,
// Delete) and ask it which policies select a pod (Match).
type Index struct {
	mu     sync.RWMutex
	byName map[string]*Entry
}

// NewIndex returns an empty Index.
func NewIndex() *Index { return &Index{byName: map[string]*Entry{}} }

// Upsert compiles an informer's object and keeps it under its name; an
// object whose resourceVersion did not change is not compiled again. It
// returns the entry, and whether what the policy selects and asks
// changed (sameRules): an update of its status or metadata, or a resync,
// changes nothing.
func (x *Index) Upsert(u *unstructured.Unstructured) (*Entry, bool) {
	name, rv := u.GetName(), u.GetResourceVersion()
	x.mu.RLock()
	old := x.byName[name]
	x.mu.RUnlock()
	if old != nil && rv != "" && old.Object.ResourceVersion == rv {
		return old, false
	}
	e := &Entry{Name: name}
	e.Object, e.Err = Decode(u)
	if e.Err == nil {
		e.Policy, e.Err = Compile(e.Object)
	}
	x.mu.Lock()
	x.byName[name] = e
	x.mu.Unlock()
	return e, !sameRules(old, e)
}

// sameRules says whether entries a and b (nil: none) select and size pods
// alike: the same generation, spec and compile error. A policy's status
// and metadata change none of them.
func sameRules(a, b *Entry) bool {
	if a == nil || b == nil {
		return a == b
	}
	if (a.Err == nil) != (b.Err == nil) || (a.Err != nil && a.Err.Error() != b.Err.Error()) {
		return false
	}
	return a.Object.Generation == b.Object.Generation && reflect.DeepEqual(a.Object.Spec, b.Object.Spec)
}

// Delete forgets the named policy.
func (x *Index) Delete(name string) {
	x.mu.Lock()
	delete(x.byName, name)
	x.mu.Unlock()
}

// Get returns the named policy's entry.
func (x *Index) Get(name string) (*Entry, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e, ok := x.byName[name]
	return e, ok
}

// Entries returns every entry, valid or not, sorted by name.
func (x *Index) Entries() []*Entry {
	x.mu.RLock()
	out := make([]*Entry, 0, len(x.byName))
	for _, e := range x.byName {
		out = append(out, e)
	}
	x.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Presets lists the presets the valid policies name, sorted.
func (x *Index) Presets() []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range x.Entries() {
		if e.Policy != nil && !seen[e.Policy.Preset] {
			seen[e.Policy.Preset] = true
			out = append(out, e.Policy.Preset)
		}
	}
	sort.Strings(out)
	return out
}

// Match returns the valid policies that select a pod with podLabels in
// ns, sorted by name, and the names of those it cannot decide (ns not
// known and the namespaceSelector reads more than its name).
func (x *Index) Match(ns Namespace, podLabels map[string]string) (matched []*Policy, undecided []string) {
	for _, e := range x.Entries() {
		if e.Policy == nil {
			continue
		}
		switch e.Policy.Selects(ns, podLabels) {
		case Yes:
			matched = append(matched, e.Policy)
		case Undecided:
			undecided = append(undecided, e.Name)
		}
	}
	return matched, undecided
}

// Decision is whether a policy selects a pod.
type Decision int

const (
	No Decision = iota
	Yes
	Undecided
)

// Selects says whether p selects a pod with podLabels in ns. A namespace
// always carries its name label (the API server sets it; a cache or fake
// without it gets it here); an unknown namespace carries only that.
func (p *Policy) Selects(ns Namespace, podLabels map[string]string) Decision {
	if p.podSel != nil && !p.podSel.Matches(labels.Set(podLabels)) {
		return No
	}
	if p.nsSel == nil || p.nsSel.Empty() {
		return Yes
	}
	if !ns.Known {
		for _, k := range p.nsKeys {
			if k != NamespaceNameLabel {
				return Undecided
			}
		}
	}
	set := make(labels.Set, len(ns.Labels)+1)
	for k, v := range ns.Labels {
		set[k] = v
	}
	if _, ok := set[NamespaceNameLabel]; !ok {
		set[NamespaceNameLabel] = ns.Name
	}
	if p.nsSel.Matches(set) {
		return Yes
	}
	return No
}
