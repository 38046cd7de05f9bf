package agent

import (
	"maps"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/agent/kube"
	"github.com/cgpilot/cgpilot/agent/podspec"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/cgroup"
)

// informer.go: where work enters the agent. Pod events from the API server
// and cgroup events from the kernel both become workqueue keys: the single
// hand-off before reconcile.go.

// The pod cache's indexes: by UID, and by the sweep's slice.
const (
	uidIndex   = "uid"
	sliceIndex = "sweep-slice"
)

// newPodInformer watches only this node's pods (spec.nodeName field
// selector), indexed by UID for the cgroup watcher.
func newPodInformer(kc kube.Interface, nodeName string, resync, sweepInterval time.Duration) (cache.SharedIndexInformer, error) {
	slices := sweepSlices(sweepInterval)
	inf := cache.NewSharedIndexInformer(kc.Pods(nodeName), &corev1.Pod{}, resync, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		uidIndex: func(obj any) ([]string, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				return []string{string(p.UID)}, nil
			}
			return nil, nil
		},
		// The sweep's slice of each pod, kept by the cache: a sweep tick
		// reads its slice's pods, not every pod.
		sliceIndex: func(obj any) ([]string, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				return []string{strconv.Itoa(sweepSlice(string(p.UID), slices))}, nil
			}
			return nil, nil
		},
	})
	// The agent never reads managedFields: dropping them before the cache
	// saves about a third of each cached pod.
	err := inf.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		return obj, nil
	})
	return inf, err
}

// addHandlers turns informer events into workqueue keys.
func (c *controller) addHandlers(inf cache.SharedIndexInformer) error {
	_, err := inf.AddEventHandler(kube.GuardHandlers(c.guard, loopPodEvents, cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueuePod(obj) },
		UpdateFunc: func(old, obj any) {
			o, _ := old.(*corev1.Pod)
			n, _ := obj.(*corev1.Pod)
			if o != nil && n != nil && o.ResourceVersion == n.ResourceVersion {
				return // periodic resync: the sweep covers it
			}
			if o != nil && n != nil && onlyOwnAnnotations(o, n) {
				return // the echo of the agent's own patch, or a status field it never reads
			}
			c.enqueuePod(obj)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				c.rememberPod(p)
				c.enqueue(podspec.Key(p.Namespace, p.Name), time.Now())
			}
		},
	}))
	return err
}

// ownAnnotations are the annotations only the agent writes, as outputs
// (the pools' status, the right-sizer's recommendation): nothing the
// agent decides reads them back from an update.
var ownAnnotations = []string{local.AnnotationStatus, local.AnnotationAllocatedCPUs, v1alpha1.AnnotationRecommendation}

// onlyOwnAnnotations says whether n differs from o in nothing the agent
// reads: only in ownAnnotations, the resource version, or the pod-level
// status.resources and status.allocatedResources (the kubelet of 1.36
// writes those once per pod at its first resync, and the agent reads the
// containers' statuses, never these). The first is the update the API
// server sends back for each of the agent's own patches. Under churn
// those were one reconcile more per status and per recommendation
// written; on a settling node, one per pod.
func onlyOwnAnnotations(o, n *corev1.Pod) bool {
	om, nm := o.ObjectMeta, n.ObjectMeta // copies: only their maps are shared, and those are replaced
	om.ResourceVersion, nm.ResourceVersion = "", ""
	om.ManagedFields, nm.ManagedFields = nil, nil
	om.Annotations, nm.Annotations = maps.Clone(o.Annotations), maps.Clone(n.Annotations)
	for _, k := range ownAnnotations {
		delete(om.Annotations, k)
		delete(nm.Annotations, k)
	}
	ostat, nstat := o.Status, n.Status // copies: the fields cleared are pointers and maps, not written through
	ostat.Resources, nstat.Resources = nil, nil
	ostat.AllocatedResources, nstat.AllocatedResources = nil, nil
	return apiequality.Semantic.DeepEqual(om, nm) && apiequality.Semantic.DeepEqual(o.Spec, n.Spec) && apiequality.Semantic.DeepEqual(ostat, nstat)
}

func (c *controller) enqueuePod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	c.enqueue(podspec.Key(p.Namespace, p.Name), time.Now())
}

// enqueue adds key and remembers when the first unprocessed change arrived,
// for the annotation-to-cgroup latency histogram.
func (c *controller) enqueue(key string, at time.Time) {
	c.mu.Lock()
	if _, pending := c.since[key]; !pending {
		c.since[key] = at
	}
	c.mu.Unlock()
	c.queue.Add(key)
}

// enqueueAll queues every pod of the node.
func (c *controller) enqueueAll() {
	now := time.Now()
	for _, p := range c.listPods() {
		c.rememberPod(p)
		c.enqueue(podspec.Key(p.Namespace, p.Name), now)
	}
}

// onCgroupEvent queues the pod whose cgroups changed: a new pod or
// container cgroup must be written (a container made after the pod was
// set up is "late", timed by the late-container histogram), a removed
// container cgroup may let a deleted pod release its CPUs before the
// kubelet says its container exited, and a CPU placement file written by
// someone else (the runtime after a mkdir, the kubelet, a person) must be
// set back at once, not at the next sweep. A write that left the value the
// pools want (most often the pools' own) costs one comparison, no sync.
func (c *controller) onCgroupEvent(ev cgroup.WatchEvent) {
	objs, _ := c.indexer.ByIndex(uidIndex, ev.PodUID)
	if len(objs) != 1 {
		return // pod not known yet: its informer event will queue it
	}
	p, ok := objs[0].(*corev1.Pod)
	if !ok {
		return
	}
	if ev.Kind == cgroup.FileWritten && c.pools.Agrees(c.podInfo(p), ev.File, ev.Value) {
		return
	}
	key := podspec.Key(p.Namespace, p.Name)
	late := ev.Kind == cgroup.ContainerCreated || (ev.Kind == cgroup.PodCreated && ev.HasContainers)
	if late {
		c.mu.Lock()
		if _, pending := c.late[key]; !pending {
			c.late[key] = ev.At
		}
		c.mu.Unlock()
	}
	c.enqueue(key, ev.At)
}

// listPods lists the node's pods from the informer's cache.
func (c *controller) listPods() []*corev1.Pod {
	pods, _ := c.lister.List(labels.Everything())
	return pods
}
