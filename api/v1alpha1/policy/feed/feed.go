// Package feed keeps a policy.Index in step with a RightsizePolicy
// informer: the one event handler the agent (agent/rightsize/runner) and
// the aggregator (aggregator/kube) register, so that both read an added,
// changed or deleted policy (a deletion tombstone included) alike.
//
// It lives apart from package policy because it needs client-go's cache
// package, which policy does not import (the webhook and the tests use
// the compiler without it). It imports client-go's tools/cache,
// apimachinery's unstructured and policy; never a clientset
// (hack/checkimports/walls.go).
package feed

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
)

// Handler returns the handlers of a dynamic informer over
// RightsizePolicies: an added or updated object is compiled into idx, a
// deleted one (or a tombstone's) removed; changed, when not nil, runs
// after each that changes what the policy selects and asks
// (policy.Index.Upsert): not after an update of its status or metadata, nor
// a resync. Every node's agent writes its own entry of a policy's status,
// and each write reached every agent as a change: all its pods decided
// again, once per node's write. Objects that are not
// *unstructured.Unstructured are ignored.
func Handler(idx *policy.Index, changed func()) cache.ResourceEventHandlerFuncs {
	done := func() {
		if changed != nil {
			changed()
		}
	}
	upsert := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			if _, newRules := idx.Upsert(u); newRules {
				done()
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    upsert,
		UpdateFunc: func(_, obj any) { upsert(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				idx.Delete(u.GetName())
				done()
			}
		},
	}
}
