package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
)

// Limits is what bounds a new pod besides its policy, for the webhook's
// clamp: the namespaces' LimitRanges (cached here) and each node's
// allocatable (read from the one node cache, Nodes).
type Limits struct {
	factory     informers.SharedInformerFactory
	limitRanges listersv1.LimitRangeLister
	nodes       *Nodes
	synced      []cache.InformerSynced
}

// NewLimits returns the LimitRange cache over cs; the nodes' allocatable
// comes from nodes, which its owner starts.
func NewLimits(cs kubernetes.Interface, resync time.Duration, nodes *Nodes) *Limits {
	f := informers.NewSharedInformerFactory(cs, resync)
	lr := f.Core().V1().LimitRanges()
	return &Limits{factory: f, limitRanges: lr.Lister(), nodes: nodes, synced: []cache.InformerSynced{lr.Informer().HasSynced}}
}

// Start starts the LimitRange informer and waits until it has synced or
// ctx ends.
func (l *Limits) Start(ctx context.Context) error {
	l.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), l.synced...) {
		return fmt.Errorf("kube: the LimitRange cache did not sync: %w", ctx.Err())
	}
	return nil
}

// LimitRange is the namespace's LimitRanges merged (the tightest bound of
// each; none: no bound).
func (l *Limits) LimitRange(namespace string) policy.LimitRange {
	var out policy.LimitRange
	lrs, err := l.limitRanges.LimitRanges(namespace).List(labels.Everything())
	if err != nil {
		return out
	}
	for _, lr := range lrs {
		for _, item := range lr.Spec.Limits {
			policy.AddLimitRangeItem(&out, string(item.Type), item.Max, item.Min, item.MaxLimitRequestRatio)
		}
	}
	return out
}

// LargestAllocatable is the largest CPU and the largest memory
// allocatable of any node (0 while no node is known): a pod asking more
// fits no node.
func (l *Limits) LargestAllocatable() policy.Values {
	var out policy.Values
	if l.nodes == nil {
		return out
	}
	for _, obj := range l.nodes.informer.GetStore().List() {
		if n, ok := obj.(*corev1.Node); ok {
			v := policy.ValuesOf(n.Status.Allocatable)
			out.CPU, out.Memory = max(out.CPU, v.CPU), max(out.Memory, v.Memory)
		}
	}
	return out
}
