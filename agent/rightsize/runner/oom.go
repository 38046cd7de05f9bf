package runner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cgpilot/cgpilot/agent/oomwatch"
	"github.com/cgpilot/cgpilot/agent/podspec"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/recommend"
)

// oom.go: an OOM kill, seen by oomwatch within milliseconds, raises the
// container's memory limit at once by the documented formula (rightsize.
// OOMBump) with a direct, leveled cgroup write of pod and container, then
// through pods/resize so that the kubelet agrees with the cgroup. Only
// pods whose effective mode applies changes (InPlace, Auto; a pod's
// annotation only narrows its policy's) are bumped, at most
// maxOOMBumpsPerDay times a container, never past the one clamp
// (policy.Clamp: the LimitRange, the node's allocatable) nor to a limit
// pods/resize refused; when the API refuses the raise, the cgroup goes
// back to the spec's value (apply.go). Every kill is recorded in the
// histograms, counted and reported.

// oomLoop handles kills until the watcher closes.
func (r *Runner) oomLoop(ctx context.Context) {
	r.guard.Run(ctx, LoopOOM, func() bool {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-r.oom.Events():
			if !ok {
				return false
			}
			r.onOOM(ev)
		}
		return true
	})
}

func (r *Runner) onOOM(ev oomwatch.Event) {
	r.mu.Lock()
	ref, ok := r.dirs[ev.Dir]
	rp := r.pods[ref.uid]
	var ctr rsContainer
	var workload report.Workload
	if rp != nil {
		ctr, workload = rp.containers[ref.container], rp.workload
	}
	r.mu.Unlock()
	if !ok || rp == nil {
		r.m.oomKills.WithLabelValues("unknown").Inc()
		return // a kill in a cgroup no tracked container owns
	}
	p := r.host.PodByUID(ref.uid)
	if p == nil {
		return
	}
	r.m.oomKills.WithLabelValues("container").Inc()
	who := &PodRef{UID: ref.uid, Namespace: p.Namespace, Name: p.Name}
	// One line a kill, with what became of it: the kills of one OOM (a
	// memory.oom.group kill is one event a process) are told apart from a
	// new OOM by these times, so the log must show them.
	result, last := "forgotten", oomAnswer{}
	defer func() {
		r.log.Info("OOM kill", "pod", podspec.Key(p.Namespace, p.Name), "container", ref.container, "dir", ev.Dir, "source", ev.Source.String(),
			"pid", ev.PID, "comm", ev.Comm, "kernel", ev.Kernel.String(), "seen", ev.Seen.String(),
			"lastRaise", last.at.String(), "lastRaiseGroupKill", last.group, "result", result)
	}()
	in, used, ok := r.oomInput(p, ref.container, ev.Time)
	if !ok {
		return // forgotten since the lookup above
	}
	spec, _ := in.Spec()
	usage := max(spec.Limits.Memory, used)
	// The kill is recorded (histograms, report, Event) on every path, but
	// after the cgroup write where there is one: none of it decides the
	// raise, and the raise is the part measured in milliseconds.
	recorded := false
	record := func() {
		if recorded {
			return
		}
		recorded = true
		key := report.Key{Workload: workload, Container: ref.container}.String()
		r.engine.RecordOOM(key, recommend.OOMEvent{Time: ev.Time, UsageBytes: usage, LimitBytes: spec.Limits.Memory, RequestBytes: spec.Requests.Memory})
		r.rep.OOMKilled(key, p.Name, ev.Time, usage, spec.Limits.Memory, spec.Requests.Memory)
		victim := fmt.Sprintf("pid %d %q", ev.PID, ev.Comm)
		if ev.PID == 0 {
			victim = "seen by the cgroup's OOM counter: process unknown"
		}
		msg := fmt.Sprintf("container %s OOM-killed (%s) at memory limit %s", ref.container, victim, local.FormatMemory(spec.Limits.Memory))
		r.host.Emit(who, Event{Warning: true, Reason: "OOMKilled", Message: msg})
	}
	defer record() // a panic below still records the kill

	pol, eff := rightsize.Effective(r.matching(p), p.Annotations)
	if pol == nil || !eff.Mode.Applies() {
		result = "not-applied"
		r.m.oomBumps.WithLabelValues(result).Inc()
		return
	}
	r.mu.Lock()
	last = rp.answered[ref.container]
	r.mu.Unlock()
	if sameOOM(ev, last) {
		result = "same-oom"
		// Recorded (the deferred record), not raised again: the raise
		// already answered the OOM this kill belongs to.
		r.m.oomBumps.WithLabelValues(result).Inc()
		return
	}
	instance := ref.uid + "/" + ref.container
	kills := r.engine.Kills(instance, ev.Time, rightsize.OOMWindow)
	bumps := r.engine.Bumps(instance, ev.Time, rightsize.OOMWindow)
	to, clamped, why := rightsize.OOMBump(in, pol, usage, kills, bumps)
	if why != "" {
		result = "at-limit"
		r.m.oomBumps.WithLabelValues(result).Inc()
		record()
		r.host.Emit(who, Event{Warning: true, Reason: "MemoryNotRaised",
			Message: fmt.Sprintf("container %s: memory limit not raised: %s", ref.container, why)})
		return
	}
	err := r.bumpCgroups(ref.uid, ctr, spec.Limits.Memory, to.Limits.Memory)
	written := oomwatch.Monotonic()
	record()
	if len(clamped) > 0 {
		r.m.clamped.WithLabelValues("oom").Inc()
		r.log.Info("an OOM bump was clamped", "pod", podspec.Key(p.Namespace, p.Name), "policy", pol.Name, "bounds", policy.Bindings(clamped))
	}
	result = fmt.Sprintf("raised %s→%s", local.FormatMemory(spec.Limits.Memory), local.FormatMemory(to.Limits.Memory))
	if err != nil {
		label, note, failed := directWriteFailure(err)
		result += note
		r.m.oomBumps.WithLabelValues(label).Inc()
		if failed {
			r.host.Emit(who, Event{Warning: true, Reason: "MemoryRaiseFailed", Message: err.Error()})
		}
	} else {
		r.m.oomBumps.WithLabelValues("written").Inc()
		from := ev.Kernel
		if from == 0 {
			from = ev.Seen
		}
		if from > 0 {
			d := written - from
			r.m.oomLatency.Observe(d.Seconds())
			if r.bumped != nil {
				r.bumped(ev, d)
			}
		}
	}
	// Read after the write, off the measured path. A cgroup already gone
	// (the group kill ended the container) falls back to sameOOM's times.
	group, _ := cgroup.OOMGroup(ev.Dir)
	r.mu.Lock()
	// The OOM is answered even where the direct write failed (a group
	// kill can remove the container's cgroup first): the raise goes on
	// through pods/resize below, and the kill events of the same OOM that
	// follow must not raise it again.
	if rp.answered == nil {
		rp.answered = map[string]oomAnswer{}
	}
	rp.answered[ref.container] = oomAnswer{at: written, dir: ev.Dir, group: group}
	if rp.oomFloor == nil {
		rp.oomFloor = map[string]float64{}
	}
	rp.oomFloor[ref.container] = to.Limits.Memory
	rp.oomFloorUntil = ev.Time.Add(rightsize.OOMWindow)
	r.mu.Unlock()
	summary := fmt.Sprintf("%s: memory limit %s→%s after %d OOM kill(s) in %v (bump %d of at most %d)", ref.container,
		local.FormatMemory(spec.Limits.Memory), local.FormatMemory(to.Limits.Memory), kills, rightsize.OOMWindow, bumps+1, pol.MaxOOMBumpsPerDay)
	if len(clamped) > 0 {
		summary += "; clamped: " + policy.Bindings(clamped)
	}
	r.host.Emit(who, Event{Reason: "MemoryRaised", Message: summary})
	r.apply.requestBump(p, ref.container, to, summary)
	// Counted last: the log's fsync does not delay the durable raise, and
	// this loop handles the container's next kill only after it.
	if err := r.engine.RecordBump(instance, ev.Time, rightsize.OOMWindow); err != nil {
		r.log.Error(err, "the OOM bump log")
	}
}

// directWriteFailure classifies a raise whose direct cgroup write failed
// (pods/resize goes on either way): its metric label, the note for the
// kill's log line, and whether it is a failure to warn of. A container
// whose cgroup is gone is not: on cgroup v2 the OOM ends the whole
// container (memory.oom.group) and a kill seen late (the counters) finds
// it removed; its successor starts from the spec that pods/resize raises.
func directWriteFailure(err error) (label, note string, failed bool) {
	if errors.Is(err, cgroup.ErrGone) {
		return "gone", " (the container's cgroup was already gone: pods/resize raises its successor)", false
	}
	return "failed", " (the direct write failed: pods/resize goes on)", true
}

// oomAnswer is a container's last OOM raise.
type oomAnswer struct {
	at    time.Duration // when it was written (CLOCK_MONOTONIC, oomwatch.Monotonic); 0: none
	dir   string        // the killed container's cgroup (oomwatch.Event.Dir)
	group bool          // that cgroup has memory.oom.group 1
}

// oomGroupGrace bounds how long after a raise a kill in the same
// group-killed cgroup still counts as the raise's OOM.
const oomGroupGrace = 5 * time.Second

// sameOOM says whether a kill belongs to the OOM the container's last
// raise answered, so that it is recorded but not raised again. On cgroup
// v2 the kubelet sets memory.oom.group=1 on every container, and the
// kernel then kills every process of the cgroup at one OOM, each a kill
// event (the eBPF victim mark, and one count in memory.events' oom_kill);
// the cgroup v2 node tier saw one OOM raise the limit three times, once a
// process. Two rules:
//   - a kill from before the raise was written was at the limit that raise
//     replaced. The counters backend has no kernel time: the time it saw
//     the count change stands in.
//   - in a group-killed cgroup the whole container ends at the OOM, so a
//     kill there within oomGroupGrace after the raise is one of its
//     processes killed late (the node tier saw one 90 ms after the first,
//     under qemu TCG) or a kill a counter reported late: a new OOM at the
//     raised limit happens in the container that replaces it, in a new
//     cgroup.
func sameOOM(ev oomwatch.Event, last oomAnswer) bool {
	at := ev.Kernel
	if at == 0 {
		at = ev.Seen
	}
	if last.at == 0 || at == 0 {
		return false
	}
	if last.group && ev.Dir != "" && ev.Dir == last.dir && at <= last.at+oomGroupGrace {
		return true
	}
	return at <= last.at
}

// oomInput is what the OOM bump of p's container needs, and the memory
// the container used when killed (0 when it is not in p's spec); ok is
// false when the pod is not tracked (any more: see input). It reads only
// what a bump does, not the decision's view (input): no policy step,
// exclusive cores, merged recommendations or resize state, and no other
// container's usage.
func (r *Runner) oomInput(p *corev1.Pod, container string, now time.Time) (in rightsize.OOMInput, used float64, ok bool) {
	in = rightsize.OOMInput{Container: container, QoS: string(podspec.QoS(p)), Specs: make([]rightsize.ContainerSpec, len(p.Spec.Containers))}
	in.LimitRange, in.Allocatable = r.bounds.of(p.Namespace)
	written := r.apply.values(string(p.UID))
	for i, spec := range p.Spec.Containers {
		in.Specs[i] = rightsize.ContainerSpec{Name: spec.Name, Spec: specInForce(spec, written)}
	}
	if r.beforeLookup != nil {
		r.beforeLookup(string(p.UID))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rp := r.pods[string(p.UID)]
	if rp == nil {
		return rightsize.OOMInput{}, 0, false
	}
	if _, inSpec := in.Spec(); inSpec {
		used, _ = r.memoryUseLocked(rp, container, now)
		in.RefusedMemoryLimit = rp.refused[container]
	}
	return in, used, true
}

// memoryUseLocked is the memory the tracked pod's container uses, in
// bytes: its last sample (0 before one), held up at now while an OOM
// bump is recent (the floor onOOM sets; a decision's input reads it
// too). r.mu held.
func (r *Runner) memoryUseLocked(rp *rsPod, container string, now time.Time) (usage, workingSet float64) {
	if ctr, ok := rp.containers[container]; ok {
		s := r.last[ctr.id]
		usage, workingSet = s.usage, s.workingSet
	}
	if f := rp.oomFloor[container]; f > 0 && now.Before(rp.oomFloorUntil) {
		// A recent OOM bump: memory stays at least where it was raised.
		workingSet = math.Max(workingSet, f/(1+rightsize.MemoryMargin))
		usage = math.Max(usage, f/(1+rightsize.MemoryMargin))
	}
	return usage, workingSet
}

// bumpCgroups raises a container's memory limit, and its pod's by as much
// when the pod has one, in one leveled plan (the pod first).
func (r *Runner) bumpCgroups(uid string, ctr rsContainer, from, to float64) error {
	podPath := parentPath(ctr.path)
	podCur, err := r.cgroups.ReadMemoryLimit(podPath)
	if err != nil {
		return err
	}
	plan := cgroup.PodResources{UID: uid, Path: podPath, Containers: map[string]cgroup.Resources{}}
	lim := int64(to)
	plan.Containers[ctr.path] = cgroup.Resources{MemoryLimit: &lim}
	if podCur > 0 && to > from {
		podLim := podCur + int64(to-from)
		plan.Pod.MemoryLimit = &podLim
	}
	written, err := r.cgroups.ApplyPodResources(plan)
	r.writes.Add(float64(len(written)))
	return err
}

func parentPath(p string) string {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "/"
}

// bumpRefused: the API server refused to keep OOM bumps (bumped, by
// container) in the pod's spec, so the raise would bypass its quota or
// LimitRange. The pod's cgroups go back to the spec's values (what the
// kubelet enforces), later bumps of those containers stay below the
// refused limits, and a Warning Event says why. Where the container uses
// more than the spec's limit with the cgroup package's margin (it
// refuses a limit below usage), the write is retried at each sweep.
func (r *Runner) bumpRefused(p *corev1.Pod, ref *PodRef, bumped map[string]float64, cause error) {
	names := make([]string, 0, len(bumped))
	r.mu.Lock()
	rp := r.pods[string(p.UID)]
	for name, v := range bumped {
		names = append(names, fmt.Sprintf("%s at %s", name, local.FormatMemory(v)))
		if rp == nil {
			continue
		}
		if rp.refused == nil {
			rp.refused = map[string]float64{}
		}
		if cur, ok := rp.refused[name]; !ok || v < cur {
			rp.refused[name] = v
		}
		delete(rp.oomFloor, name)
	}
	r.mu.Unlock()
	sort.Strings(names)
	err := r.revert(p)
	msg := fmt.Sprintf("pods/resize refused to keep the memory limit raised after an OOM kill (%s): %v", strings.Join(names, ", "), cause)
	if err != nil {
		msg += "; setting the cgroups back to the spec's values failed, retried at each sweep: " + err.Error()
		r.mu.Lock()
		if rp := r.pods[string(p.UID)]; rp != nil {
			rp.revert = true
		}
		r.mu.Unlock()
	} else {
		msg += "; the cgroups are back at the spec's values, and later raises stay below the refused limit"
	}
	r.m.oomBumps.WithLabelValues("refused").Inc()
	r.log.Info("an OOM bump was refused by the API server", "pod", ref.Namespace+"/"+ref.Name, "detail", msg)
	r.host.Emit(ref, Event{Warning: true, Reason: local.EventMemoryRaiseRefused, Message: msg})
}

// revert writes the pod's cgroups as its spec says.
func (r *Runner) revert(p *corev1.Pod) error {
	plan, err := r.podResources(p, nil)
	if err != nil {
		return err
	}
	written, err := r.cgroups.ApplyPodResources(plan)
	r.writes.Add(float64(len(written)))
	return err
}

// revertPending retries the reverts bumpRefused could not write (each
// sweep), until one is written or the pod is gone.
func (r *Runner) revertPending() {
	r.mu.Lock()
	var uids []string
	for uid, rp := range r.pods {
		if rp.revert {
			uids = append(uids, uid)
		}
	}
	r.mu.Unlock()
	for _, uid := range uids {
		p := r.host.PodByUID(uid)
		if p == nil {
			continue
		}
		if err := r.revert(p); err != nil {
			r.log.V(1).Info("the cgroups of a refused OOM bump are not back at the spec's values yet", "pod", podspec.Key(p.Namespace, p.Name), "err", err.Error())
			continue
		}
		r.mu.Lock()
		if rp := r.pods[uid]; rp != nil {
			rp.revert = false
		}
		r.mu.Unlock()
		r.log.Info("the cgroups of a refused OOM bump are back at the spec's values", "pod", podspec.Key(p.Namespace, p.Name))
		r.host.Emit(&PodRef{UID: uid, Namespace: p.Namespace, Name: p.Name}, Event{Reason: local.EventMemoryRaiseReverted,
			Message: "the memory limit pods/resize refused to keep is out of the cgroups: they are back at the spec's values"})
	}
}
