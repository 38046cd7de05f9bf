package kube

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/aggregator/state"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/recommend"
)

// Policies caches the RightsizePolicies and the namespaces' labels: the
// store resolves a report's policy name to its preset and overrides, the
// webhook finds the policies that match a new pod.
type Policies struct {
	informer cache.SharedIndexInformer
	nsLister listersv1.NamespaceLister
	nsSynced cache.InformerSynced
	factory  informers.SharedInformerFactory
	dfactory dynamicinformer.DynamicSharedInformerFactory

	mu     sync.Mutex
	parsed map[string]parsedPolicy // by name, keyed also by resourceVersion
}

type parsedPolicy struct {
	rv      string
	policy  *v1alpha1.RightsizePolicy
	nsSel   labels.Selector
	podSel  labels.Selector
	info    state.PolicyInfo
	invalid error
}

// NewPolicies returns a cache over dc (policies) and cs (namespaces).
func NewPolicies(dc dynamic.Interface, cs kubernetes.Interface, resync time.Duration) *Policies {
	df := dynamicinformer.NewDynamicSharedInformerFactory(dc, resync)
	f := informers.NewSharedInformerFactory(cs, resync)
	ns := f.Core().V1().Namespaces()
	p := &Policies{informer: df.ForResource(RightsizePolicies).Informer(), nsLister: ns.Lister(), nsSynced: ns.Informer().HasSynced,
		factory: f, dfactory: df, parsed: map[string]parsedPolicy{}}
	return p
}

// Start starts the informers and waits until they have synced or ctx ends.
func (p *Policies) Start(ctx context.Context) error {
	p.factory.Start(ctx.Done())
	p.dfactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), p.informer.HasSynced, p.nsSynced) {
		return fmt.Errorf("kube: policy and namespace caches did not sync: %w", ctx.Err())
	}
	return nil
}

// get parses (and memoises) the named policy.
func (p *Policies) get(name string) (parsedPolicy, bool) {
	obj, ok, err := p.informer.GetStore().GetByKey(name)
	if err != nil || !ok {
		return parsedPolicy{}, false
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return parsedPolicy{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pp, ok := p.parsed[name]; ok && pp.rv == u.GetResourceVersion() {
		return pp, true
	}
	pp := parse(u)
	p.parsed[name] = pp
	return pp, true
}

func parse(u *unstructured.Unstructured) parsedPolicy {
	pp := parsedPolicy{rv: u.GetResourceVersion()}
	var pol v1alpha1.RightsizePolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pol); err != nil {
		pp.invalid = err
		return pp
	}
	pp.policy = &pol
	var err error
	if pp.nsSel, err = selector(pol.Spec.NamespaceSelector); err == nil {
		pp.podSel, err = selector(pol.Spec.PodSelector)
	}
	if err != nil {
		pp.invalid = err
		return pp
	}
	pp.info = Info(&pol)
	return pp
}

func selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

// Info is the store's view of a policy: its preset, the per-resource
// overrides (as recommend takes them) and its step.
func Info(p *v1alpha1.RightsizePolicy) state.PolicyInfo {
	pi := state.PolicyInfo{Preset: p.Spec.Preset}
	if p.Spec.Step != nil {
		pi.Step = p.Spec.Step.Duration
	}
	conv := func(rp *v1alpha1.ResourcePolicy) recommend.ResourceOverrides {
		var o recommend.ResourceOverrides
		if rp == nil {
			return o
		}
		o.TargetSaturation, o.Percentile = rp.TargetSaturation, rp.Percentile
		if rp.MinAllowed != nil {
			v := rp.MinAllowed.AsApproximateFloat64()
			o.MinAllowed = &v
		}
		if rp.MaxAllowed != nil {
			v := rp.MaxAllowed.AsApproximateFloat64()
			o.MaxAllowed = &v
		}
		return o
	}
	pi.Overrides = recommend.Overrides{CPU: conv(p.Spec.CPU), Memory: conv(p.Spec.Memory)}
	if p.Spec.MinHistory != nil {
		// As the agents read it (the API server defaults it to 24h): a
		// merged recommendation exists from the history the policy asks.
		mh := recommend.Duration(p.Spec.MinHistory.Duration)
		pi.Overrides.MinHistory = &mh
	}
	return pi
}

// Info resolves a policy name for the store.
func (p *Policies) Info(name string) (state.PolicyInfo, bool) {
	pp, ok := p.get(name)
	if !ok || pp.invalid != nil {
		return state.PolicyInfo{}, false
	}
	return pp.info, true
}

// Match returns the valid policies whose selectors match a pod with
// podLabels in namespace, sorted by name.
func (p *Policies) Match(namespace string, podLabels map[string]string) []*v1alpha1.RightsizePolicy {
	ns, err := p.nsLister.Get(namespace)
	var nsLabels labels.Set
	switch {
	case err == nil:
		nsLabels = ns.Labels
	default:
		// A namespace not in the cache yet (just created): match by the
		// name label every namespace carries.
		nsLabels = labels.Set{corev1.LabelMetadataName: namespace}
	}
	var out []*v1alpha1.RightsizePolicy
	for _, key := range p.informer.GetStore().ListKeys() {
		pp, ok := p.get(key)
		if !ok || pp.invalid != nil {
			continue
		}
		if pp.nsSel.Matches(nsLabels) && pp.podSel.Matches(labels.Set(podLabels)) {
			out = append(out, pp.policy)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
