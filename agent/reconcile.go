package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// controller reconciles pods into pools: it pops a key from the workqueue,
// lets Pools plan and apply, then reports (status annotation, Event,
// metrics) and requeues on failure.
type controller struct {
	cfg      Config
	cs       kubernetes.Interface
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	lister   corelisters.PodLister
	indexer  cache.Indexer
	queue    workqueue.TypedRateLimitingInterface[string]
	statusQ  workqueue.TypedRateLimitingInterface[string] // annotation patches, off the cgroup path
	pools    *Pools
	events   *eventLog
	metrics  *metrics
	log      logr.Logger

	mu        sync.Mutex
	since     map[string]time.Time     // key -> first unprocessed change
	late      map[string]time.Time     // key -> first new container cgroup seen
	pending   map[string]pendingStatus // key -> latest status annotation to write
	known     map[string]*knownPod     // key -> last seen identity (for deletes)
	kubelet   kubeletStatic
	node      string // last node annotations written (JSON of both)
	topo      string // topology summary for the local API
	numaNodes int
}

type knownPod struct {
	UID, Namespace, Name string
	// last is the pod as last seen, for its containers once it is gone.
	last podInfo
	// goneAt is when the reconciler first found the pod gone from the API
	// while a container of it still ran.
	goneAt time.Time
}

// maxWaitGone bounds how long a force-deleted pod's cores wait for its
// containers to exit (the kubelet kills them within seconds).
const maxWaitGone = time.Minute

func (c *controller) rememberPod(p *corev1.Pod) {
	info := c.podInfo(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.known[p.Namespace+"/"+p.Name] = &knownPod{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name, last: info}
}

func (c *controller) runWorker(ctx context.Context) {
	for {
		key, quit := c.queue.Get()
		if quit {
			return
		}
		err := c.reconcile(ctx, key)
		if err != nil {
			c.log.Error(err, "reconcile failed; requeued", "pod", key)
			c.queue.AddRateLimited(key)
		} else {
			c.queue.Forget(key)
		}
		c.queue.Done(key)
	}
}

// takeSince returns and clears when key's pending change arrived.
func (c *controller) takeSince(key string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.since[key]
	delete(c.since, key)
	return t, ok
}

func (c *controller) reconcile(ctx context.Context, key string) error {
	since, timed := c.takeSince(key)
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // malformed key: nothing to retry
	}
	pod, err := c.lister.Pods(ns).Get(name)
	c.mu.Lock()
	prev := c.known[key]
	c.mu.Unlock()
	if apierrors.IsNotFound(err) {
		if prev == nil {
			return nil
		}
		// Force-deleted (the object went at once): the cores stay the
		// pod's until its containers have exited.
		c.mu.Lock()
		if prev.goneAt.IsZero() {
			prev.goneAt = time.Now()
		}
		waited := time.Since(prev.goneAt)
		c.mu.Unlock()
		if c.pools.stillRunning(prev.last) {
			if waited < maxWaitGone {
				if timed { // the release latency counts from the delete
					c.mu.Lock()
					if _, pending := c.since[key]; !pending {
						c.since[key] = since
					}
					c.mu.Unlock()
				}
				c.queue.AddAfter(key, 100*time.Millisecond)
				return nil
			}
			c.log.Info("deleted pod's containers still run; releasing its cpus anyway", "pod", key, "waited", waited)
		}
		res := c.pools.Forget(prev.UID, c.allPods)
		c.report(ctx, prev, nil, res, since, timed)
		c.mu.Lock()
		delete(c.known, key)
		c.mu.Unlock()
		return failure(res)
	}
	if err != nil {
		return err
	}
	if prev != nil && prev.UID != string(pod.UID) {
		// Same name, new pod (StatefulSet): the old one's CPUs go back first.
		res := c.pools.Forget(prev.UID, c.allPods)
		c.report(ctx, prev, nil, res, time.Time{}, false)
	}
	c.rememberPod(pod)
	info := c.podInfo(pod)
	res := c.pools.Sync(info, c.allPods)
	c.mu.Lock()
	lateAt, late := c.late[key]
	delete(c.late, key)
	c.mu.Unlock()
	if late && res.Written > 0 {
		c.metrics.lateLatency.Observe(time.Since(lateAt).Seconds())
	}
	c.report(ctx, &knownPod{UID: info.UID, Namespace: info.Namespace, Name: info.Name}, pod, res, since, timed)
	return failure(res)
}

func failure(res syncResult) error {
	if len(res.Failed) == 0 {
		return nil
	}
	var errs []error
	for _, e := range res.Failed {
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}

// report turns a sync result into metrics, Events, annotations and
// requeues of other pods whose writes failed.
func (c *controller) report(ctx context.Context, who *knownPod, pod *corev1.Pod, res syncResult, since time.Time, timed bool) {
	c.metrics.observe(c.pools.State(), res, since, timed)
	for _, ev := range res.Events {
		c.events.emit(ctx, who, ev)
	}
	c.emitDrift(ctx, res)
	for uid, err := range res.Failed {
		if uid == who.UID {
			continue
		}
		// A shared pod failed during a refresh triggered by another pod:
		// its own Event, and its own retry.
		if objs, _ := c.indexer.ByIndex(uidIndex, uid); len(objs) == 1 {
			if p, ok := objs[0].(*corev1.Pod); ok {
				c.events.emit(ctx, &knownPod{UID: uid, Namespace: p.Namespace, Name: p.Name}, podEvent{Warning: true, Reason: "CgroupWriteFailed", Message: err.Error()})
				c.queue.AddRateLimited(p.Namespace + "/" + p.Name)
			}
		}
	}
	// Annotations go to the API server from their own worker: the next
	// change of this pod must not wait behind this one's round trip.
	if pod != nil && res.Status != nil {
		key := pod.Namespace + "/" + pod.Name
		c.mu.Lock()
		c.pending[key] = pendingStatus{uid: string(pod.UID), status: *res.Status, allocated: res.AllocatedCPUs}
		c.mu.Unlock()
		c.statusQ.Add(key)
	}
	if res.SharedChanged {
		c.statusQ.Add(nodeKey)
	}
}

// nodeKey is the status queue's key for the Node annotations.
const nodeKey = "\x00node"

// pendingStatus is the latest status annotation decided for a pod.
type pendingStatus struct {
	uid       string
	status    Status
	allocated string
}

// runStatusWorker writes the annotations the reconciler decided, newest
// first-come: a pod changed twice before its patch went out gets one patch
// with the latest values.
func (c *controller) runStatusWorker(ctx context.Context) {
	for {
		key, quit := c.statusQ.Get()
		if quit {
			return
		}
		err := c.writeStatus(ctx, key)
		if err != nil {
			c.log.Error(err, "annotation patch failed; retried", "object", key)
			c.statusQ.AddRateLimited(key)
		} else {
			c.statusQ.Forget(key)
		}
		c.statusQ.Done(key)
	}
}

func (c *controller) writeStatus(ctx context.Context, key string) error {
	if key == nodeKey {
		return c.patchNode(ctx)
	}
	c.mu.Lock()
	ps, ok := c.pending[key]
	c.mu.Unlock()
	if !ok {
		return nil
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := c.lister.Pods(ns).Get(name)
	if err != nil || string(pod.UID) != ps.uid {
		c.dropPending(key, ps)
		return nil // gone or replaced: nothing to report on
	}
	if err := c.patchStatus(ctx, pod, ps); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			c.dropPending(key, ps)
			return nil
		}
		return err
	}
	c.dropPending(key, ps)
	return nil
}

// dropPending forgets ps unless a newer status replaced it meanwhile.
func (c *controller) dropPending(key string, ps pendingStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.pending[key]; ok && cur == ps {
		delete(c.pending, key)
	}
}

// patchStatus writes cgpilot.io/status and cgpilot.io/allocated-cpus when
// they differ from the pod's current values.
func (c *controller) patchStatus(ctx context.Context, pod *corev1.Pod, res pendingStatus) error {
	status := res.status.Encode()
	ann := map[string]any{}
	if pod.Annotations[AnnotationStatus] != status {
		ann[AnnotationStatus] = status
	}
	cur, has := pod.Annotations[AnnotationAllocatedCPUs]
	switch {
	case res.allocated != "" && cur != res.allocated:
		ann[AnnotationAllocatedCPUs] = res.allocated
	case res.allocated == "" && has && res.status.State != StateRefused && res.status.State != StateFailed:
		ann[AnnotationAllocatedCPUs] = nil // JSON merge patch: remove
	}
	if len(ann) == 0 {
		return nil
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann, "uid": string(pod.UID)}})
	_, err := c.cs.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "cgpilot-agent"})
	return err
}

// patchNode publishes the shared pool and the pool summary on the Node.
func (c *controller) patchNode(ctx context.Context) error {
	s := c.summary()
	ann := map[string]string{AnnotationSharedPool: s.SharedPool, AnnotationPoolSummary: s.Encode()}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	c.mu.Lock()
	same := c.node == string(body)
	c.mu.Unlock()
	if same {
		return nil
	}
	if _, err := c.cs.CoreV1().Nodes().Patch(ctx, c.cfg.NodeName, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "cgpilot-agent"}); err != nil {
		return err
	}
	c.mu.Lock()
	c.node = string(body)
	c.mu.Unlock()
	return nil
}

func (c *controller) summary() NodeSummary {
	st := c.pools.State()
	s := NodeSummary{
		CPUs: st.All().String(), Reserved: st.Reserved().String(), SharedPool: st.SharedPool().String(),
		Exclusive: st.Exclusive().String(), KubeletStatic: st.KubeletTaken().String(),
		ExclusiveCap: c.pools.policy.cap(st), ExclusivePods: len(st.Assignments()), TopologySource: c.pools.topologySource, Topology: c.topo, NUMANodes: c.numaNodes,
	}
	for _, p := range c.allPods() {
		if !p.Untouched {
			if _, ok := st.Assignment(p.UID); !ok {
				s.SharedPods++
			}
		}
	}
	return s
}

// allPods lists the node's pods as podInfo, sorted by key.
func (c *controller) allPods() []podInfo {
	pods, _ := c.lister.List(labels.Everything())
	out := make([]podInfo, 0, len(pods))
	for _, p := range pods {
		out = append(out, c.podInfo(p))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func (c *controller) podInfo(p *corev1.Pod) podInfo {
	req, err := ParseAnnotations(p.Annotations)
	c.mu.Lock()
	static := c.kubelet.Pods[string(p.UID)]
	c.mu.Unlock()
	info := podInfo{
		Key: p.Namespace + "/" + p.Name, UID: string(p.UID), Namespace: p.Namespace, Name: p.Name,
		Generation: p.Generation, QoS: qosClass(p), Req: req, ReqErr: err, DemandCPUs: cpuDemand(p), KubeletStatic: static,
	}
	limits := map[string]corev1.ResourceList{}
	for _, ctr := range p.Spec.Containers {
		limits[ctr.Name] = ctr.Resources.Limits
	}
	for _, sts := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for _, st := range sts {
			info.Containers = append(info.Containers, containerState{ID: st.ContainerID, Running: st.State.Running != nil, Terminated: st.State.Terminated != nil})
			if st.ContainerID != "" && st.State.Running != nil {
				if info.Running == nil {
					info.Running = map[string]bool{}
				}
				info.Running[st.ContainerID] = true
			}
		}
	}
	info.AllReported = len(p.Status.ContainerStatuses) >= len(p.Spec.Containers) && len(p.Status.InitContainerStatuses) >= len(p.Spec.InitContainers)
	info.Deleting = p.DeletionTimestamp != nil
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		info.Terminal = string(p.Status.Phase)
	}
	for _, st := range p.Status.ContainerStatuses {
		if st.ContainerID == "" {
			continue
		}
		if info.CPULimitsMilli == nil {
			info.CPULimitsMilli = map[string]int64{}
		}
		q := limits[st.Name][corev1.ResourceCPU]
		info.CPULimitsMilli[st.ContainerID] = q.MilliValue()
	}
	info.Untouched = !c.cfg.manages(p.Namespace) || static || (err == nil && req.Pool == PoolNone) ||
		p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	return info
}

// cpuDemand is the pod's CPU limit (else request) over its app containers,
// or the largest init container's if larger, rounded up to whole CPUs.
func cpuDemand(p *corev1.Pod) int {
	of := func(cs []corev1.Container) (sum, maxOne int64) {
		for _, c := range cs {
			q, ok := c.Resources.Limits[corev1.ResourceCPU]
			if !ok {
				q = c.Resources.Requests[corev1.ResourceCPU]
			}
			m := q.MilliValue()
			sum += m
			maxOne = max(maxOne, m)
		}
		return
	}
	app, _ := of(p.Spec.Containers)
	_, initMax := of(p.Spec.InitContainers)
	m := max(app, initMax)
	return int((m + 999) / 1000)
}

// qosClass is the pod's QoS class: the status field when the kubelet has
// set it, else computed by the Kubernetes rule.
func qosClass(p *corev1.Pod) QoSClass {
	switch p.Status.QOSClass {
	case corev1.PodQOSGuaranteed:
		return QoSGuaranteed
	case corev1.PodQOSBurstable:
		return QoSBurstable
	case corev1.PodQOSBestEffort:
		return QoSBestEffort
	}
	any, guaranteed := false, true
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			if hasReq || hasLim {
				any = true
			}
			if !hasLim || (hasReq && req.Cmp(lim) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !any:
		return QoSBestEffort
	case guaranteed:
		return QoSGuaranteed
	}
	return QoSBurstable
}

// enqueueAll queues every pod of the node.
func (c *controller) enqueueAll() {
	pods, _ := c.lister.List(labels.Everything())
	now := time.Now()
	for _, p := range pods {
		c.rememberPod(p)
		c.enqueue(p.Namespace+"/"+p.Name, now)
	}
}

// refreshKubeletState re-reads cpu_manager_state; on a change it updates the
// taken set and requeues every pod.
func (c *controller) refreshKubeletState() {
	ks, err := readKubeletState(c.cfg.KubeletCPUManagerState)
	if err != nil {
		c.log.Error(err, "keeping the last good kubelet CPU manager view")
		return
	}
	c.mu.Lock()
	changed := !ks.Taken.Equals(c.kubelet.Taken) || len(ks.Pods) != len(c.kubelet.Pods)
	c.kubelet = ks
	c.mu.Unlock()
	if changed {
		c.pools.mu.Lock()
		c.pools.state.setKubeletTaken(ks.Taken)
		c.pools.mu.Unlock()
		c.enqueueAll()
	}
}

// sweep re-applies every pod's target (missed cgroup creations, drift).
func (c *controller) sweep(ctx context.Context) {
	c.refreshKubeletState()
	res := c.pools.Sweep(c.allPods())
	c.metrics.observe(c.pools.State(), res, time.Time{}, false)
	c.emitDrift(ctx, res)
	for uid := range res.Failed {
		if objs, _ := c.indexer.ByIndex(uidIndex, uid); len(objs) == 1 {
			if p, ok := objs[0].(*corev1.Pod); ok {
				c.queue.AddRateLimited(p.Namespace + "/" + p.Name)
			}
		}
	}
	_ = ctx
}

// emitDrift sends one Event per pod whose cgroups were found changed behind
// the agent's back and set again.
func (c *controller) emitDrift(ctx context.Context, res syncResult) {
	if len(res.DriftPaths) > 0 {
		c.log.Info("drift: cgroup files changed by someone else, set back", "files", res.DriftPaths)
	}
	for uid, n := range res.DriftUIDs {
		objs, _ := c.indexer.ByIndex(uidIndex, uid)
		if len(objs) != 1 {
			continue
		}
		p, ok := objs[0].(*corev1.Pod)
		if !ok {
			continue
		}
		c.events.emit(ctx, &knownPod{UID: uid, Namespace: p.Namespace, Name: p.Name}, podEvent{Warning: true, Reason: "DriftCorrected",
			Message: fmt.Sprintf("%d cgroup file(s) had been changed by someone else; set back to the pod's pool", n)})
	}
}

func (c *controller) String() string { return fmt.Sprintf("controller(%s)", c.cfg.NodeName) }
