package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/agent/kube"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
	"github.com/cgpilot/cgpilot/api/v1alpha1/policy/feed"
	"github.com/cgpilot/cgpilot/internal/loop"
)

// policies.go: the cluster's RightsizePolicies and which of them select
// a pod. The compiler (api/v1alpha1/policy, shared with the aggregator and
// its webhook) compiles and matches; this file feeds it from two
// informers: the policies, and the namespaces' labels.

// compiledPolicy is one RightsizePolicy ready to match and act on; err is
// what the agent could not accept of it (reported in its status).
type compiledPolicy struct {
	policy *rightsize.Policy
	err    error
	obj    *v1alpha1.RightsizePolicy
}

// policyIndex keeps the compiled policies, fed by a dynamic informer, and
// the namespaces' labels, fed by a namespace informer.
type policyIndex struct {
	index      *policy.Index
	namespaces cache.SharedIndexInformer // namespaces' metadata, for namespaceSelector
	informer   cache.SharedIndexInformer
	// handled are the event handlers' registrations: synced once the
	// index holds what the informers first listed.
	handled  []cache.ResourceEventHandlerRegistration
	onChange func()
}

// newPolicyIndex builds the policy and namespace informers; their handlers
// run as iterations of g's policy-informer loop.
func newPolicyIndex(kc kube.Interface, resync time.Duration, onChange func(), g *loop.Guard) (*policyIndex, error) {
	nsInf := cache.NewSharedIndexInformer(kc.Namespaces(), &metav1.PartialObjectMetadata{}, resync, nil)
	pi := &policyIndex{index: policy.NewIndex(), namespaces: nsInf, onChange: onChange}
	nsReg, err := nsInf.AddEventHandler(kube.GuardHandlers(g, LoopPolicyEvents, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { pi.changed() },
		UpdateFunc: func(old, obj any) { pi.nsChanged(old, obj) },
		DeleteFunc: func(any) { pi.changed() },
	}))
	if err != nil {
		return nil, err
	}
	policies := kc.Dynamic().Resource(v1alpha1.RightsizePolicies)
	pi.informer = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return policies.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return policies.Watch(ctx, o)
		},
	}, kc.Dynamic()), &unstructured.Unstructured{}, resync, nil)
	polReg, err := pi.informer.AddEventHandler(kube.GuardHandlers(g, LoopPolicyEvents, feed.Handler(pi.index, pi.changed)))
	if err != nil {
		return nil, err
	}
	pi.handled = []cache.ResourceEventHandlerRegistration{nsReg, polReg}
	return pi, nil
}

// hasSynced says whether the index holds what the informers first
// listed (an informer's own HasSynced comes before its handlers ran).
func (pi *policyIndex) hasSynced() bool {
	for _, r := range pi.handled {
		if !r.HasSynced() {
			return false
		}
	}
	return pi.informer.HasSynced() && pi.namespaces.HasSynced()
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

// namespace is what the namespace cache knows of ns.
func (pi *policyIndex) namespace(ns string) policy.Namespace {
	if obj, ok, _ := pi.namespaces.GetStore().GetByKey(ns); ok {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			return policy.Namespace{Name: ns, Labels: m.Labels, Known: true}
		}
	}
	return policy.Namespace{Name: ns}
}

// policies is the policy index, nil until the CRD is served.
func (r *Runner) policies() *policyIndex { return r.policiesP.Load() }

// matching are the policies selecting p: none until the RightsizePolicy
// CRD is served.
func (r *Runner) matching(p *corev1.Pod) []*rightsize.Policy {
	if pi := r.policies(); pi != nil {
		return pi.match(p)
	}
	return nil
}

// match returns the valid policies selecting pod p, sorted by name. A
// policy undecided for a namespace not cached yet does not select it:
// the namespace's arrival decides again (changed).
func (pi *policyIndex) match(p *corev1.Pod) []*rightsize.Policy {
	matched, _ := pi.index.Match(pi.namespace(p.Namespace), p.Labels)
	return matched
}

// presets lists the presets the valid policies name.
func (pi *policyIndex) presets() []string { return pi.index.Presets() }

// all returns every policy, valid or not, sorted by name.
func (pi *policyIndex) all() []*compiledPolicy {
	entries := pi.index.Entries()
	out := make([]*compiledPolicy, len(entries))
	for i, e := range entries {
		out[i] = &compiledPolicy{policy: e.Policy, err: e.Err, obj: e.Object}
	}
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
		if r.Name == v1alpha1.RightsizePolicies.Resource {
			return nil
		}
	}
	return errRightsizeAPIAbsent
}
