package kube

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/aggregator/state"
	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
	"github.com/cgpilot/cgpilot/api/v1alpha1/policy/feed"
)

// Policies caches the RightsizePolicies and the namespaces' labels: the
// store resolves a report's policy name to its preset and overrides, the
// webhook finds the policies that match a new pod. The compiler
// (api/v1alpha1/policy, shared with the agents) compiles and matches;
// this feeds it from the informers, through the agents' handler too
// (policy/feed).
type Policies struct {
	index    *policy.Index
	informer cache.SharedIndexInformer
	handled  cache.ResourceEventHandlerRegistration // synced once the index holds the first list
	nsLister listersv1.NamespaceLister
	nsSynced cache.InformerSynced
	factory  informers.SharedInformerFactory
	dfactory dynamicinformer.DynamicSharedInformerFactory
}

// NewPolicies returns a cache over dc (policies) and cs (namespaces).
func NewPolicies(dc dynamic.Interface, cs kubernetes.Interface, resync time.Duration) *Policies {
	df := dynamicinformer.NewDynamicSharedInformerFactory(dc, resync)
	f := informers.NewSharedInformerFactory(cs, resync)
	ns := f.Core().V1().Namespaces()
	p := &Policies{index: policy.NewIndex(), informer: df.ForResource(RightsizePolicies).Informer(), nsLister: ns.Lister(),
		nsSynced: ns.Informer().HasSynced, factory: f, dfactory: df}
	p.handled, _ = p.informer.AddEventHandler(feed.Handler(p.index, nil))
	return p
}

// Start starts the informers and waits until they have synced or ctx ends.
func (p *Policies) Start(ctx context.Context) error {
	p.factory.Start(ctx.Done())
	p.dfactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), p.informer.HasSynced, p.handled.HasSynced, p.nsSynced) {
		return fmt.Errorf("kube: policy and namespace caches did not sync: %w", ctx.Err())
	}
	return nil
}

// Info is the store's view of a compiled policy: its preset, the
// per-resource overrides (as recommend takes them, minHistory included)
// and its step, the values the agents act on.
func Info(p *policy.Policy) state.PolicyInfo {
	return state.PolicyInfo{Preset: p.Preset, Overrides: p.Overrides, Step: p.Step}
}

// Get returns the named policy as compiled: the object and the Policy, or
// why it is invalid.
func (p *Policies) Get(name string) (*policy.Entry, bool) { return p.index.Get(name) }

// Info resolves a policy name for the store: false for a policy unknown
// or invalid (which no agent acts on either).
func (p *Policies) Info(name string) (state.PolicyInfo, bool) {
	e, ok := p.index.Get(name)
	if !ok || e.Policy == nil {
		return state.PolicyInfo{}, false
	}
	return Info(e.Policy), true
}

// Match returns the valid policies whose selectors match a pod with
// podLabels in namespace, sorted by name, and those it cannot decide
// while the namespace is not in the cache yet.
func (p *Policies) Match(namespace string, podLabels map[string]string) ([]*policy.Policy, []string) {
	ns := policy.Namespace{Name: namespace}
	if n, err := p.nsLister.Get(namespace); err == nil {
		ns.Labels, ns.Known = n.Labels, true
	}
	return p.index.Match(ns, podLabels)
}
