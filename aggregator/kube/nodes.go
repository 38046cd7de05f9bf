package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// NodeSize is what the Node object says of a node's size: its capacity
// and allocatable CPU (cores), memory (bytes) and pods. The aggregator
// takes these from the API server, never from a node's report.
type NodeSize struct {
	CPUCapacity, CPUAllocatable       float64
	MemoryCapacity, MemoryAllocatable float64
	Pods                              int
}

// Nodes caches every Node's size (a Node trimmed to its name and those
// quantities: a few hundred bytes each).
type Nodes struct {
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
}

// NewNodes returns a cache over cs (Start runs it).
func NewNodes(cs kubernetes.Interface, resync time.Duration) *Nodes {
	f := informers.NewSharedInformerFactory(cs, resync)
	inf := f.Core().V1().Nodes().Informer()
	_ = inf.SetTransform(func(obj any) (any, error) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return obj, nil
		}
		keep := func(l corev1.ResourceList) corev1.ResourceList {
			out := corev1.ResourceList{}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
				if q, ok := l[r]; ok {
					out[r] = q
				}
			}
			return out
		}
		t := &corev1.Node{}
		t.Name, t.ResourceVersion, t.UID = n.Name, n.ResourceVersion, n.UID
		t.Status.Capacity, t.Status.Allocatable = keep(n.Status.Capacity), keep(n.Status.Allocatable)
		return t, nil
	})
	return &Nodes{factory: f, informer: inf}
}

// Start starts the informer and waits until it has synced or ctx ends.
func (n *Nodes) Start(ctx context.Context) error {
	n.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), n.informer.HasSynced) {
		return fmt.Errorf("kube: the node cache did not sync: %w", ctx.Err())
	}
	return nil
}

// Size returns the named Node's size; false when there is no such Node.
func (n *Nodes) Size(name string) (NodeSize, bool) {
	obj, ok, err := n.informer.GetStore().GetByKey(name)
	if err != nil || !ok {
		return NodeSize{}, false
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return NodeSize{}, false
	}
	c, a := node.Status.Capacity, node.Status.Allocatable
	return NodeSize{CPUCapacity: c.Cpu().AsApproximateFloat64(), CPUAllocatable: a.Cpu().AsApproximateFloat64(),
		MemoryCapacity: c.Memory().AsApproximateFloat64(), MemoryAllocatable: a.Memory().AsApproximateFloat64(),
		Pods: int(a.Pods().Value())}, true
}

// Quotas caches every namespace's ResourceQuotas (the webhook never
// patches a pod past one).
type Quotas struct {
	factory informers.SharedInformerFactory
	synced  cache.InformerSynced
	lister  listersv1.ResourceQuotaLister
}

// NewQuotas returns a cache over cs (Start runs it).
func NewQuotas(cs kubernetes.Interface, resync time.Duration) *Quotas {
	f := informers.NewSharedInformerFactory(cs, resync)
	q := f.Core().V1().ResourceQuotas()
	_ = q.Informer().SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(interface {
			SetManagedFields([]metav1.ManagedFieldsEntry)
		}); ok {
			m.SetManagedFields(nil)
		}
		return obj, nil
	})
	return &Quotas{factory: f, synced: q.Informer().HasSynced, lister: q.Lister()}
}

// Start starts the informer and waits until it has synced or ctx ends.
func (q *Quotas) Start(ctx context.Context) error {
	q.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), q.synced) {
		return fmt.Errorf("kube: the ResourceQuota cache did not sync: %w", ctx.Err())
	}
	return nil
}

// In returns namespace's ResourceQuotas.
func (q *Quotas) In(namespace string) []*corev1.ResourceQuota {
	l, err := q.lister.ResourceQuotas(namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	return l
}
