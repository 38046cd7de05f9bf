package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/cgpilot/cgpilot/agent/kube"
	"github.com/cgpilot/cgpilot/agent/podspec"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/internal/loop"
	"github.com/cgpilot/cgpilot/internal/millicpu"
)

// apply.go: sending a change of requests and limits. Where the cluster
// serves pods/resize (Kubernetes 1.35+; discovered at start) the change is
// a strategic merge patch of that subresource and the kubelet applies it;
// the agent then checks the kubelet's status and the cgroups themselves.
// Without it the agent writes the cgroups (package cgroup, leveled) and
// keeps them so: the scheduler does not see such a change, and the pod's
// annotation says so.

// States the applier reports in the annotation.
const (
	stateResized      = "Resized" // accepted by the API server, the kubelet applying it
	stateApplied      = "Applied" // the kubelet's status and the cgroups show it
	stateCgroupDiffer = "AppliedCgroupDiffers"
	stateCgroups      = "AppliedToCgroups" // no pods/resize: written to the cgroups
	stateFailed       = "Failed"
)

// change is what to send for one pod.
type change struct {
	uid        string
	containers map[string]rightsize.Requirements
	reason     string // Resize | OOMBump
	summary    string
	decided    time.Time // when the change was asked (its latency's start)
	// bumped are the memory limits OOM bumps already wrote to the
	// cgroups, by container: what goes back to the spec's value if the
	// API server refuses to keep them.
	bumped map[string]float64
}

// applier sends changes from its own queue, so an API server that is away
// delays them without holding up sampling, decisions or OOM bumps.
type applier struct {
	r   *Runner
	api bool // pods/resize is served
	q   workqueue.TypedRateLimitingInterface[string]

	want *pending[change] // by pod key: the latest change asked

	mu sync.Mutex
	// cgroupValues are what the agent wrote where there is no pods/resize,
	// by pod UID and container: the pod's requirements in force.
	cgroupValues map[string]map[string]rightsize.Requirements
	// decided is when the last change pods/resize accepted was decided, by
	// pod UID, until the kubelet has applied it.
	decided map[string]time.Time
	// accepted is the pods/resize body the API server accepted, by pod
	// UID, until verified: verify judges only a pod whose spec shows it
	// (the informer may still hold the spec from before the resize while
	// the kubelet, on its own watch, has already written the cgroups).
	accepted map[string][]byte
}

func newApplier(r *Runner, api bool) *applier {
	return &applier{r: r, api: api, want: newPending(func(c change) string { return c.uid }, func(a, b change) bool { return a.uid == b.uid && a.summary == b.summary }), cgroupValues: map[string]map[string]rightsize.Requirements{}, decided: map[string]time.Time{}, accepted: map[string][]byte{},
		q: workqueue.NewTypedRateLimitingQueueWithConfig(resizeRateLimiter(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "cgpilot-resize"})}
}

// acceptedBody is the pods/resize body the API server accepted for pod
// uid, nil when none waits to be verified.
func (a *applier) acceptedBody(uid string) []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.accepted[uid]
}

// verified forgets pod uid's accepted resize, now applied, and says when
// it was decided (ok: one was waiting).
func (a *applier) verified(uid string) (decided time.Time, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	decided, ok = a.decided[uid]
	delete(a.decided, uid)
	delete(a.accepted, uid)
	return decided, ok
}

// forget drops what the applier keeps of pod uid until verify.
func (a *applier) forget(uid string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.decided, uid)
	delete(a.accepted, uid)
}

// sizes adds the applier's tables' sizes to out.
func (a *applier) sizes(out map[string]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out["resizes-wanted"], out["resizes-decided"], out["resizes-accepted"], out["cgroup-values"] = a.want.len(), len(a.decided), len(a.accepted), len(a.cgroupValues)
}

// resizeRateLimiter backs a failing resize off up to 30 s, not the
// default 1000 s: a raise held back while the API server was away (an OOM
// bump already in the cgroup) reaches the spec within 30 s of its return,
// at one request per pending pod.
func resizeRateLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 30*time.Second),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)})
}

// requestBump queues the durable half of an OOM bump, whose limit is in
// the cgroups already.
func (a *applier) requestBump(p *corev1.Pod, container string, to rightsize.Requirements, summary string) {
	a.queue(p, change{containers: map[string]rightsize.Requirements{container: to}, reason: "OOMBump", summary: summary,
		bumped: map[string]float64{container: to.Limits.Memory}})
}

// request queues a change; a later one for the same pod replaces it, but
// an OOM bump is kept under a later step change (memory only grows).
func (a *applier) request(p *corev1.Pod, containers map[string]rightsize.Requirements, reason, summary string) {
	a.queue(p, change{containers: containers, reason: reason, summary: summary})
}

func (a *applier) queue(p *corev1.Pod, ch change) {
	key := podspec.Key(p.Namespace, p.Name)
	containers := ch.containers
	a.want.put(key, func(old change, ok bool) change {
		if ok && old.uid == string(p.UID) && len(old.bumped) > 0 {
			if ch.bumped == nil {
				ch.bumped = map[string]float64{}
			}
			for name, v := range old.bumped {
				ch.bumped[name] = max(ch.bumped[name], v)
			}
		}
		if ok && old.uid == string(p.UID) && old.reason == "OOMBump" {
			for name, to := range old.containers {
				next, ok := containers[name]
				if !ok {
					containers[name] = to
					continue
				}
				next.Limits.Memory = max(next.Limits.Memory, to.Limits.Memory)
				next.Requests.Memory = max(next.Requests.Memory, to.Requests.Memory)
				containers[name] = next
			}
		}
		ch.uid, ch.decided = string(p.UID), time.Now()
		return ch
	})
	a.q.Add(key)
}

func (a *applier) run(ctx context.Context) {
	loop.Work(a.q, func(key string) error {
		return a.r.guard.DoErr(LoopResize, func() error { return a.applyOne(ctx, key) })
	}, func(key string, err error) {
		a.r.log.Error(err, "resize failed; retried", "pod", key)
	})
}

func (a *applier) applyOne(ctx context.Context, key string) error {
	ch, pod, ok := a.want.take(key, a.r.host.Pod)
	if !ok {
		return nil // nothing asked, or the pod is gone or replaced
	}
	done := func() { a.want.done(key, ch) }
	ns, name, _ := strings.Cut(key, "/")
	ref := &PodRef{UID: ch.uid, Namespace: ns, Name: name}
	if !a.api {
		if err := a.applyCgroups(pod, ch.containers); err != nil {
			if errors.Is(err, cgroup.ErrNotReady) {
				return err // retried shortly
			}
			done()
			a.report(pod, ref, ch, stateFailed, err)
			return nil
		}
		done()
		a.r.reportAdjusted(pod, ch, "")
		a.r.m.resizes.WithLabelValues("cgroups").Inc()
		a.r.setState(ch.uid, stateCgroups, "the cluster has no pods/resize: written to the cgroups; the scheduler does not see this change", true)
		a.r.host.Emit(ref, Event{Reason: "ResizedCgroups", Message: ch.summary + " (written to the cgroups: the cluster has no pods/resize)"})
		return nil
	}
	body, err := resizePatch(pod, ch.containers)
	if err != nil {
		done()
		a.report(pod, ref, ch, stateFailed, err)
		return nil
	}
	err = a.r.kube.PatchPod(ctx, ns, name, types.StrategicMergePatchType, body, kube.FieldManager, "resize")
	switch {
	case err == nil:
		done()
		a.r.reportAdjusted(pod, ch, "")
		a.r.m.resizes.WithLabelValues("accepted").Inc()
		a.r.m.resizeTime.WithLabelValues("accepted").Observe(time.Since(ch.decided).Seconds())
		a.mu.Lock()
		a.decided[ch.uid] = ch.decided
		a.accepted[ch.uid] = body
		a.mu.Unlock()
		reason, msg := "Resized", ch.summary
		if ch.reason == "OOMBump" {
			reason, msg = "MemoryRaisedDurably", "pods/resize accepted, so the kubelet keeps the raised limit: "+ch.summary
		}
		a.r.holdAnnotation(ch.uid, "pods/resize accepted: "+ch.summary+"; waiting for the kubelet",
			func() { a.r.host.Emit(ref, Event{Reason: reason, Message: msg}) })
		return nil
	case apierrors.IsNotFound(err):
		done()
		return nil
	case apierrors.IsConflict(err):
		return err
	case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err):
		// The API server refused this change: retried at the next step
		// with a fresh decision, not in a loop. An OOM bump it refused
		// (a quota, a LimitRange) does not stay in the cgroups.
		done()
		a.report(pod, ref, ch, stateFailed, err)
		if len(ch.bumped) > 0 {
			a.r.bumpRefused(pod, ref, ch.bumped, err)
		}
		return nil
	}
	return err // the API server away: retried with backoff
}

func (a *applier) report(pod *corev1.Pod, ref *PodRef, ch change, state string, err error) {
	a.r.m.resizes.WithLabelValues("failed").Inc()
	a.r.reportAdjusted(pod, ch, err.Error())
	a.r.setState(ch.uid, state, err.Error(), false)
	a.r.host.Emit(ref, Event{Warning: true, Reason: "ResizeFailed", Message: ch.summary + ": " + err.Error()})
}

// resizePatch is the strategic merge patch of pods/resize for containers:
// only resources the container already has (none can be added or removed
// in place).
func resizePatch(p *corev1.Pod, containers map[string]rightsize.Requirements) ([]byte, error) {
	type res struct {
		Requests map[string]string `json:"requests,omitempty"`
		Limits   map[string]string `json:"limits,omitempty"`
	}
	type ctr struct {
		Name      string `json:"name"`
		Resources res    `json:"resources"`
	}
	var list []ctr
	for _, spec := range p.Spec.Containers {
		to, ok := containers[spec.Name]
		if !ok {
			continue
		}
		c := ctr{Name: spec.Name, Resources: res{Requests: map[string]string{}, Limits: map[string]string{}}}
		set := func(m map[string]string, have corev1.ResourceList, r corev1.ResourceName, v float64, format func(float64) string) {
			if _, ok := have[r]; ok && v > 0 {
				m[string(r)] = format(v)
			}
		}
		set(c.Resources.Requests, spec.Resources.Requests, corev1.ResourceCPU, to.Requests.CPU, local.FormatCPU)
		set(c.Resources.Requests, spec.Resources.Requests, corev1.ResourceMemory, to.Requests.Memory, local.FormatMemory)
		set(c.Resources.Limits, spec.Resources.Limits, corev1.ResourceCPU, to.Limits.CPU, local.FormatCPU)
		set(c.Resources.Limits, spec.Resources.Limits, corev1.ResourceMemory, to.Limits.Memory, local.FormatMemory)
		list = append(list, c)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("no container of the change is in the pod")
	}
	return json.Marshal(map[string]any{"spec": map[string]any{"containers": list}})
}

// applyCgroups writes the pod's requirements to its cgroups as the kubelet
// would derive them: each container's shares from its request, quota and
// memory limit from its limits; the pod's from the sums (a pod limit only
// where every container has one).
func (a *applier) applyCgroups(p *corev1.Pod, containers map[string]rightsize.Requirements) error {
	a.mu.Lock()
	vals := a.cgroupValues[string(p.UID)]
	if vals == nil {
		vals = map[string]rightsize.Requirements{}
	}
	next := map[string]rightsize.Requirements{}
	for k, v := range vals {
		next[k] = v
	}
	a.mu.Unlock()
	for name, to := range containers {
		next[name] = to
	}
	plan, err := a.r.podResources(p, next)
	if err != nil {
		return err
	}
	written, err := a.r.cgroups.ApplyPodResources(plan)
	a.r.writes.Add(float64(len(written)))
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.cgroupValues[string(p.UID)] = next
	a.mu.Unlock()
	return nil
}

// podResources is the cgroup values of pod p with some containers' new
// requirements (the rest as the spec says).
func (r *Runner) podResources(p *corev1.Pod, override map[string]rightsize.Requirements) (cgroup.PodResources, error) {
	qos := podspec.QoS(p)
	podPath, err := r.cgroups.PodPath(string(p.UID), qos)
	if err != nil {
		return cgroup.PodResources{}, err
	}
	exclusive := r.host.HoldsExclusive(p)
	ids := containerIDs(p, false)
	out := cgroup.PodResources{UID: string(p.UID), Path: podPath, Containers: map[string]cgroup.Resources{}}
	var sumReq, sumLim int64
	var sumMem int64
	allCPU, allMem := true, true
	for _, spec := range p.Spec.Containers {
		req, lim := podspec.Requirements(spec.Resources)
		if o, ok := override[spec.Name]; ok {
			req, lim = o.Requests, o.Limits
		}
		reqM, limM := millicpu.Ceil(req.CPU), millicpu.Ceil(lim.CPU)
		sumReq += reqM
		if limM > 0 {
			sumLim += limM
		} else {
			allCPU = false
		}
		if lim.Memory > 0 {
			sumMem += int64(lim.Memory)
		} else {
			allMem = false
		}
		_, path, ok := r.containerPath(p, qos, ids, spec.Name)
		if !ok {
			continue
		}
		res := cgroup.Resources{}
		shares := cgroup.KubeletShares(reqM)
		res.Shares = &shares
		if !exclusive {
			q := cgroup.KubeletQuota(limM)
			res.Quota = &q
		}
		mem := int64(-1)
		if lim.Memory > 0 {
			mem = int64(lim.Memory)
		}
		res.MemoryLimit = &mem
		out.Containers[path] = res
	}
	podShares := cgroup.KubeletShares(sumReq)
	out.Pod.Shares = &podShares
	if !exclusive {
		q := cgroup.KubeletQuota(0)
		if allCPU {
			q = cgroup.KubeletQuota(sumLim)
		}
		out.Pod.Quota = &q
	}
	podMem := int64(-1)
	if allMem {
		podMem = sumMem
	}
	out.Pod.MemoryLimit = &podMem
	return out, nil
}

// specShows says whether p's spec holds the resources of an accepted
// pods/resize body (resizePatch's form).
func specShows(p *corev1.Pod, body []byte) bool {
	var patch struct {
		Spec struct {
			Containers []struct {
				Name      string `json:"name"`
				Resources struct {
					Requests map[corev1.ResourceName]string `json:"requests"`
					Limits   map[corev1.ResourceName]string `json:"limits"`
				} `json:"resources"`
			} `json:"containers"`
		} `json:"spec"`
	}
	if json.Unmarshal(body, &patch) != nil {
		return false
	}
	specs := map[string]corev1.ResourceRequirements{}
	for _, c := range p.Spec.Containers {
		specs[c.Name] = c.Resources
	}
	same := func(want map[corev1.ResourceName]string, have corev1.ResourceList) bool {
		for r, v := range want {
			q, err := resource.ParseQuantity(v)
			h, ok := have[r]
			if err != nil || !ok || q.Cmp(h) != 0 {
				return false
			}
		}
		return true
	}
	for _, c := range patch.Spec.Containers {
		spec, ok := specs[c.Name]
		if !ok || !same(c.Resources.Requests, spec.Requests) || !same(c.Resources.Limits, spec.Limits) {
			return false
		}
	}
	return true
}

// Verify checks, after a resize the API server accepted, that the kubelet
// reports the new resources and the cgroups hold them; the pod's state
// becomes Applied (or says what differs).
func (r *Runner) Verify(p *corev1.Pod) {
	r.mu.Lock()
	rp := r.pods[string(p.UID)]
	if rp == nil || rp.state != stateResized {
		r.mu.Unlock()
		return
	}
	ctrs := rp.containers
	r.mu.Unlock()
	body := r.apply.acceptedBody(string(p.UID))
	if body != nil && !specShows(p, body) {
		return // an informer view from before the resize
	}
	if st, _ := resizeState(p); st != "" {
		return // the kubelet is still at it (or reports why not): decide says so
	}
	specs := map[string]corev1.ResourceRequirements{}
	for _, c := range p.Spec.Containers {
		specs[c.Name] = c.Resources
	}
	exclusive := r.host.HoldsExclusive(p)
	var diffs []string
	for _, st := range p.Status.ContainerStatuses {
		spec, ok := specs[st.Name]
		if !ok || st.Resources == nil {
			continue
		}
		if !resourcesEqual(spec.Requests, st.Resources.Requests) || !resourcesEqual(spec.Limits, st.Resources.Limits) {
			return // the status has not caught up yet
		}
		ctr, ok := ctrs[st.Name]
		if !ok {
			continue
		}
		cur, err := r.cgroups.ReadCurrent(ctr.path)
		if errors.Is(err, cgroup.ErrGone) {
			// The container ended (on cgroup v2 an OOM kills all of it):
			// no verdict now; the update that reports its successor
			// tracks and verifies that one.
			return
		}
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("%s: %v", st.Name, err))
			continue
		}
		req, lim := podspec.Requirements(spec)
		if want := int64(lim.Memory); lim.Memory > 0 && (cur.MemoryLimit > want || cur.MemoryLimit < want-4096) {
			diffs = append(diffs, fmt.Sprintf("%s: memory limit %d, want %d", st.Name, cur.MemoryLimit, want))
		}
		if !exclusive {
			if want := cgroup.KubeletQuota(millicpu.Ceil(lim.CPU)); cur.Quota.QuotaUs != want.QuotaUs {
				diffs = append(diffs, fmt.Sprintf("%s: cpu quota %s, want %s", st.Name, cur.Quota, want))
			}
		}
		if d, err := r.cgroups.Layout().DirsAt(ctr.path); err == nil && !d.Unified {
			if want := cgroup.KubeletShares(millicpu.Ceil(req.CPU)); cur.Shares != want {
				diffs = append(diffs, fmt.Sprintf("%s: cpu.shares %d, want %d", st.Name, cur.Shares, want))
			}
		}
	}
	ref := &PodRef{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name}
	if len(diffs) > 0 {
		r.setState(string(p.UID), stateCgroupDiffer, strings.Join(diffs, "; "), false)
		r.host.Emit(ref, Event{Warning: true, Reason: "ResizeCgroupDiffers", Message: "the kubelet reports the resize done, but " + strings.Join(diffs, "; ")})
		return
	}
	r.m.resizes.WithLabelValues("applied").Inc()
	if t, ok := r.apply.verified(string(p.UID)); ok {
		r.m.resizeTime.WithLabelValues("applied").Observe(time.Since(t).Seconds())
	}
	r.settle(p)
	r.setState(string(p.UID), stateApplied, "the kubelet applied the resize and the cgroups hold it", false)
}

// settle makes the last decision of pod p, whose resize is applied, say
// what the next decision will find, so that the Applied annotation is the
// one that decision keeps: a decision made now on the new spec, when it
// changes nothing (Unchanged: the notes, such as WithinTolerance, are its
// own), and only taken as the view (no Event, no resize, the step's
// schedule kept); otherwise each container's requirements are the spec's
// now (From), with nothing left to change (To, Changed). The annotation
// kept the view from before the resize (the old requests, the change as
// next, its notes), and the first decision after it rewrote it, up to a
// step after the resize: a kubelet sync, and a resize within a PLEG relist
// of it waited for the next relist (BenchmarkNodeResizeToCgroup's p99: 108
// and 160 ms from pods/resize accepted to cpu.shares, against 14-37 ms, for
// the two changes of 20 sent 1.07 s after that write).
func (r *Runner) settle(p *corev1.Pod) {
	r.mu.Lock()
	var seen uint64
	if rp := r.pods[string(p.UID)]; rp != nil {
		seen = rp.decisions
	}
	r.mu.Unlock()
	now := time.Now()
	var fresh *rightsize.Decision
	if in, _, ok := r.input(p, now); ok {
		if d := rightsize.Decide(r.engine, in, now); d.State == rightsize.StateUnchanged {
			fresh = &d
		}
	}
	written := r.apply.values(string(p.UID))
	specs := map[string]corev1.Container{}
	for _, c := range p.Spec.Containers {
		specs[c.Name] = c
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rp := r.pods[string(p.UID)]
	if rp == nil || rp.decisions != seen {
		return // a decision made meanwhile is newer: it stays
	}
	if fresh != nil {
		rp.decide(*fresh)
		return
	}
	cs := make([]rightsize.ContainerDecision, len(rp.decision.Containers))
	for i, cd := range rp.decision.Containers {
		if spec, ok := specs[cd.Name]; ok {
			cd.From = specInForce(spec, written)
			cd.To, cd.Changed = cd.From, false
		}
		cs[i] = cd
	}
	rp.decision.Containers = cs
}

func resourcesEqual(a, b corev1.ResourceList) bool {
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		qa, oka := a[r]
		qb, okb := b[r]
		if oka != okb || (oka && qa.Cmp(qb) != 0) {
			return false
		}
	}
	return true
}

// resizeServed asks discovery whether the API server serves pods/resize.
func resizeServed(ctx context.Context, kc kube.Interface) (bool, error) {
	list, err := kc.Resources(ctx, "v1")
	if err != nil {
		return false, err
	}
	for _, r := range list {
		if r.Name == "pods/resize" {
			return true, nil
		}
	}
	return false, nil
}

// values are the requirements the agent wrote to pod uid's cgroups (no
// pods/resize), by container.
func (a *applier) values(uid string) map[string]rightsize.Requirements {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]rightsize.Requirements{}
	for k, v := range a.cgroupValues[uid] {
		out[k] = v
	}
	return out
}

// specInForce is the requirements of a container spec as they are in
// force: the spec's, or those the applier wrote to the cgroups where the
// cluster lacks pods/resize (written: applier.values).
func specInForce(spec corev1.Container, written map[string]rightsize.Requirements) rightsize.Requirements {
	if v, ok := written[spec.Name]; ok {
		return v
	}
	req, lim := podspec.Requirements(spec.Resources)
	return rightsize.Requirements{Requests: req, Limits: lim}
}

// reassert puts the agent's cgroup values back where the cluster has no
// pods/resize and something rewrote them (drift); called every sweep.
func (a *applier) reassert() {
	a.mu.Lock()
	uids := make([]string, 0, len(a.cgroupValues))
	for uid := range a.cgroupValues {
		uids = append(uids, uid)
	}
	a.mu.Unlock()
	for _, uid := range uids {
		p := a.r.host.PodByUID(uid)
		if p == nil {
			a.mu.Lock()
			delete(a.cgroupValues, uid)
			a.mu.Unlock()
			continue
		}
		a.mu.Lock()
		vals := a.cgroupValues[uid]
		a.mu.Unlock()
		plan, err := a.r.podResources(p, vals)
		if err != nil {
			continue
		}
		written, err := a.r.cgroups.ApplyPodResources(plan)
		if err == nil && len(written) > 0 {
			a.r.drift.Add(float64(len(written)))
			a.r.host.Emit(&PodRef{UID: uid, Namespace: p.Namespace, Name: p.Name}, Event{Warning: true, Reason: local.EventDriftCorrected,
				Message: fmt.Sprintf("%d cgroup file(s) of the pod's right-sized values had been changed; set back", len(written))})
		}
	}
}

// patchAnnotations merge-patches pod annotations (nil values remove),
// guarded by the pod's UID.
func (r *Runner) patchAnnotations(ctx context.Context, pod *corev1.Pod, ann map[string]any) error {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann, "uid": string(pod.UID)}})
	ctx, cancel := context.WithTimeout(ctx, kube.PatchTimeout)
	defer cancel()
	err := r.kube.PatchPod(ctx, pod.Namespace, pod.Name, types.MergePatchType, body, kube.FieldManager)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone or replaced: nothing to report on
	}
	return err
}
