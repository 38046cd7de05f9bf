package policy

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/recommend"
)

// compile.go: from the API object to a Policy.

// Decode reads a RightsizePolicy from an informer's unstructured object.
// The object is returned even when it does not decode in full (its name,
// generation and status, for reporting), with the error.
func Decode(u *unstructured.Unstructured) (*v1alpha1.RightsizePolicy, error) {
	var rp v1alpha1.RightsizePolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rp); err != nil {
		bare := &v1alpha1.RightsizePolicy{}
		bare.Name, bare.Generation, bare.ResourceVersion = u.GetName(), u.GetGeneration(), u.GetResourceVersion()
		return bare, fmt.Errorf("%w: %s: %v", ErrInvalidPolicy, u.GetName(), err)
	}
	return &rp, nil
}

// Compile converts a RightsizePolicy: selectors parsed, quantities in
// cores and bytes (CPUCores, MemoryBytes), durations, cron windows,
// defaults filled (the CRD's, for an object that did not come through
// the API server), then Check. The error wraps ErrInvalidPolicy and names
// the field. rp is kept as the Policy's Source and must not change.
func Compile(rp *v1alpha1.RightsizePolicy) (*Policy, error) {
	bad := func(field string, err error) (*Policy, error) {
		return nil, fmt.Errorf("%w: %s: %s: %v", ErrInvalidPolicy, rp.Name, field, err)
	}
	s := rp.Spec
	p := &Policy{Name: rp.Name, Generation: rp.Generation, Mode: Mode(s.Mode), Preset: s.Preset, OOMFactor: s.OOMFactor,
		Limits: Limits(s.Limits), MinHistory: DefaultMinHistory, AllowPodModeOverride: s.AllowPodModeOverride,
		MaxOOMBumpsPerDay: v1alpha1.DefaultMaxOOMBumpsPerDay, Source: rp}
	var err error
	if p.nsSel, p.nsKeys, err = selector(s.NamespaceSelector); err != nil {
		return bad("namespaceSelector", err)
	}
	if p.podSel, _, err = selector(s.PodSelector); err != nil {
		return bad("podSelector", err)
	}
	if s.MaxChangePerStep != nil {
		p.MaxChangePerStep = *s.MaxChangePerStep
	}
	if s.Step != nil {
		p.Step = s.Step.Duration
	}
	if s.MinHistory != nil {
		p.MinHistory = s.MinHistory.Duration
	}
	if s.PausedUntil != nil {
		p.PausedUntil = s.PausedUntil.Time
	}
	if b := s.PodTargetSaturation; b != nil {
		p.PodTargetSaturation = Range{Min: b.Min, Max: b.Max}
		if b.Min == 0 {
			p.PodTargetSaturation.Min = v1alpha1.DefaultPodTargetSaturationMin
		}
		if b.Max == 0 {
			p.PodTargetSaturation.Max = v1alpha1.DefaultPodTargetSaturationMax
		}
	}
	if s.MaxOOMBumpsPerDay != nil {
		p.MaxOOMBumpsPerDay = int(*s.MaxOOMBumpsPerDay)
	}
	for i, w := range s.AvoidWindows {
		win, err := ParseWindow(w.Schedule, w.Duration.Duration)
		if err != nil {
			return bad(fmt.Sprintf("avoidWindows[%d]", i), err)
		}
		p.Avoid = append(p.Avoid, win)
	}
	p.Overrides.CPU = resourceOverrides(s.CPU, CPUCores)
	p.Overrides.Memory = resourceOverrides(s.Memory, MemoryBytes)
	p.Overrides.ResizeBudget = s.ResizesPerDay
	if err := p.Check(); err != nil {
		return nil, err
	}
	return p, nil
}

func resourceOverrides(rp *v1alpha1.ResourcePolicy, amount func(resource.Quantity) float64) recommend.ResourceOverrides {
	var o recommend.ResourceOverrides
	if rp == nil {
		return o
	}
	o.TargetSaturation, o.Percentile = rp.TargetSaturation, rp.Percentile
	if rp.MinAllowed != nil {
		v := amount(*rp.MinAllowed)
		o.MinAllowed = &v
	}
	if rp.MaxAllowed != nil {
		v := amount(*rp.MaxAllowed)
		o.MaxAllowed = &v
	}
	return o
}

// selector parses a label selector (nil: everything) and lists the keys
// it reads, sorted.
func selector(s *metav1.LabelSelector) (labels.Selector, []string, error) {
	if s == nil {
		return labels.Everything(), nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{}
	for k := range s.MatchLabels {
		seen[k] = true
	}
	for _, e := range s.MatchExpressions {
		seen[e.Key] = true
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return sel, keys, nil
}
