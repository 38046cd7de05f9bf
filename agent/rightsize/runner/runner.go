package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/agent/collector"
	"github.com/cgpilot/cgpilot/agent/history"
	"github.com/cgpilot/cgpilot/agent/kube"
	"github.com/cgpilot/cgpilot/agent/oomwatch"
	"github.com/cgpilot/cgpilot/agent/podspec"
	"github.com/cgpilot/cgpilot/agent/reporter"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/internal/loop"
	"github.com/cgpilot/cgpilot/recommend"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// runner.go: right-sizing in place. The path of one pod: the agent's
// reconcile calls Track (its containers become collector targets and
// OOM-watched cgroups); every sampling round feeds the histograms
// (rightsize.Engine) and the history, then decideAll asks rightsize.Decide
// for the pods whose step is due; a change goes to the apply queue
// (apply.go: pods/resize, or the cgroups where the cluster lacks it) and
// the decision to the cgpilot.io/recommendation annotation. An OOM kill
// (oom.go) raises the container's memory at once, outside the steps.

// Runner is right-sizing on one node: it tracks the pods the agent hands
// it, samples them, decides, applies and raises memory after OOM kills.
type Runner struct {
	host    Host
	kube    kube.Interface
	cgroups *cgroup.Kubepods
	log     logr.Logger
	guard   *loop.Guard
	spawn   func(func())
	m       *Metrics
	writes  prometheus.Counter
	drift   prometheus.Counter
	cfg     Options // the intervals and names (Options' plain fields)
	engine  *rightsize.Engine
	coll    *collector.Collector
	hist    *history.Store
	oom     *oomwatch.Watcher
	owners  *ownerCache
	// housekept is when Sweep last walked every pod (HousekeepEvery).
	housekept time.Time
	// statusCounted is when Sweep last counted every pod for the policies'
	// status (HousekeepEvery); statusAgain, when an entry not written then
	// is owed; statusDue asks for a count at the next sweep tick (a policy
	// changed).
	statusCounted, statusAgain time.Time
	statusDue                  atomic.Bool
	apply                      *applier
	// bounds are the namespaces' LimitRanges and the node's allocatable,
	// for the clamp.
	bounds *nodeBounds
	// rep reports to the cluster aggregator; nil when it is off.
	rep *reporter.Reporter
	// policiesP holds the policy index once the RightsizePolicy CRD is
	// served (nil before): read by the workers, set by the sweep.
	policiesP   atomic.Pointer[policyIndex]
	dyn         dynamic.Interface // the RightsizePolicy client, set with policiesP
	informers   sync.WaitGroup    // the policy and namespace informers, until ctx ends
	warnedNoCRD bool
	// statusWritten is when this node last wrote each policy's status
	// entry, and what.
	statusWritten map[string]nodeStatusMark

	mu sync.Mutex
	// pods are the tracked pods by UID. A reconcile may forget one
	// whenever mu is free, so a lookup made after mu was released (a UID
	// listed earlier) tolerates its absence.
	pods map[string]*rsPod
	// queue orders the tracked pods by their next decision.
	queue dueQueue
	dirs  map[string]ctrRef     // OOM-watched memory dir -> container
	last  map[string]lastSample // by runtime container ID
	// pendingRec are recommendation annotations to write, by pod key.
	pendingRec *pending[pendingRecommendation]
	// due asks decideAll to run before the next round (a policy changed).
	due chan struct{}
	// running is when each workload container key last had a tracked pod
	// (the sweep's view), for ForgetAfter; the sweep alone uses it.
	running map[string]time.Time
	// bumped, when set (by the kernel benchmark), is told the latency of
	// each OOM bump from the kill to the written limit.
	bumped func(oomwatch.Event, time.Duration)
	// beforeLookup, when set (tests), runs in input and oomInput just
	// before the tracked pod is looked up: the window in which a pod a
	// caller found is forgotten by its delete.
	beforeLookup func(uid string)
	holds        uint64 // the last rsPod.held given
	// afterQuiet runs f once a resized pod's quiet time (resizedQuiet) is
	// over: time.AfterFunc; tests catch f.
	afterQuiet func(f func())
}

type ctrRef struct{ uid, container string }

type lastSample struct {
	usage, workingSet float64
}

type pendingRecommendation struct {
	uid   string
	value string // "" removes the annotation
}

// rsPod is one tracked pod.
type rsPod struct {
	ref        PodRef
	workload   report.Workload
	qos        cgroup.QoS
	containers map[string]rsContainer // by name
	// next is when the pod's next decision is due; fingerprint is what it
	// was decided on (a policy or annotation change decides at once).
	next        time.Time
	due         int // the pod's place in Runner.queue (-1: not queued)
	fingerprint string
	decision    rightsize.Decision
	state       string // the annotation's state
	reason      string
	lastApplied time.Time
	// held: the annotation of the resize pods/resize just accepted
	// (stateResized) waits for holdAnnotation's timer of this number (0:
	// not held).
	held uint64
	// heldEvent is the Event of the last resize pods/resize accepted, not
	// sent yet: the next state (verify's Applied, a failure) or the hold's
	// timer sends it, whichever comes first.
	heldEvent *heldEvent
	// decisions counts the decisions made (decide), so that settle, which
	// decides outside the lock, does not replace a later one.
	decisions uint64
	// oomFloor keeps an OOM-bumped memory limit from being taken back by
	// a step decision while the kill is recent.
	oomFloor      map[string]float64
	oomFloorUntil time.Time
	// answered is each container's last OOM raise: a kill of the OOM it
	// answered is not raised again (sameOOM).
	answered map[string]oomAnswer
	// lastResize is when a step resize was last asked (or, after a
	// restart, applied as the recommendation annotation says): the next
	// waits a step.
	lastResize time.Time
	// refused is the lowest memory limit pods/resize refused to keep for
	// each container after an OOM bump: later bumps stay below it.
	refused map[string]float64
	// revert: the cgroups of a refused bump are not back at the spec's
	// values yet (usage held them up); each sweep tries again.
	revert bool
	// original are the requests the pod had when the agent first saw it
	// (or as its recommendation annotation remembers them): the "before"
	// of the capacity right-sizing released.
	original map[string]rightsize.Requirements
}

// decide makes d the pod's decision (under Runner.mu).
func (rp *rsPod) decide(d rightsize.Decision) {
	rp.decision = d
	rp.decisions++
}

// containerKey is the workload container key of a tracked pod's
// container: the histograms', the history's and the reports' key.
func containerKey(rp *rsPod, container string) string {
	return report.Key{Workload: rp.workload, Container: container}.String()
}

type rsContainer struct {
	id, path, memDir string
}

func newRunner(o Options) *Runner {
	r := &Runner{host: o.Host, kube: o.Kube, cgroups: o.Cgroups, log: o.Log, guard: o.Guard, spawn: o.Spawn, m: o.Metrics, writes: o.Writes, drift: o.Drift, cfg: o,
		engine: o.Engine, hist: o.History, oom: o.OOM, rep: o.Reporter,
		pods: map[string]*rsPod{}, dirs: map[string]ctrRef{}, last: map[string]lastSample{}, pendingRec: newPending(func(p pendingRecommendation) string { return p.uid }, func(a, b pendingRecommendation) bool { return a == b }),
		due: make(chan struct{}, 1), statusWritten: map[string]nodeStatusMark{}, running: map[string]time.Time{}}
	r.owners = newOwnerCache(o.Kube, func(namespace, name string) {
		if p, err := r.host.Pod(namespace, name); err == nil && p != nil {
			r.host.Requeue(p)
		}
	})
	return r
}

// Round keeps each container's latest memory use, for the floors
// (collector.Sink). A round read before a pod was forgotten may end after
// it: only the current containers of tracked pods are kept.
func (r *Runner) Round(_ time.Time, samples []collector.Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range samples {
		s := &samples[i]
		if rp := r.pods[s.Target.PodUID]; rp == nil || rp.containers[s.Target.Container].id != s.Target.ID {
			continue
		}
		r.last[s.Target.ID] = lastSample{usage: float64(s.MemoryUsage), workingSet: float64(s.MemoryWorkingSet)}
	}
}

// policyChanged makes every pod decide again at the next chance.
func (r *Runner) policyChanged() {
	r.mu.Lock()
	for _, rp := range r.pods {
		r.scheduleLocked(rp, time.Time{})
	}
	r.mu.Unlock()
	r.statusDue.Store(true)
	select {
	case r.due <- struct{}{}:
	default:
	}
}

// Track makes the pod's running containers sampled and OOM-watched, or
// stops that for a pod that is not managed any more.
func (r *Runner) Track(p *corev1.Pod, untouched bool, qos cgroup.QoS) {
	if untouched || p.DeletionTimestamp != nil {
		r.Untrack(string(p.UID))
		return
	}
	wl := r.owners.workloadOf(p)
	ids := containerIDs(p, true)
	var targets []collector.Target
	ctrs := map[string]rsContainer{}
	for _, spec := range p.Spec.Containers {
		id, path, ok := r.containerPath(p, qos, ids, spec.Name)
		if !ok {
			continue
		}
		dirs, err := r.cgroups.Layout().DirsAt(path)
		if err != nil {
			continue
		}
		key := report.Key{Workload: wl, Container: spec.Name}.String()
		targets = append(targets, collector.Target{Key: key, PodUID: string(p.UID), Pod: podspec.Key(p.Namespace, p.Name), Container: spec.Name, ID: id, Dirs: dirs})
		ctrs[spec.Name] = rsContainer{id: id, path: path, memDir: dirs.Memory}
		req, lim := podspec.Requirements(spec.Resources)
		r.engine.SetResources(key, recommend.Resources{CPURequest: req.CPU, CPULimit: lim.CPU, MemoryRequest: req.Memory, MemoryLimit: lim.Memory})
	}
	if err := r.coll.Set(string(p.UID), targets); err != nil {
		r.log.V(1).Info("sampling a container failed; retried", "pod", podspec.Key(p.Namespace, p.Name), "err", err.Error())
	}
	unsampled := false // a running container whose cgroup was not found or read
	for _, id := range ids {
		unsampled = unsampled || !r.coll.Sampled(id)
	}
	if unsampled && startedWithin(p, unsampledRetryFor) {
		// A new container's cgroup may not be readable at its Running
		// event, and no other event may come: asked again shortly,
		// then by the housekeeping's safety net.
		r.host.RequeueAfter(p, unsampledRetry)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rp := r.pods[string(p.UID)]
	if rp == nil {
		rp = &rsPod{ref: PodRef{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name}, original: originalOf(p), lastResize: lastAppliedOf(p, time.Now()), due: -1}
		r.pods[string(p.UID)] = rp
		r.scheduleLocked(rp, time.Time{})
	}
	rp.workload, rp.qos = wl, qos
	for name, old := range rp.containers {
		if cur, ok := ctrs[name]; !ok || cur.memDir != old.memDir {
			r.unwatchLocked(old.memDir)
		}
		if cur, ok := ctrs[name]; !ok || cur.id != old.id {
			delete(r.last, old.id) // a restarted or gone container
		}
	}
	rp.containers = ctrs
	for name, c := range ctrs {
		if r.oom == nil {
			break
		}
		if _, ok := r.dirs[c.memDir]; ok {
			continue
		}
		if err := r.oom.Watch(c.memDir); err == nil {
			r.dirs[c.memDir] = ctrRef{uid: string(p.UID), container: name}
		}
	}
	if fp := r.fingerprint(p); fp != rp.fingerprint {
		rp.fingerprint = fp
		r.scheduleLocked(rp, time.Time{})
	}
}

// containerIDs maps the names of p's containers to their runtime IDs:
// every container the runtime reports, or with running only those
// running now.
func containerIDs(p *corev1.Pod, running bool) map[string]string {
	ids := map[string]string{}
	for _, st := range p.Status.ContainerStatuses {
		if st.ContainerID != "" && (!running || st.State.Running != nil) {
			ids[st.Name] = st.ContainerID
		}
	}
	return ids
}

// containerPath is the runtime ID (from ids, see containerIDs) and the
// cgroup of p's container name; ok is false when it has neither.
func (r *Runner) containerPath(p *corev1.Pod, qos cgroup.QoS, ids map[string]string, name string) (id, path string, ok bool) {
	id, ok = ids[name]
	if !ok {
		return "", "", false
	}
	path, err := r.cgroups.ContainerPath(string(p.UID), qos, id)
	return id, path, err == nil
}

// A running container Track could not sample is tried again every
// unsampledRetry while it started less than unsampledRetryFor ago.
const (
	unsampledRetry    = 2 * time.Second
	unsampledRetryFor = 2 * time.Minute
)

// startedWithin says whether a running container of p started within d.
func startedWithin(p *corev1.Pod, d time.Duration) bool {
	for _, st := range p.Status.ContainerStatuses {
		if r := st.State.Running; r != nil && time.Since(r.StartedAt.Time) < d {
			return true
		}
	}
	return false
}

func (r *Runner) unwatchLocked(dir string) {
	if _, ok := r.dirs[dir]; ok && r.oom != nil {
		r.oom.Unwatch(dir)
	}
	delete(r.dirs, dir)
}

// Untrack stops sampling and watching a pod.
func (r *Runner) Untrack(uid string) {
	r.coll.Remove(uid)
	r.apply.forget(uid)
	r.mu.Lock()
	defer r.mu.Unlock()
	rp, ok := r.pods[uid]
	if !ok {
		return
	}
	for _, c := range rp.containers {
		r.unwatchLocked(c.memDir)
		delete(r.last, c.id)
	}
	r.unscheduleLocked(rp)
	delete(r.pods, uid)
}

// fingerprint is what a pod's decision rests on besides usage: the
// policies that select it (and their generations) and its own annotations.
func (r *Runner) fingerprint(p *corev1.Pod) string {
	var b strings.Builder
	if pi := r.policies(); pi != nil {
		for _, pol := range pi.match(p) {
			fmt.Fprintf(&b, "%s@%d,", pol.Name, pol.Generation)
		}
	}
	for _, k := range []string{v1alpha1.AnnotationResize, v1alpha1.AnnotationTargetSaturation, v1alpha1.AnnotationResizePausedUntil} {
		b.WriteString(p.Annotations[k] + ",")
	}
	return b.String()
}

// resizeState reads the kubelet's word on the pod's last resize from its
// conditions (Kubernetes 1.33+: PodResizePending with reason Deferred or
// Infeasible, PodResizeInProgress), or from status resources lagging spec.
func resizeState(p *corev1.Pod) (string, string) {
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case corev1.PodResizePending:
			return c.Reason, c.Message
		case corev1.PodResizeInProgress:
			return "InProgress", c.Message
		}
	}
	return "", ""
}

// decideLoop decides for the pods whose step is due after each sampling
// round, and at once when a policy changes.
func (r *Runner) decideLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	r.guard.Run(ctx, LoopDecide, func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		case <-r.due:
		}
		r.decideAll(time.Now(), every)
		return true
	})
}

// decideAll decides for the tracked pods whose step is due (found in the
// queue, not by walking every pod); one it cannot decide now is tried
// again after retry.
func (r *Runner) decideAll(now time.Time, retry time.Duration) {
	r.mu.Lock()
	uids := r.dueLocked(now, now.Add(retry))
	r.mu.Unlock()
	sort.Strings(uids) // a stable order: pods of one workload decide alike
	for _, uid := range uids {
		p := r.host.PodByUID(uid)
		if p == nil {
			continue
		}
		r.decide(p, now)
	}
}

// stateAfter is the pod's right-sizing state after decision d. A decision
// that finds the spec at its target (Unchanged) keeps the last change's
// own word: a resize accepted but not yet verified stays "Resized" (only
// verify, from the kubelet's status and the cgroups, may call it Applied),
// and one verified stays "Applied" with its lastApplied time. Overwritten
// by the next step's Unchanged, Applied lasted from the verify to that step,
// at times a few milliseconds, and a reader of the annotation could miss
// that the change had been applied at all.
func stateAfter(state, reason string, d rightsize.Decision) (string, string) {
	if d.State == rightsize.StateUnchanged && (state == stateResized || state == stateApplied) {
		return state, reason
	}
	return d.State, d.Why
}

// decide makes one pod's decision and acts on it.
func (r *Runner) decide(p *corev1.Pod, now time.Time) {
	in, step, ok := r.input(p, now)
	if !ok {
		return // forgotten since decideAll listed it
	}
	d := rightsize.Decide(r.engine, in, now)
	r.m.decisions.WithLabelValues(d.State).Inc()
	r.mu.Lock()
	rp := r.pods[string(p.UID)]
	if rp == nil {
		r.mu.Unlock()
		return
	}
	prev := rp.decision
	rp.decide(d)
	r.scheduleLocked(rp, now.Add(step))
	if d.Apply {
		rp.lastResize = now
	}
	rp.state, rp.reason = stateAfter(rp.state, rp.reason, d)
	original := maps.Clone(rp.original)
	r.mu.Unlock()
	r.rep.Describe(in, d, original)
	ref := &PodRef{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name}
	switch {
	case d.Warning && (prev.State != d.State || prev.Why != d.Why):
		reason := "RightsizePolicyConflict"
		if d.State == rightsize.StateInvalid {
			reason = "RightsizeInvalid"
		}
		r.host.Emit(ref, Event{Warning: true, Reason: reason, Message: d.Why})
	case d.State == rightsize.StateDryRun && changedTargets(prev, d):
		r.m.recChanges.Inc()
		r.host.Emit(ref, Event{Reason: "RecommendationChanged", Message: "dry run: " + summarize(d)})
	}
	if d.Refused != "" && d.Refused != prev.Refused {
		r.host.Emit(ref, Event{Warning: true, Reason: local.EventAnnotationRefused, Message: d.Refused})
	}
	if d.Apply && len(d.Clamped) > 0 {
		msg := policy.Bindings(d.Clamped)
		r.log.Info("a resize was clamped", "pod", podspec.Key(p.Namespace, p.Name), "policy", d.Policy, "bounds", msg)
		r.m.clamped.WithLabelValues("resize").Inc()
		r.host.Emit(ref, Event{Reason: local.EventClamped, Message: "the recommendation was clamped: " + msg})
	}
	if d.Apply {
		want := map[string]rightsize.Requirements{}
		for _, cd := range d.Containers {
			if cd.Changed {
				want[cd.Name] = cd.To
			}
		}
		r.apply.request(p, want, "Resize", summarize(d))
		// The annotation waits for the resize's outcome (the applier
		// writes it: refused at once, accepted after holdAnnotation's
		// quiet time, unless verified first). Every pod update is a
		// kubelet sync, and the kubelet's pod worker starts the next sync
		// only after a PLEG relist newer than the last one (up to 1 s): an
		// annotation written just before pods/resize held the resize back
		// that long (BenchmarkNodeResizeToCgroup: p50 436 ms against 70 ms
		// for the same resize sent alone).
		return
	}
	r.annotate(p)
}

// input builds the decision's view of a pod and the step after which it
// is decided again; ok is false when the pod is not tracked. Its caller
// found the pod tracked, but a pod can be forgotten whenever r.mu is not
// held (its delete reconciled while decideAll works through the pods it
// listed): the lookup here tolerates its absence, and the pod is simply
// not decided. The OOM path builds less (oomInput).
func (r *Runner) input(p *corev1.Pod, now time.Time) (in rightsize.Pod, step time.Duration, ok bool) {
	in = rightsize.Pod{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name, QoS: string(podspec.QoS(p)), Annotations: p.Annotations}
	in.Policies = r.matching(p)
	in.LimitRange, in.Allocatable = r.bounds.of(p.Namespace)
	in.Resize, in.ResizeMessage = resizeState(p)
	exclusive := r.host.HoldsExclusive(p)
	written := r.apply.values(string(p.UID)) // where the cgroups, not the spec, hold the values
	if r.beforeLookup != nil {
		r.beforeLookup(string(p.UID))
	}
	if in.Containers, in.LastResize, ok = r.containersInput(p, exclusive, written, now); !ok {
		return rightsize.Pod{}, 0, false
	}
	step = rightsize.DefaultStep
	if len(in.Policies) == 1 {
		step = in.Policies[0].Step
	}
	return in, step, true
}

// containersInput is the decision's view of the pod's containers from
// its tracked state, and when the pod was last resized by a step; false
// when the pod is not tracked (any more).
func (r *Runner) containersInput(p *corev1.Pod, exclusive bool, written map[string]rightsize.Requirements, now time.Time) ([]rightsize.Container, time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rp := r.pods[string(p.UID)]
	if rp == nil {
		return nil, time.Time{}, false
	}
	var out []rightsize.Container
	for _, spec := range p.Spec.Containers {
		c := rightsize.Container{Name: spec.Name, Key: containerKey(rp, spec.Name), Spec: specInForce(spec, written), ExclusiveCPUs: exclusive}
		c.Usage, c.WorkingSet = r.memoryUseLocked(rp, spec.Name, now)
		c.Merged = r.rep.MergedFor(c.Key, now)
		c.RefusedMemoryLimit = rp.refused[spec.Name]
		out = append(out, c)
	}
	return out, rp.lastResize, true
}

func changedTargets(a, b rightsize.Decision) bool {
	if len(a.Containers) != len(b.Containers) {
		return true
	}
	for i := range a.Containers {
		if a.Containers[i].To != b.Containers[i].To {
			return true
		}
	}
	return false
}

// summarize says what a decision changes, for Events.
func summarize(d rightsize.Decision) string {
	var parts []string
	for _, cd := range d.Containers {
		if !cd.Changed {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: cpu %s→%s, memory %s→%s", cd.Name,
			local.FormatCPU(cd.From.Requests.CPU), local.FormatCPU(cd.To.Requests.CPU),
			local.FormatMemory(cd.From.Requests.Memory), local.FormatMemory(cd.To.Requests.Memory)))
	}
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, "; ")
}

// annotate queues the pod's cgpilot.io/recommendation annotation when it
// differs from what is on the pod.
func (r *Runner) annotate(p *corev1.Pod) {
	r.mu.Lock()
	rp := r.pods[string(p.UID)]
	if rp == nil {
		r.mu.Unlock()
		return
	}
	if rp.held != 0 && rp.state == stateResized {
		r.mu.Unlock()
		return // holdAnnotation's timer writes it
	}
	value := ""
	var rec local.Recommendation
	if rp.decision.State != rightsize.StateOff || rp.decision.Policy != "" {
		rec = recommendationOf(rp)
		value = rec.Encode()
	}
	key := podspec.Key(p.Namespace, p.Name)
	current, has := p.Annotations[v1alpha1.AnnotationRecommendation]
	if (value == "" && !has) || (value != "" && onlyExplanationsDiffer(rec, value, current)) {
		r.mu.Unlock()
		return
	}
	r.pendingRec.put(key, func(pendingRecommendation, bool) pendingRecommendation {
		return pendingRecommendation{uid: string(p.UID), value: value}
	})
	r.mu.Unlock()
	r.host.QueueStatus(RecKeyPrefix + key)
}

// onlyExplanationsDiffer reports whether the annotation value equals
// current but for its explanations, which count samples and history and so
// change at every decision: such a value is not written. Each write is a
// pod update that the kubelet syncs, and the kubelet's pod worker syncs a
// pod again only after its next PLEG relist (up to 1 s), so a resize sent
// within a second of one waits that long; with a short step every decision
// rewrote every managed pod's annotation (BenchmarkNodeResizeToCgroup, 1 s
// step: p50 942 ms against 67 ms without). The explanations are refreshed
// with the next change that matters; cgpilotctl explain shows them live.
// value is rec encoded: only the pod's current annotation is decoded.
func onlyExplanationsDiffer(rec local.Recommendation, value, current string) bool {
	if value == current {
		return true
	}
	var cur local.Recommendation
	if len(current) > local.MaxAnnotationBytes || json.Unmarshal([]byte(current), &cur) != nil {
		return false
	}
	return withoutExplanations(rec) == withoutExplanations(cur)
}

// withoutExplanations is r's encoding with every explanation left out.
func withoutExplanations(r local.Recommendation) string {
	cs := make([]local.ContainerRecommendation, len(r.Containers))
	for i, c := range r.Containers {
		for _, res := range []**local.ResourceRecommendation{&c.CPU, &c.Memory} {
			if *res != nil {
				v := **res
				v.Explain = ""
				*res = &v
			}
		}
		cs[i] = c
	}
	r.Containers = cs
	return r.Encode()
}

// sourceAggregator is the annotation's source of a merged recommendation.
const sourceAggregator = "aggregator"

// originalOf is the pod's requests before right-sizing: as its
// recommendation annotation remembers them, else its spec's now.
func originalOf(p *corev1.Pod) map[string]rightsize.Requirements {
	var prev local.Recommendation
	if v := p.Annotations[v1alpha1.AnnotationRecommendation]; v != "" && len(v) <= local.MaxAnnotationBytes {
		_ = json.Unmarshal([]byte(v), &prev) // unreadable: the spec's values
	}
	remembered := map[string]local.ContainerRecommendation{}
	for _, c := range prev.Containers {
		remembered[c.Name] = c
	}
	out := make(map[string]rightsize.Requirements, len(p.Spec.Containers))
	for _, spec := range p.Spec.Containers {
		req, lim := podspec.Requirements(spec.Resources)
		o := rightsize.Requirements{Requests: req, Limits: lim}
		if c, ok := remembered[spec.Name]; ok && c.CPU != nil && c.Memory != nil {
			cpu, errC := resource.ParseQuantity(c.CPU.Original)
			mem, errM := resource.ParseQuantity(c.Memory.Original)
			if errC == nil && errM == nil && cpu.Sign() >= 0 && mem.Sign() >= 0 {
				o.Requests = rightsize.Resources{CPU: float64(podspec.MilliOf(cpu)) / 1000, Memory: float64(mem.Value())}
				o.Limits = rightsize.Resources{} // not remembered
			}
		}
		out[spec.Name] = o
	}
	return out
}

// lastAppliedOf is when the agent last resized the pod, as its
// recommendation annotation remembers it (zero when it does not): after
// a restart the next resize still waits a step. The annotation is the
// pod's, so a time after now counts as now.
func lastAppliedOf(p *corev1.Pod, now time.Time) time.Time {
	var prev local.Recommendation
	v := p.Annotations[v1alpha1.AnnotationRecommendation]
	if v == "" || len(v) > local.MaxAnnotationBytes || json.Unmarshal([]byte(v), &prev) != nil || prev.LastApplied == nil {
		return time.Time{}
	}
	if t := *prev.LastApplied; t.Before(now) {
		return t
	}
	return now
}

// RecKeyPrefix marks recommendation annotation keys on the status queue.
const RecKeyPrefix = "rec\x00"

// recommendationOf is the annotation of a tracked pod. r.mu held.
func recommendationOf(rp *rsPod) local.Recommendation {
	d := rp.decision
	out := local.Recommendation{Policy: d.Policy, Preset: d.Preset, Mode: string(d.Mode), State: rp.state, Reason: rp.reason}
	if !rp.lastApplied.IsZero() {
		t := rp.lastApplied.UTC().Truncate(time.Second)
		out.LastApplied = &t
	}
	for _, cd := range d.Containers {
		cr := local.ContainerRecommendation{Name: cd.Name}
		if cd.Nodes > 0 {
			cr.Source, cr.Nodes = sourceAggregator, cd.Nodes
		}
		if rec := cd.Recommendation; rec != nil {
			cpuWhy, memWhy := rec.CPU.Explain.String(), rec.Memory.Explain.String()
			if cd.Nodes > 0 { // how the aggregator chose it is its to explain
				cpuWhy = fmt.Sprintf("merged by the aggregator from %d node(s)", cd.Nodes)
				memWhy = cpuWhy
			}
			cr.CPU = &local.ResourceRecommendation{Target: local.FormatCPU(rec.CPU.Target), Lower: local.FormatCPU(rec.CPU.Lower), Upper: local.FormatCPU(rec.CPU.Upper),
				Request: local.FormatCPU(cd.From.Requests.CPU), Note: cd.CPUNote, Explain: cpuWhy}
			cr.Memory = &local.ResourceRecommendation{Target: local.FormatMemory(rec.Memory.Target), Lower: local.FormatMemory(rec.Memory.Lower), Upper: local.FormatMemory(rec.Memory.Upper),
				Request: local.FormatMemory(cd.From.Requests.Memory), Note: cd.MemoryNote, Explain: memWhy}
			if o, ok := rp.original[cd.Name]; ok {
				cr.CPU.Original, cr.Memory.Original = local.FormatCPU(o.Requests.CPU), local.FormatMemory(o.Requests.Memory)
			}
			if cd.From.Limits.CPU > 0 {
				cr.CPU.Limit = local.FormatCPU(cd.From.Limits.CPU)
			}
			if cd.From.Limits.Memory > 0 {
				cr.Memory.Limit = local.FormatMemory(cd.From.Limits.Memory)
			}
			if cd.Changed {
				cr.CPU.Next, cr.Memory.Next = local.FormatCPU(cd.To.Requests.CPU), local.FormatMemory(cd.To.Requests.Memory)
			}
		}
		out.Containers = append(out.Containers, cr)
	}
	return out
}

// setState records what happened to the pod's last change (the applier
// and the OOM path report through it) and refreshes the annotation.
func (r *Runner) setState(uid, state, reason string, applied bool) {
	r.mu.Lock()
	rp := r.pods[uid]
	var ev *heldEvent
	if rp != nil {
		rp.state, rp.reason = state, reason
		if applied {
			rp.lastApplied = time.Now()
		}
		if state != stateResized { // holdAnnotation's own: its Event stays held
			ev, rp.heldEvent = rp.heldEvent, nil
		}
	}
	r.mu.Unlock()
	if rp == nil {
		return
	}
	ev.send() // the acceptance's Event before the state that follows it
	if p := r.host.PodByUID(uid); p != nil {
		r.annotate(p)
	}
}

// resizedQuiet is how long the annotation of a resize pods/resize just
// accepted waits (holdAnnotation): a PLEG relist, by which the kubelet has
// in the common case applied the resize, and verify has written Applied in
// its place.
const resizedQuiet = time.Second

// holdAnnotation sets pod uid's state to Resized (pods/resize accepted)
// and writes its annotation only after resizedQuiet, unless verify or a
// failure changes the state first (their annotation is written at once).
// The kubelet receives every pod update as a sync of the pod: the
// annotation written right after pods/resize reached it while it applied
// the resize, and took the API server's time meanwhile
// (BenchmarkNodeResizeToCgroup, kubelet at -v=4: the annotation's update
// 1 ms after the resize's sync began, cpu.shares 15 ms later; the patch
// took 7-18 ms, within the 13-24 ms from pods/resize accepted to
// cpu.shares, against 10-23 ms for the same resize sent alone).
// The acceptance's Event (emit) waits likewise: the next state sends it
// before its own, or the timer does. Sent at acceptance, its write took
// the API server's and the machine's time while the kubelet applied the
// resize (BenchmarkNodeResizeToCgroup, 2026-11-29, four runs each
// interleaved: median p50 1.28× of the direct resize with it, 1.18×
// without, while the agent's change started right after the direct one;
// with both started quiet, 0.94-0.99× and 0.90-1.03×, within the noise).
func (r *Runner) holdAnnotation(uid, reason string, emit func()) {
	ev := &heldEvent{emit: emit}
	r.mu.Lock()
	rp := r.pods[uid]
	if rp == nil {
		r.mu.Unlock()
		ev.send() // the pod is gone: nothing to hold
		return
	}
	r.holds++
	held := r.holds
	rp.held = held
	prev := rp.heldEvent
	rp.heldEvent = ev
	r.mu.Unlock()
	prev.send()                                 // an earlier acceptance's Event, before this one's
	r.setState(uid, stateResized, reason, true) // annotate sees the hold: nothing written yet
	write := func() {
		r.mu.Lock()
		if rp := r.pods[uid]; rp != nil && rp.held == held {
			rp.held = 0 // a later resize's hold is its own timer's
			if rp.heldEvent == ev {
				rp.heldEvent = nil
			}
		}
		r.mu.Unlock()
		ev.send() // once, whoever comes first; also for a pod gone since
		if p := r.host.PodByUID(uid); p != nil {
			r.annotate(p)
		}
	}
	if r.afterQuiet != nil {
		r.afterQuiet(write)
		return
	}
	// The timer's goroutine is the process's own: a panic in the write is
	// recovered and counted with the applier's.
	time.AfterFunc(resizedQuiet, func() { _ = r.guard.Do(LoopResize, write) })
}

// heldEvent is an Event holdAnnotation holds: sent once, by the first of
// the next state and the hold's timer.
type heldEvent struct {
	once sync.Once
	emit func()
}

// send emits the Event unless it has been (nil: nothing held).
func (e *heldEvent) send() {
	if e != nil {
		e.once.Do(e.emit)
	}
}

// WriteRecommendation patches one pod's recommendation annotation (the
// status worker calls it for RecKeyPrefix keys).
func (r *Runner) WriteRecommendation(ctx context.Context, key string) error {
	pr, pod, ok := r.pendingRec.take(key, r.host.Pod)
	if !ok {
		return nil // nothing asked, or the pod is gone or replaced
	}
	var v any = pr.value
	if pr.value == "" {
		v = nil // merge patch: remove
	}
	if err := r.patchAnnotations(ctx, pod, map[string]any{v1alpha1.AnnotationRecommendation: v}); err != nil {
		return err
	}
	r.pendingRec.done(key, pr)
	return nil
}

// Start discovers what the API server offers (pods/resize, the
// RightsizePolicy CRD) and starts sampling, deciding, applying and the OOM
// path; they stop with ctx.
func (r *Runner) Start(ctx context.Context) {
	api, err := resizeServed(ctx, r.kube)
	switch {
	case err != nil:
		r.log.Error(err, "discovery failed; assuming pods/resize is served and retrying on failure")
		api = true
	case !api:
		r.log.Info("the API server does not serve pods/resize: changes are written to the cgroups directly, and the scheduler does not see them")
	}
	r.apply.api = api
	r.spawn(func() { r.bounds.run(ctx) })
	r.bounds.refresh(ctx, time.Now())
	r.watchPolicies(ctx)
	r.spawn(func() { r.coll.Run(ctx) })
	r.spawn(func() { r.decideLoop(ctx, r.cfg.SampleInterval) })
	r.spawn(func() { r.apply.run(ctx) })
	for range ownerWorkers {
		r.spawn(func() { r.owners.run(ctx, r.guard) })
	}
	r.spawn(func() {
		<-ctx.Done()
		r.apply.q.ShutDown()
		r.owners.stop()
	})
	if r.oom != nil {
		r.spawn(func() { r.oomLoop(ctx) })
	}
	r.spawn(func() { r.checkpointLoop(ctx, r.cfg.CheckpointInterval) })
	if r.rep != nil {
		r.log.Info("reporting to the aggregator", "url", r.cfg.AggregatorURL, "period", r.rep.Period().String())
		r.spawn(func() { r.rep.Run(ctx, r.unadmitted) })
	}
}

// watchPolicies starts the RightsizePolicy and namespace informers once the
// CRD is served; without it, sampling and history go on and sweep tries
// again.
func (r *Runner) watchPolicies(ctx context.Context) {
	if r.policies() != nil {
		return
	}
	if err := rightsizeAPIPresent(ctx, r.kube); err != nil {
		if !r.warnedNoCRD {
			r.log.Info("right-sizing waits for its API: sampling and history go on", "reason", err.Error())
			r.warnedNoCRD = true
		}
		return
	}
	pi, err := newPolicyIndex(r.kube, r.cfg.ResyncPeriod, r.policyChanged, r.guard)
	if err != nil {
		r.log.Error(err, "RightsizePolicy informer")
		return
	}
	r.informers.Add(2)
	go func() { defer r.informers.Done(); pi.namespaces.RunWithContext(ctx) }()
	go func() { defer r.informers.Done(); pi.informer.RunWithContext(ctx) }()
	if !cache.WaitForCacheSync(ctx.Done(), pi.hasSynced) {
		return
	}
	r.dyn = r.kube.Dynamic()
	r.policiesP.Store(pi)
	r.log.Info("RightsizePolicies watched", "policies", len(pi.all()))
	r.policyChanged()
}

// Sweep runs with the controller's sweep: the CRD may have appeared, the
// presets in use may have changed, cgroup values written without
// pods/resize are re-asserted, and policy statuses are written.
func (r *Runner) Sweep(ctx context.Context) {
	r.watchPolicies(ctx)
	r.bounds.refresh(ctx, time.Now())
	if pi := r.policies(); pi != nil {
		if warns, err := r.engine.UsePresets(pi.presets()); err != nil {
			r.log.Error(err, "a preset's recommender")
		} else {
			for _, w := range warns {
				r.log.Error(w, "recommender checkpoint unusable: moved aside")
			}
		}
		// Counting walks every pod: once per HousekeepEvery, at the next
		// tick after a policy changed, and when an entry is owed.
		now := time.Now()
		if countDue(now, r.statusCounted, r.statusAgain, r.statusDue.Swap(false), r.cfg.HousekeepEvery) {
			r.statusCounted = now
			r.statusAgain = r.writePolicyStatus(ctx)
		}
	}
	if !r.apply.api {
		r.apply.reassert()
	}
	r.housekeep(time.Now())
}

// housekeep is what walks every pod, at most once per HousekeepEvery (the
// agent gives a minute at most): it runs when one has passed since the last
// time, and says whether it ran.
func (r *Runner) housekeep(now time.Time) bool {
	if !r.housekept.IsZero() && now.Sub(r.housekept) < r.cfg.HousekeepEvery {
		return false
	}
	r.housekept = now
	r.revertPending()
	r.requeueUnsampled()
	r.forgetGone(now)
	if n, err := r.hist.Dropped(); n > 0 && err != nil {
		r.log.V(1).Info("history rows dropped", "rows", n, "reason", err.Error())
	}
	return true
}

// requeueUnsampled is sampling's safety net: a managed pod with a running
// container that is not sampled (its cgroup was not readable when its last
// event was handled, and no event has come since) is queued again.
func (r *Runner) requeueUnsampled() {
	for _, p := range r.host.Pods() {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.ContainerID != "" && st.State.Running != nil && !r.coll.Sampled(st.ContainerID) {
				// Whether the agent manages the pod is asked only of
				// the few pods with an unsampled container.
				if r.host.Manages(p) {
					r.m.unsampled.Inc()
					r.host.Requeue(p)
				}
				break
			}
		}
	}
}

// forgetGone drops the histograms of workload containers no tracked pod
// has run for ForgetAfter (counted from the agent's start for those it
// found in its checkpoints), and OOM kills past their window.
func (r *Runner) forgetGone(now time.Time) {
	live := map[string]bool{}
	r.mu.Lock()
	for _, rp := range r.pods {
		for name := range rp.containers {
			live[containerKey(rp, name)] = true
		}
	}
	r.mu.Unlock()
	after := r.cfg.ForgetAfter
	keys := r.engine.Keys()
	known := make(map[string]bool, len(keys))
	for _, key := range keys {
		known[key] = true
		last, seen := r.running[key]
		switch {
		case live[key] || !seen:
			r.running[key] = now
		case now.Sub(last) > after:
			r.engine.Forget(key)
			r.rep.Forget(key)
			delete(r.running, key)
			r.log.V(1).Info("histograms forgotten: no pod of this node ran the workload container", "key", key, "for", after.String())
		}
	}
	for key := range r.running {
		if !known[key] {
			delete(r.running, key)
		}
	}
	r.engine.ExpireKills(now, rightsize.OOMWindow)
}

// checkpointLoop saves the histograms every interval.
func (r *Runner) checkpointLoop(ctx context.Context, every time.Duration) {
	r.guard.Every(ctx, LoopCheckpoint, every, func() {
		if err := r.engine.Save(time.Now()); err != nil {
			r.log.Error(err, "recommender checkpoint; retried at the next interval")
		}
	})
}

// Stop waits for the policy and namespace informers (they end with the
// context Start was given) and saves what must survive a restart.
func (r *Runner) Stop() {
	r.informers.Wait()
	if err := r.engine.Save(time.Now()); err != nil {
		r.log.Error(err, "recommender checkpoint at shutdown")
	}
	r.hist.Flush()
	if r.oom != nil {
		_ = r.oom.Close()
	}
}

// Views are the local API's right-sizing views of every tracked container.
func (r *Runner) Views() []local.RecView {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []local.RecView
	for _, rp := range r.pods {
		out = append(out, r.viewsOfLocked(rp)...)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Pod != b.Pod {
			return a.Pod < b.Pod
		}
		return a.Container < b.Container
	})
	return out
}

// viewsOfLocked are one pod's views. r.mu held.
func (r *Runner) viewsOfLocked(rp *rsPod) []local.RecView {
	var out []local.RecView
	d := rp.decision
	byName := map[string]rightsize.ContainerDecision{}
	for _, cd := range d.Containers {
		byName[cd.Name] = cd
	}
	specs := map[string]rightsize.Requirements{}
	if p := r.host.PodByUID(rp.ref.UID); p != nil {
		written := r.apply.values(rp.ref.UID)
		for _, c := range p.Spec.Containers {
			specs[c.Name] = specInForce(c, written)
		}
	}
	names := make([]string, 0, len(rp.containers))
	for n := range rp.containers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		key := containerKey(rp, name)
		v := local.RecView{Namespace: rp.ref.Namespace, Pod: rp.ref.Name, Container: name, Workload: rp.workload.String(),
			Policy: d.Policy, Mode: string(d.Mode), State: rp.state, Why: rp.reason, Recommendation: "-"}
		if v.State == "" {
			v.State = "Pending"
		}
		if !rp.lastResize.IsZero() {
			t := rp.lastResize
			v.ResizeDecided = &t
		}
		if u, ok := r.engine.Usage(key); ok {
			v.CPUP50, v.CPUP95, v.CPUMax = u.CPUP50, u.CPUP95, u.CPUMax
			v.MemP50, v.MemP95, v.MemMax = u.MemP50, u.MemP95, u.MemMax
		}
		if spec, ok := specs[name]; ok { // what is in force now, not at the last decision
			v.Request = local.FormatCPU(spec.Requests.CPU) + "/" + local.FormatMemory(spec.Requests.Memory)
			v.Limit = local.FormatCPU(spec.Limits.CPU) + "/" + local.FormatMemory(spec.Limits.Memory)
		}
		if cd, ok := byName[name]; ok {
			if rec := cd.Recommendation; rec != nil {
				v.Recommendation = local.FormatCPU(rec.CPU.Target) + "/" + local.FormatMemory(rec.Memory.Target)
			}
		}
		out = append(out, v)
	}
	return out
}

// Explain adds a pod's right-sizing to its explain view.
func (r *Runner) Explain(uid string, v *local.ExplainView) {
	for i, c := range v.Containers {
		v.Containers[i].Sampled = c.ID != "" && c.State == local.ContainerRunning && r.coll.Sampled(c.ID)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rp, ok := r.pods[uid]
	if !ok {
		return
	}
	rec := recommendationOf(rp)
	v.Rightsizing = &rec
	v.Usage = map[string]local.RecView{}
	for _, rv := range r.viewsOfLocked(rp) {
		v.Usage[rv.Container] = rv
	}
}
