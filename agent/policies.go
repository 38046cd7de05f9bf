package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/agent/kube"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/internal/loop"
	"github.com/cgpilot/cgpilot/recommend"
)

// policies.go: the RightsizePolicies of the cluster and which of them
// select a pod (namespaceSelector against the namespace's labels,
// podSelector against the pod's).

var rightsizeGVR = v1alpha1.SchemeGroupVersion.WithResource("rightsizepolicies")

// compiledPolicy is one RightsizePolicy ready to match and act on; err is
// what the agent could not accept of it (reported in its status).
type compiledPolicy struct {
	policy *rightsize.Policy
	nsSel  labels.Selector
	podSel labels.Selector
	err    error
	obj    *v1alpha1.RightsizePolicy
}

// policyIndex keeps the compiled policies, fed by a dynamic informer, and
// the namespaces' labels, fed by a namespace informer.
type policyIndex struct {
	mu         sync.RWMutex
	byName     map[string]*compiledPolicy
	namespaces cache.SharedIndexInformer // namespaces' metadata, for namespaceSelector
	informer   cache.SharedIndexInformer
	onChange   func()
}

// Its handlers run as iterations of the policy-informer loop of g.
func newPolicyIndex(kc kube.Interface, resync time.Duration, onChange func(), g *loop.Guard) (*policyIndex, error) {
	nsInf := cache.NewSharedIndexInformer(kc.Namespaces(), &metav1.PartialObjectMetadata{}, resync, nil)
	pi := &policyIndex{byName: map[string]*compiledPolicy{}, namespaces: nsInf, onChange: onChange}
	if _, err := nsInf.AddEventHandler(guardHandlers(g, loopPolicyEvents, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { pi.changed() },
		UpdateFunc: func(old, obj any) { pi.nsChanged(old, obj) },
		DeleteFunc: func(any) { pi.changed() },
	})); err != nil {
		return nil, err
	}
	policies := kc.Dynamic().Resource(rightsizeGVR)
	pi.informer = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return policies.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return policies.Watch(ctx, o)
		},
	}, kc.Dynamic()), &unstructured.Unstructured{}, resync, nil)
	if _, err := pi.informer.AddEventHandler(guardHandlers(g, loopPolicyEvents, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { pi.upsert(obj) },
		UpdateFunc: func(_, obj any) { pi.upsert(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				pi.mu.Lock()
				delete(pi.byName, u.GetName())
				pi.mu.Unlock()
				pi.changed()
			}
		},
	})); err != nil {
		return nil, err
	}
	return pi, nil
}

func (pi *policyIndex) changed() {
	if pi.onChange != nil {
		pi.onChange()
	}
}

// nsChanged reacts only to label changes: a namespace's status updates
// move no pod between policies.
func (pi *policyIndex) nsChanged(old, obj any) {
	o, _ := old.(metav1.Object)
	n, _ := obj.(metav1.Object)
	if o == nil || n == nil || !labels.Equals(o.GetLabels(), n.GetLabels()) {
		pi.changed()
	}
}

func (pi *policyIndex) upsert(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	var rp v1alpha1.RightsizePolicy
	cp := &compiledPolicy{obj: &rp}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rp); err != nil {
		rp.Name = u.GetName()
		cp.err = fmt.Errorf("%w: %s: %v", rightsize.ErrInvalidPolicy, u.GetName(), err)
	} else {
		cp.policy, cp.nsSel, cp.podSel, cp.err = compilePolicy(&rp)
	}
	pi.mu.Lock()
	pi.byName[rp.Name] = cp
	pi.mu.Unlock()
	pi.changed()
}

// compilePolicy converts the API object; the schema already refused most
// bad values, this catches what it cannot express (selectors, cron
// schedules, overrides the preset does not take).
func compilePolicy(rp *v1alpha1.RightsizePolicy) (*rightsize.Policy, labels.Selector, labels.Selector, error) {
	bad := func(field string, err error) (*rightsize.Policy, labels.Selector, labels.Selector, error) {
		return nil, nil, nil, fmt.Errorf("%w: %s: %s: %v", rightsize.ErrInvalidPolicy, rp.Name, field, err)
	}
	sel := func(s *metav1.LabelSelector) (labels.Selector, error) {
		if s == nil {
			return labels.Everything(), nil
		}
		return metav1.LabelSelectorAsSelector(s)
	}
	nsSel, err := sel(rp.Spec.NamespaceSelector)
	if err != nil {
		return bad("namespaceSelector", err)
	}
	podSel, err := sel(rp.Spec.PodSelector)
	if err != nil {
		return bad("podSelector", err)
	}
	s := rp.Spec
	p := &rightsize.Policy{Name: rp.Name, Generation: rp.Generation, Mode: rightsize.Mode(s.Mode), Preset: s.Preset,
		OOMFactor: s.OOMFactor, Limits: rightsize.Limits(s.Limits)}
	if s.MaxChangePerStep != nil {
		p.MaxChangePerStep = *s.MaxChangePerStep
	}
	if s.Step != nil {
		p.Step = s.Step.Duration
	}
	p.MinHistory = rightsize.DefaultMinHistory
	if s.MinHistory != nil {
		p.MinHistory = s.MinHistory.Duration
	}
	if s.PausedUntil != nil {
		p.PausedUntil = s.PausedUntil.Time
	}
	for i, w := range s.AvoidWindows {
		win, err := rightsize.ParseWindow(w.Schedule, w.Duration.Duration)
		if err != nil {
			return bad(fmt.Sprintf("avoidWindows[%d]", i), err)
		}
		p.Avoid = append(p.Avoid, win)
	}
	mh := recommend.Duration(p.MinHistory)
	p.Overrides.MinHistory = &mh
	p.Overrides.ResizeBudget = s.ResizesPerDay
	p.Overrides.CPU = resourceOverrides(s.CPU, func(q resource.Quantity) float64 { return float64(q.MilliValue()) / 1000 })
	p.Overrides.Memory = resourceOverrides(s.Memory, func(q resource.Quantity) float64 { return float64(q.Value()) })
	if err := p.Check(); err != nil {
		return nil, nil, nil, err
	}
	return p, nsSel, podSel, nil
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

// match returns the valid policies selecting pod p, sorted by name.
func (pi *policyIndex) match(p *corev1.Pod) []*rightsize.Policy {
	var nsLabels labels.Set
	if obj, ok, _ := pi.namespaces.GetStore().GetByKey(p.Namespace); ok {
		if ns, ok := obj.(*metav1.PartialObjectMetadata); ok {
			nsLabels = ns.Labels
		}
	}
	pi.mu.RLock()
	defer pi.mu.RUnlock()
	var out []*rightsize.Policy
	for _, cp := range pi.byName {
		if cp.err != nil {
			continue
		}
		if cp.nsSel.Matches(nsLabels) && cp.podSel.Matches(labels.Set(p.Labels)) {
			out = append(out, cp.policy)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// presets lists the presets the valid policies name.
func (pi *policyIndex) presets() []string {
	pi.mu.RLock()
	defer pi.mu.RUnlock()
	seen := map[string]bool{}
	var out []string
	for _, cp := range pi.byName {
		if cp.err == nil && !seen[cp.policy.Preset] {
			seen[cp.policy.Preset] = true
			out = append(out, cp.policy.Preset)
		}
	}
	sort.Strings(out)
	return out
}

// all returns every policy, valid or not, sorted by name.
func (pi *policyIndex) all() []*compiledPolicy {
	pi.mu.RLock()
	defer pi.mu.RUnlock()
	out := make([]*compiledPolicy, 0, len(pi.byName))
	for _, cp := range pi.byName {
		out = append(out, cp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].obj.Name < out[j].obj.Name })
	return out
}

// errRightsizeAPIAbsent: the cluster has no RightsizePolicy CRD.
var errRightsizeAPIAbsent = errors.New("the RightsizePolicy CRD (cgpilot.io/v1alpha1) is not installed")

// rightsizeAPIPresent asks discovery whether the CRD is served.
func rightsizeAPIPresent(ctx context.Context, kc kube.Interface) error {
	list, err := kc.Resources(ctx, v1alpha1.SchemeGroupVersion.String())
	if err != nil {
		return fmt.Errorf("%w: %v", errRightsizeAPIAbsent, err)
	}
	for _, r := range list {
		if r.Name == rightsizeGVR.Resource {
			return nil
		}
	}
	return errRightsizeAPIAbsent
}
