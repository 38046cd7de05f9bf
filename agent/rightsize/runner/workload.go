package runner

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgpilot/cgpilot/agent/kube"
	"github.com/cgpilot/cgpilot/api/report"
)

// workload.go: which workload a pod belongs to, so the pods of one
// workload on the node share one usage history per container name, as VPA
// aggregates them: ReplicaSet → Deployment, Job → CronJob, StatefulSet,
// DaemonSet, any other controller by its own kind, and a bare pod by its
// own name.

// ownerCache resolves and remembers the owners of ReplicaSets and Jobs
// (one GET each, the first time a pod of theirs is seen).
type ownerCache struct {
	kube kube.Interface
	mu   sync.Mutex
	// parents maps an intermediate owner's UID to its own controller (or
	// to itself when it has none).
	parents map[types.UID]parentRef
}

type parentRef struct {
	kind, name string
	at         time.Time
}

// ownerTTL bounds how long a resolved owner is trusted (a ReplicaSet
// adopted by another Deployment is rare, a deleted one common).
const ownerTTL = 30 * time.Minute

func newOwnerCache(kc kube.Interface) *ownerCache {
	return &ownerCache{kube: kc, parents: map[types.UID]parentRef{}}
}

// The intermediate owners resolved, read as metadata only.
var (
	replicaSetsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	jobsGVR        = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
)

func controllerOf(refs []metav1.OwnerReference) *metav1.OwnerReference {
	for i := range refs {
		if refs[i].Controller != nil && *refs[i].Controller {
			return &refs[i]
		}
	}
	return nil
}

// workloadOf resolves p's workload by report.WorkloadOf, the rule the
// aggregator shares. When the API is away the ReplicaSet's owner is read
// from the pod-template-hash naming, else the direct controller (the
// ReplicaSet or Job), which is stable for the pod's life: samples are
// never lost.
func (o *ownerCache) workloadOf(ctx context.Context, p *corev1.Pod) report.Workload {
	ref := controllerOf(p.OwnerReferences)
	var owner *report.Owner
	if ref != nil {
		owner = &report.Owner{Kind: ref.Kind, Name: ref.Name}
	}
	parent := func(kind, name string) (*report.Owner, bool) {
		pr, ok := o.parent(ctx, p.Namespace, ref)
		switch {
		case !ok:
			return nil, false
		case pr.kind == ref.Kind && pr.name == ref.Name:
			return nil, true // known, with no controller of its own
		}
		return &report.Owner{Kind: pr.kind, Name: pr.name}, true
	}
	return report.WorkloadOf(p.Namespace, p.Name, owner, p.Labels, parent)
}

func (o *ownerCache) parent(ctx context.Context, ns string, ref *metav1.OwnerReference) (parentRef, bool) {
	o.mu.Lock()
	pr, ok := o.parents[ref.UID]
	o.mu.Unlock()
	if ok && time.Since(pr.at) < ownerTTL {
		return pr, true
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	gvr := replicaSetsGVR
	if ref.Kind == "Job" {
		gvr = jobsGVR
	}
	owners, err := o.kube.OwnerReferences(ctx, gvr, ns, ref.Name)
	switch {
	case err == nil:
		pr = parentRef{kind: ref.Kind, name: ref.Name, at: time.Now()}
		if up := controllerOf(owners); up != nil {
			pr.kind, pr.name = up.Kind, up.Name
		}
	case apierrors.IsNotFound(err):
		// The owner is gone (a finished Job's pods linger): name the pod
		// by its direct owner, for good.
		pr = parentRef{kind: ref.Kind, name: ref.Name, at: time.Now()}
	default:
		return parentRef{}, false // API away: the caller falls back, not cached
	}
	o.mu.Lock()
	if len(o.parents) > 10000 {
		clear(o.parents)
	}
	o.parents[ref.UID] = pr
	o.mu.Unlock()
	return pr, true
}
