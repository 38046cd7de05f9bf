package runner

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/agent/kube"
	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
)

// bounds.go: what bounds the values right-sizing applies besides the
// policy, for policy.Clamp: the namespaces' LimitRanges (one informer on
// every LimitRange, a handful of objects in a cluster) and the node's
// allocatable (its Node, read every nodeBoundsEvery). With pods/resize
// the API server checks LimitRanges too; without it the agent's clamp is
// the only check of what it writes to the cgroups.

// nodeBoundsEvery is how often the Node's allocatable is read again: it
// changes only when the kubelet's reservations do.
const nodeBoundsEvery = 5 * time.Minute

type nodeBounds struct {
	kc   kube.Interface
	node string
	log  logr.Logger
	lr   cache.SharedIndexInformer
	// alloc is the node's allocatable (nil: not read yet).
	alloc atomic.Pointer[policy.Values]

	mu      sync.Mutex
	read    time.Time // when the Node was last asked
	lastErr string    // the last error logged, to log changes only
}

func newNodeBounds(kc kube.Interface, node string, resync time.Duration, log logr.Logger) *nodeBounds {
	inf := cache.NewSharedIndexInformer(kc.LimitRanges(), &corev1.LimitRange{}, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	return &nodeBounds{kc: kc, node: node, log: log, lr: inf}
}

// run feeds the LimitRange cache until ctx ends. Until it has synced (or
// where RBAC does not let the agent list LimitRanges) a namespace has no
// LimitRange bounds: the policy's and the node's still apply.
func (b *nodeBounds) run(ctx context.Context) { b.lr.RunWithContext(ctx) }

// refresh reads the Node's allocatable when the last read is older than
// nodeBoundsEvery; a failed read keeps the last value.
func (b *nodeBounds) refresh(ctx context.Context, now time.Time) {
	b.mu.Lock()
	if !b.read.IsZero() && now.Sub(b.read) < nodeBoundsEvery {
		b.mu.Unlock()
		return
	}
	b.read = now
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, kube.PatchTimeout)
	defer cancel()
	n, err := b.kc.Node(ctx, b.node)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		if msg := err.Error(); msg != b.lastErr {
			b.log.Info("the Node's allocatable is unknown: right-sizing is clamped by the policy and the LimitRanges alone until it is read", "err", msg)
			b.lastErr = msg
		}
		return
	}
	b.lastErr = ""
	v := policy.ValuesOf(n.Status.Allocatable)
	b.alloc.Store(&v)
}

// of are the bounds of a pod in namespace ns: the namespace's
// LimitRanges merged (the tightest of each bound) and the node's
// allocatable; zero values are unknown (no bound).
func (b *nodeBounds) of(ns string) (lr policy.LimitRange, alloc policy.Values) {
	if b == nil {
		return lr, alloc
	}
	if v := b.alloc.Load(); v != nil {
		alloc = *v
	}
	objs, _ := b.lr.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	for _, o := range objs {
		l, ok := o.(*corev1.LimitRange)
		if !ok {
			continue
		}
		for _, it := range l.Spec.Limits {
			policy.AddLimitRangeItem(&lr, string(it.Type), it.Max, it.Min, it.MaxLimitRequestRatio)
		}
	}
	return lr, alloc
}
