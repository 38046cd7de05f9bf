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
	"k8s.io/client-go/util/workqueue"

	"github.com/cgpilot/cgpilot/agent/kube"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/internal/loop"
)

// workload.go: which workload a pod belongs to, so the pods of one
// workload on the node share one usage history per container name, as VPA
// aggregates them: ReplicaSet → Deployment, Job → CronJob, StatefulSet,
// DaemonSet, any other controller by its own kind, and a bare pod by its
// own name.
//
// The owner of a ReplicaSet or Job takes one GET. It is never made on
// the reconcile path: a churn of new ReplicaSets on a busy API server once
// held both reconcile workers in these GETs for a minute, and pods that
// started then went unsampled. Track names a pod at once (from the cache,
// else from the pod-template-hash naming or the direct owner), the GET
// runs on the owner cache's own workers, and a pod whose workload the
// answer changes is queued again.

// ownerCache resolves and remembers the owners of ReplicaSets and Jobs.
type ownerCache struct {
	kube kube.Interface
	// requeue queues a pod again (namespace, name) whose workload an
	// answer changed.
	requeue func(namespace, name string)
	q       workqueue.TypedRateLimitingInterface[types.UID]

	mu sync.Mutex
	// parents maps an intermediate owner's UID to its own controller (or
	// to itself when it has none).
	parents map[types.UID]parentRef
	// pending are the owners asked for and not yet answered, with the
	// pods named meanwhile and the workload each was given.
	pending map[types.UID]*ownerLookup
}

type parentRef struct {
	kind, name string
	at         time.Time
}

type ownerLookup struct {
	namespace string
	ref       metav1.OwnerReference
	pods      map[string]report.Workload // pod name -> the workload Track gave it
}

// Bounds of the owner cache.
const (
	// ownerTTL bounds how long a resolved owner is trusted (a ReplicaSet
	// adopted by another Deployment is rare, a deleted one common).
	ownerTTL = 30 * time.Minute
	// ownerWorkers GET owners at once: a churn of new ReplicaSets is
	// answered in parallel, the API server is not flooded.
	ownerWorkers = 2
	// ownerTries bounds the GETs of one owner while the API server fails:
	// then the pods keep the name they were given (the pod-template-hash
	// naming or the direct owner), and the owner is asked again at a
	// later pod's Track.
	ownerTries = 6
	// maxOwners bounds both maps (a node sees far fewer owners).
	maxOwners = 10000
)

// The backoff between GETs of an owner while the API server fails.
var ownerRetryMin, ownerRetryMax = 500 * time.Millisecond, 30 * time.Second

func newOwnerCache(kc kube.Interface, requeue func(namespace, name string)) *ownerCache {
	return &ownerCache{kube: kc, requeue: requeue,
		q:       workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](ownerRetryMin, ownerRetryMax)),
		parents: map[types.UID]parentRef{}, pending: map[types.UID]*ownerLookup{}}
}

// The intermediate owners resolved, read as metadata only.
var (
	replicaSetsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	jobsGVR        = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
)

// controllerOf is the controller among refs, by apimachinery's rule
// (metav1.GetControllerOfNoCopy), the one the aggregator uses too.
func controllerOf(refs []metav1.OwnerReference) *metav1.OwnerReference {
	return metav1.GetControllerOfNoCopy(&metav1.ObjectMeta{OwnerReferences: refs})
}

// workloadOf names p's workload by report.WorkloadOf, the rule the
// aggregator shares, without waiting for the API server: an owner not yet
// resolved is asked for in the background, and p named meanwhile from the
// pod-template-hash naming, else its direct controller (the ReplicaSet or
// Job).
func (o *ownerCache) workloadOf(p *corev1.Pod) report.Workload {
	ref := controllerOf(p.OwnerReferences)
	var owner *report.Owner
	if ref != nil {
		owner = &report.Owner{Kind: ref.Kind, Name: ref.Name}
	}
	var asked bool
	parent := func(kind, name string) (*report.Owner, bool) {
		asked = true
		pr, ok := o.known(ref.UID)
		switch {
		case !ok:
			return nil, false
		case pr.kind == ref.Kind && pr.name == ref.Name:
			return nil, true // known, with no controller of its own
		}
		return &report.Owner{Kind: pr.kind, Name: pr.name}, true
	}
	wl := report.WorkloadOf(p.Namespace, p.Name, owner, p.Labels, parent)
	if asked {
		o.askLater(p, ref, wl)
	}
	return wl
}

// known is the last answer for an owner, however old: a pod keeps its
// workload while an answer past ownerTTL is asked again (naming it by its
// direct owner meanwhile would move its samples for a moment).
func (o *ownerCache) known(uid types.UID) (parentRef, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	pr, ok := o.parents[uid]
	return pr, ok
}

// askLater queues a GET of ref unless its answer is younger than
// ownerTTL; p, named wl meanwhile, is queued again if the answer names it
// otherwise.
func (o *ownerCache) askLater(p *corev1.Pod, ref *metav1.OwnerReference, wl report.Workload) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if pr, ok := o.parents[ref.UID]; ok && time.Since(pr.at) < ownerTTL {
		return
	}
	l := o.pending[ref.UID]
	if l == nil {
		if len(o.pending) >= maxOwners {
			return // the pod keeps its name; asked again at its next Track
		}
		l = &ownerLookup{namespace: p.Namespace, ref: *ref, pods: map[string]report.Workload{}}
		o.pending[ref.UID] = l
		o.q.Add(ref.UID)
	}
	l.pods[p.Name] = wl
}

// run GETs owners until ctx ends.
func (o *ownerCache) run(ctx context.Context, guard *loop.Guard) {
	for {
		uid, quit := o.q.Get()
		if quit {
			return
		}
		if err := guard.DoErr(LoopOwners, func() error { return o.resolve(ctx, uid) }); err != nil && o.q.NumRequeues(uid) < ownerTries-1 && ctx.Err() == nil {
			o.q.AddRateLimited(uid)
		} else {
			if err != nil {
				o.mu.Lock()
				delete(o.pending, uid) // given up: asked again at a later Track
				o.mu.Unlock()
			}
			o.q.Forget(uid)
		}
		o.q.Done(uid)
	}
}

// stop ends run once ctx has ended.
func (o *ownerCache) stop() { o.q.ShutDown() }

// resolve GETs one owner, caches its controller and queues again the pods
// whose workload it changes. An error leaves the owner pending.
func (o *ownerCache) resolve(ctx context.Context, uid types.UID) error {
	o.mu.Lock()
	l := o.pending[uid]
	o.mu.Unlock()
	if l == nil {
		return nil
	}
	gvr := replicaSetsGVR
	if l.ref.Kind == report.KindJob {
		gvr = jobsGVR
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	owners, err := o.kube.OwnerReferences(actx, gvr, l.namespace, l.ref.Name)
	cancel()
	pr := parentRef{kind: l.ref.Kind, name: l.ref.Name, at: time.Now()}
	switch {
	case err == nil:
		if up := controllerOf(owners); up != nil {
			pr.kind, pr.name = up.Kind, up.Name
		}
	case apierrors.IsNotFound(err):
		// The owner is gone (a finished Job's pods linger): name the pod
		// by its direct owner, for good.
	default:
		return err
	}
	want := report.Workload{Namespace: l.namespace, Kind: pr.kind, Name: pr.name}
	var moved []string
	o.mu.Lock()
	if len(o.parents) >= maxOwners {
		clear(o.parents)
	}
	o.parents[uid] = pr
	for name, had := range l.pods {
		if had != want {
			moved = append(moved, name)
		}
	}
	delete(o.pending, uid)
	o.mu.Unlock()
	for _, name := range moved {
		o.requeue(l.namespace, name)
	}
	return nil
}
