package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/cgpilot/cgpilot/agent/kube"
	"github.com/cgpilot/cgpilot/agent/podspec"
	"github.com/cgpilot/cgpilot/agent/pools"
	"github.com/cgpilot/cgpilot/agent/rightsize/runner"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/internal/loop"
)

// controller reconciles pods into pools: it pops a key from the workqueue,
// lets the pools plan and apply, then reports (status annotation, Event,
// metrics) and requeues on failure.
// fieldManager names the agent's writes in managedFields.
const fieldManager = kube.FieldManager

type controller struct {
	cfg      Config
	kube     kube.Interface
	informer cache.SharedIndexInformer
	lister   corelisters.PodLister
	indexer  cache.Indexer
	queue    workqueue.TypedRateLimitingInterface[string]
	statusQ  workqueue.TypedRateLimitingInterface[string] // annotation patches, off the cgroup path
	pools    *pools.Manager
	cgroups  *cgroup.Kubepods
	rs       *runner.Runner // nil when right-sizing is off
	events   *eventLog
	metrics  *metrics
	log      logr.Logger
	health   *health
	guard    *loop.Guard // every long-lived loop's recover-and-count (loops.go)

	broadcaster record.EventBroadcaster // shut down when Run returns
	sink        *gatedSink              // closed after it: no Event write outlives Run
	wg          sync.WaitGroup          // every goroutine Run starts (spawn)

	topologySource string // where the allocator's topology came from
	topo           string // topology summary for the local API
	numaNodes      int

	mu      sync.Mutex
	since   map[string]time.Time     // key -> first unprocessed change
	late    map[string]time.Time     // key -> first new container cgroup seen
	pending map[string]pendingStatus // key -> latest status annotation to write
	known   map[string]*knownPod     // key -> last seen identity (for deletes)
	kubelet kubeletStatic
	podres  *podResources // nil: the kubelet's view comes from its checkpoint file
	node    string        // last node annotations written (JSON of both)
}

type knownPod struct {
	podRef
	// last is the pod as last seen, for its containers once it is gone.
	last pools.Pod
	// goneAt is when the reconciler first found the pod gone from the API
	// while a container of it still ran.
	goneAt time.Time
}

// maxWaitGone bounds how long a force-deleted pod's cores wait for its
// containers to exit (the kubelet kills them within seconds).
const maxWaitGone = time.Minute

// pendingRetry is how soon a pod whose cgroups are half created (one
// hierarchy at a time) is synced again.
const pendingRetry = 200 * time.Millisecond

func (c *controller) rememberPod(p *corev1.Pod) {
	info := c.podInfo(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.known[podspec.Key(p.Namespace, p.Name)] = &knownPod{podRef: podRef{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name}, last: info}
}

// runWorker is reconcile worker i, until the queue is shut down and
// drained.
func (c *controller) runWorker(ctx context.Context, i int) {
	c.health.workerStarted()
	defer c.health.workerStopped()
	loop.Work(c.queue, func(key string) error {
		c.health.reconciling(i)
		err := c.reconcileSafely(ctx, key)
		c.health.reconciled(i)
		return err
	}, func(key string, err error) {
		c.log.Error(err, "reconcile failed; requeued", "pod", key)
	})
}

// reconcileSafely runs reconcile as an iteration of the reconcile loop
// (loops.go): a panic becomes an error for this pod (counted, logged with
// the stack, an Event on the pod, a requeue with backoff) instead of a
// dead agent: input no test foresaw must cost one pod, not the node.
func (c *controller) reconcileSafely(ctx context.Context, key string) error {
	err := c.guard.DoErr(loopReconcile, func() error { return c.reconcile(ctx, key) })
	var p *loop.Panic
	if !errors.As(err, &p) {
		return err
	}
	if ns, name, serr := cache.SplitMetaNamespaceKey(key); serr == nil {
		if pod, gerr := c.lister.Pods(ns).Get(name); gerr == nil {
			c.events.emit(&podRef{UID: string(pod.UID), Namespace: ns, Name: name}, pools.Event{Warning: true, Reason: local.EventReconcilePanic,
				Message: fmt.Sprintf("the agent failed on this pod (%v); retried with backoff, other pods are not affected", p.Value)})
		}
	}
	return err
}

// forgetLate drops the late-container mark of a pod deleted before the
// reconcile its cgroup event queued (the mark is otherwise taken by the
// reconcile that writes the container's cgroups).
func (c *controller) forgetLate(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.late, key)
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
			c.forgetLate(key)
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
		if c.pools.StillRunning(prev.last) {
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
		c.report(ctx, &prev.podRef, nil, res, since, timed)
		if _, failed := res.Failed[prev.UID]; failed {
			return failure(res) // the pod stays known: the release is retried
		}
		if c.rs != nil {
			c.rs.Untrack(prev.UID)
		}
		c.mu.Lock()
		delete(c.known, key)
		delete(c.late, key)
		c.mu.Unlock()
		return failure(res)
	}
	if err != nil {
		return err
	}
	if prev != nil && prev.UID != string(pod.UID) {
		// Same name, new pod (StatefulSet): the old one's CPUs go back first.
		res := c.pools.Forget(prev.UID, c.allPods)
		c.report(ctx, &prev.podRef, nil, res, time.Time{}, false)
		if _, failed := res.Failed[prev.UID]; failed {
			return failure(res)
		}
	}
	if c.kubeletMayOwn(pod) {
		c.refreshKubeletState(ctx, "pod") // now, not at the next sweep
	}
	c.rememberPod(pod)
	info := c.podInfo(pod)
	if c.rs != nil {
		// Sampling and the OOM watch first: they must not wait for the
		// pools' cgroup writes.
		c.rs.Track(pod, info.Untouched, info.QoS)
	}
	res := c.pools.Sync(info, c.allPods)
	c.mu.Lock()
	lateAt, late := c.late[key]
	delete(c.late, key)
	c.mu.Unlock()
	if late && res.Written > 0 {
		c.metrics.lateLatency.Observe(time.Since(lateAt).Seconds())
	}
	c.report(ctx, &podRef{UID: info.UID, Namespace: info.Namespace, Name: info.Name}, pod, res, since, timed)
	if c.rs != nil {
		c.rs.Verify(pod)
	}
	if res.Pending[info.UID] {
		c.queue.AddAfter(key, pendingRetry)
	}
	return failure(res)
}

func failure(res pools.Result) error {
	if len(res.Failed) == 0 {
		return nil
	}
	var errs []error
	for _, e := range res.Failed {
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}

// report turns a result into metrics, Events, annotations and requeues of
// other pods whose writes failed or whose cgroups were not ready.
func (c *controller) report(ctx context.Context, who *podRef, pod *corev1.Pod, res pools.Result, since time.Time, timed bool) {
	c.metrics.observe(c.pools.State(), res, since, timed)
	for _, ev := range res.Events {
		c.events.emit(who, ev)
	}
	c.emitDrift(res)
	for uid, err := range res.Failed {
		if uid == who.UID {
			continue
		}
		// A shared pod failed during a refresh triggered by another pod:
		// its own Event, and its own retry.
		if p := c.PodByUID(uid); p != nil {
			c.events.emit(&podRef{UID: uid, Namespace: p.Namespace, Name: p.Name}, pools.Event{Warning: true, Reason: local.EventCgroupWriteFailed, Message: err.Error()})
			c.queue.AddRateLimited(podspec.Key(p.Namespace, p.Name))
		}
	}
	for uid := range res.Pending {
		if p := c.PodByUID(uid); p != nil && uid != who.UID {
			c.queue.AddAfter(podspec.Key(p.Namespace, p.Name), pendingRetry)
		}
	}
	// Annotations go to the API server from their own worker: the next
	// change of this pod must not wait behind this one's round trip.
	if pod != nil && res.Status != nil {
		key := podspec.Key(pod.Namespace, pod.Name)
		c.mu.Lock()
		c.pending[key] = pendingStatus{uid: string(pod.UID), status: *res.Status, allocated: res.AllocatedCPUs}
		c.mu.Unlock()
		c.statusQ.Add(key)
	}
	if res.SharedChanged {
		c.statusQ.Add(nodeKey)
	}
	if res.Unsaved {
		c.statusQ.Add(checkpointKey)
	}
}

// PodByUID is the informer's pod of that UID (the uid index), nil when
// there is none; it is right-sizing's Host.PodByUID too (rsHost).
func (c *controller) PodByUID(uid string) *corev1.Pod {
	objs, _ := c.indexer.ByIndex(uidIndex, uid)
	if len(objs) != 1 {
		return nil
	}
	p, _ := objs[0].(*corev1.Pod)
	return p
}

// nodeKey is the status queue's key for the Node annotations.
const nodeKey = "\x00node"

// checkpointKey is the status queue's key for the part of the pools'
// checkpoint a reconcile left unwritten (pools.Result.Unsaved): its fsync
// waits for neither the cgroup write nor the pod's next change.
const checkpointKey = "\x00checkpoint"

// pendingStatus is the latest status annotation decided for a pod.
type pendingStatus struct {
	uid       string
	status    local.Status
	allocated string
}

// statusWorkers write annotations at once. One kept up with a quiet API
// server, but under pod churn on a loaded one (a patch taking 0.35 s) its
// queue held 65 keys that waited 12.5 s on average; keys are independent
// (each pod's pending status and recommendation are taken and dropped under
// their own locks, and the queue gives a key to one worker at a time).
const statusWorkers = 4

// runStatusWorker writes the annotations the reconciler decided, newest
// first-come: a pod changed twice before its patch went out gets one patch
// with the latest values; and the checkpoint's deferred part (checkpointKey).
func (c *controller) runStatusWorker(ctx context.Context) {
	loop.Work(c.statusQ, func(key string) error {
		return c.guard.DoErr(loopStatus, func() error { return c.writeStatus(ctx, key) })
	}, func(key string, err error) {
		if ctx.Err() != nil {
			// Stopping: not retried here; the next start writes the
			// annotations again from the state (and Run flushes the
			// checkpoint).
			c.log.V(1).Info("write not done: the agent is stopping", "object", key, "err", err.Error())
			return
		}
		if key == checkpointKey {
			c.log.Error(err, "saving a release-isolation change in the checkpoint failed; retried (the cgroups hold it already)")
			return
		}
		c.log.Error(err, "annotation patch failed; retried", "object", key)
	})
}

func (c *controller) writeStatus(ctx context.Context, key string) error {
	switch key {
	case nodeKey:
		return c.patchNode(ctx)
	case checkpointKey:
		return c.pools.Flush()
	}
	if rest, ok := strings.CutPrefix(key, runner.RecKeyPrefix); ok {
		if c.rs == nil {
			return nil
		}
		return c.rs.WriteRecommendation(ctx, rest)
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
	if pod.Annotations[local.AnnotationStatus] != status {
		ann[local.AnnotationStatus] = status
	}
	cur, has := pod.Annotations[local.AnnotationAllocatedCPUs]
	switch {
	case res.allocated != "" && cur != res.allocated:
		ann[local.AnnotationAllocatedCPUs] = res.allocated
	case res.allocated == "" && has && res.status.State != local.StateRefused && res.status.State != local.StateFailed:
		ann[local.AnnotationAllocatedCPUs] = nil // JSON merge patch: remove
	}
	if len(ann) == 0 {
		return nil
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann, "uid": string(pod.UID)}})
	return c.kube.PatchPod(ctx, pod.Namespace, pod.Name, types.MergePatchType, body, fieldManager)
}

// patchNode publishes the shared pool and the pool summary on the Node.
func (c *controller) patchNode(ctx context.Context) error {
	s := c.summary()
	ann := map[string]string{local.AnnotationSharedPool: s.SharedPool, local.AnnotationPoolSummary: s.Encode()}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	c.mu.Lock()
	same := c.node == string(body)
	c.mu.Unlock()
	if same {
		return nil
	}
	if err := c.kube.PatchNode(ctx, c.cfg.NodeName, types.MergePatchType, body, fieldManager); err != nil {
		return err
	}
	c.mu.Lock()
	c.node = string(body)
	c.mu.Unlock()
	return nil
}

func (c *controller) summary() local.NodeSummary {
	st := c.pools.State()
	all := c.allPods()
	s := local.NodeSummary{
		CPUs: st.All().String(), Reserved: st.Reserved().String(), SharedPool: st.SharedPool().String(),
		Exclusive: st.Exclusive().String(), KubeletStatic: st.KubeletTaken().String(),
		ExclusiveCap: c.pools.Cap(all), ExclusivePods: len(st.Assignments()), TopologySource: c.topologySource, Topology: c.topo, NUMANodes: c.numaNodes,
	}
	for _, p := range all {
		if !p.Untouched {
			if _, ok := st.Assignment(p.UID); !ok {
				s.SharedPods++
			}
		}
	}
	return s
}

// allPods lists the node's pods as pools.Pod, sorted by key.
func (c *controller) allPods() []pools.Pod {
	pods := c.listPods()
	out := make([]pools.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, c.podInfo(p))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// podInfo is poolPod with the kubelet's static view of the pod.
func (c *controller) podInfo(p *corev1.Pod) pools.Pod {
	c.mu.Lock()
	static := c.kubelet.holds(string(p.UID), podspec.Key(p.Namespace, p.Name))
	c.mu.Unlock()
	return c.poolPod(p, static)
}

// refreshKubeletState re-reads the kubelet's CPU manager view; on a change
// it updates the taken set and requeues every pod.
func (c *controller) refreshKubeletState(ctx context.Context, why string) {
	c.metrics.kubeletReads.WithLabelValues(why).Inc()
	var ks kubeletStatic
	var err error
	if c.podres != nil {
		ks, err = c.podres.read(ctx)
	} else {
		ks, err = readKubeletState(c.cfg.KubeletCPUManagerState)
	}
	if err != nil {
		c.log.Error(err, "keeping the last good kubelet CPU manager view")
		return
	}
	c.mu.Lock()
	podsChanged := !maps.Equal(ks.Pods, c.kubelet.Pods)
	c.kubelet = ks
	c.mu.Unlock()
	if c.pools.SetKubeletTaken(ks.Taken) || podsChanged {
		c.enqueueAll()
	}
}

// The safety-net sweep. Changes reach the pools as events (the pod
// informer; the cgroup watch: new and removed cgroups, writes to a pod's
// cpuset or quota); the sweep is there for what an event cannot bring (an
// overflowed inotify queue, cgroups beyond the watch limit, a watch that
// could not start). It checks each pod once per SweepInterval, spread over
// the interval: one slice of the pods, by UID, every sweepTick.
const (
	// minSweepTick is the shortest pause between two slices.
	minSweepTick = 10 * time.Second
	// maxSweepSlices bounds the slices of one interval.
	maxSweepSlices = 30
	// allSlices sweeps every pod at once (the agent's first sweep).
	allSlices = -1
)

// sweepSlices is how many slices one interval is cut into: one a
// minSweepTick, at most maxSweepSlices, one when the interval is short.
func sweepSlices(interval time.Duration) int {
	return int(min(max(interval/minSweepTick, 1), maxSweepSlices))
}

// sweepTick is the pause between two slices.
func sweepTick(interval time.Duration) time.Duration {
	return interval / time.Duration(sweepSlices(interval))
}

// maxHousekeep bounds how often right-sizing's housekeeping walks every
// pod: once a minute at most, once per SweepInterval when that is shorter
// (the churn soak's 2 s).
const maxHousekeep = time.Minute

// housekeepEvery is right-sizing's housekeeping period for a sweep
// interval.
func housekeepEvery(interval time.Duration) time.Duration {
	return min(interval, maxHousekeep)
}

// sweepSlice is the slice of pod uid among n.
func sweepSlice(uid string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(uid))
	return int(h.Sum32() % uint32(n))
}

// sweep re-applies the targets of the pods of one slice (allSlices: every
// pod), each listed afresh: missed cgroup creations, drift.
func (c *controller) sweep(ctx context.Context, slice int) {
	defer c.health.swept()
	c.probeAPI(ctx)
	c.refreshKubeletState(ctx, "sweep")
	var pods []*corev1.Pod
	if slice == allSlices {
		pods = c.listPods()
	} else {
		objs, _ := c.indexer.ByIndex(sliceIndex, strconv.Itoa(slice))
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok {
				pods = append(pods, p)
			}
		}
	}
	var some []pools.Pod
	for _, p := range pods {
		some = append(some, c.podInfo(p))
	}
	sort.Slice(some, func(i, j int) bool { return some[i].Key < some[j].Key })
	res := c.pools.Sweep(some)
	c.metrics.observe(c.pools.State(), res, time.Time{}, false)
	c.emitDrift(res)
	for uid := range res.Failed {
		if p := c.PodByUID(uid); p != nil {
			c.queue.AddRateLimited(podspec.Key(p.Namespace, p.Name))
		}
	}
	// A release that failed (its checkpoint write) is retried from here
	// too: a deleted pod's key stays known until its release succeeds.
	// Only pods holding cores can be such a pod: they are walked, not
	// every known pod.
	var retry []string
	for _, a := range c.pools.State().Assignments() {
		if c.PodByUID(a.UID) != nil {
			continue
		}
		key := podspec.Key(a.Namespace, a.Name)
		c.mu.Lock()
		k := c.known[key]
		c.mu.Unlock()
		if k != nil && k.UID == a.UID {
			retry = append(retry, key)
		}
	}
	for _, key := range retry {
		c.queue.Add(key)
	}
}

// emitDrift sends one Event per pod whose cgroups were found changed behind
// the agent's back and set again.
func (c *controller) emitDrift(res pools.Result) {
	if len(res.DriftWrites) > 0 {
		found := make([]string, 0, len(res.DriftWrites))
		for _, w := range res.DriftWrites {
			found = append(found, fmt.Sprintf("%s: found %q, set %q", w.File, w.Old, w.New))
		}
		c.log.Info("drift: cgroup files changed by someone else, set back", "files", found)
	}
	for uid, n := range res.DriftUIDs {
		p := c.PodByUID(uid)
		if p == nil {
			continue
		}
		c.events.emit(&podRef{UID: uid, Namespace: p.Namespace, Name: p.Name}, pools.Event{Warning: true, Reason: local.EventDriftCorrected,
			Message: fmt.Sprintf("%d cgroup file(s) had been changed by someone else; set back to the pod's pool", n)})
	}
}
