package agent

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cgpilot/cgpilot/agent/oomwatch"
	"github.com/cgpilot/cgpilot/agent/pools"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/recommend"
)

// oom.go: an OOM kill, seen by oomwatch within milliseconds, raises the
// container's memory limit at once by the documented formula (rightsize.
// OOMBump) with a direct, leveled cgroup write of pod and container, then
// through pods/resize so that the kubelet agrees with the cgroup. Only
// pods whose policy applies changes (InPlace, Auto) are bumped; every kill
// is recorded in the histograms, counted and reported.

// oomLoop handles kills until the watcher closes.
func (r *rightsizer) oomLoop(ctx context.Context) {
	r.c.guard.Run(ctx, loopOOM, func() bool {
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

// monotonic is CLOCK_MONOTONIC, the clock of oomwatch.Event.Kernel.
func monotonic() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

func (r *rightsizer) onOOM(ev oomwatch.Event) {
	r.mu.Lock()
	ref, ok := r.dirs[ev.Dir]
	rp := r.pods[ref.uid]
	var ctr rsContainer
	var workload workloadRef
	if rp != nil {
		ctr, workload = rp.containers[ref.container], rp.workload
	}
	r.mu.Unlock()
	if !ok || rp == nil {
		r.c.metrics.oomKills.WithLabelValues("unknown").Inc()
		return // a kill in a cgroup no tracked container owns
	}
	p := r.c.podByUID(ref.uid)
	if p == nil {
		return
	}
	r.c.metrics.oomKills.WithLabelValues("container").Inc()
	who := &podRef{UID: ref.uid, Namespace: p.Namespace, Name: p.Name}
	in, _, ok := r.input(p, ev.Time)
	if !ok {
		return // forgotten since the lookup above
	}
	var c rightsize.Container
	for _, x := range in.Containers {
		if x.Name == ref.container {
			c = x
		}
	}
	usage := max(c.Spec.Limits.Memory, c.Usage)
	key := string(workload) + "/" + ref.container
	r.engine.RecordOOM(key, recommend.OOMEvent{Time: ev.Time, UsageBytes: usage, LimitBytes: c.Spec.Limits.Memory, RequestBytes: c.Spec.Requests.Memory})
	r.rep.oomKilled(key, p.Name, ev.Time, usage, c.Spec.Limits.Memory, c.Spec.Requests.Memory)
	victim := fmt.Sprintf("pid %d %q", ev.PID, ev.Comm)
	if ev.PID == 0 {
		victim = "seen by the cgroup's OOM counter: process unknown"
	}
	msg := fmt.Sprintf("container %s OOM-killed (%s) at memory limit %s", ref.container, victim, local.FormatMemory(c.Spec.Limits.Memory))
	r.c.events.emit(who, pools.Event{Warning: true, Reason: "OOMKilled", Message: msg})

	pol, mode := policyOf(in)
	if pol == nil || (mode != rightsize.ModeInPlace && mode != rightsize.ModeAuto) {
		r.c.metrics.oomBumps.WithLabelValues("not-applied").Inc()
		return
	}
	factor := 0.0
	if pol.OOMFactor != nil {
		factor = *pol.OOMFactor
	} else if preset, err := recommend.Preset(pol.Preset); err == nil {
		factor = preset.OOMFactor
	}
	maxAllowed := 0.0
	if m := pol.Overrides.Memory.MaxAllowed; m != nil {
		maxAllowed = *m
	}
	kills := r.engine.Kills(ref.uid+"/"+ref.container, ev.Time, rightsize.OOMWindow)
	to, ok := rightsize.OOMBump(c, in.QoS, usage, factor, kills, maxAllowed)
	if !ok {
		r.c.metrics.oomBumps.WithLabelValues("at-limit").Inc()
		r.c.events.emit(who, pools.Event{Warning: true, Reason: "MemoryNotRaised",
			Message: fmt.Sprintf("container %s: no container limit to raise, or already at maxAllowed", ref.container)})
		return
	}
	if err := r.bumpCgroups(ref.uid, ctr, c.Spec.Limits.Memory, to.Limits.Memory); err != nil {
		r.c.metrics.oomBumps.WithLabelValues("failed").Inc()
		r.c.events.emit(who, pools.Event{Warning: true, Reason: "MemoryRaiseFailed", Message: err.Error()})
	} else {
		r.c.metrics.oomBumps.WithLabelValues("written").Inc()
		from := ev.Kernel
		if from == 0 {
			from = ev.Seen
		}
		if from > 0 {
			d := monotonic() - from
			r.c.metrics.oomLatency.Observe(d.Seconds())
			if r.bumped != nil {
				r.bumped(ev, d)
			}
		}
	}
	r.mu.Lock()
	if rp.oomFloor == nil {
		rp.oomFloor = map[string]float64{}
	}
	rp.oomFloor[ref.container] = to.Limits.Memory
	rp.oomFloorUntil = ev.Time.Add(rightsize.OOMWindow)
	r.mu.Unlock()
	summary := fmt.Sprintf("%s: memory limit %s→%s after %d OOM kill(s) in %v", ref.container,
		local.FormatMemory(c.Spec.Limits.Memory), local.FormatMemory(to.Limits.Memory), kills, rightsize.OOMWindow)
	r.c.events.emit(who, pools.Event{Reason: "MemoryRaised", Message: summary})
	r.apply.request(p, map[string]rightsize.Requirements{ref.container: to}, "OOMBump", summary)
}

// policyOf is the single policy in force and the effective mode.
func policyOf(in rightsize.Pod) (*rightsize.Policy, rightsize.Mode) {
	if in.OverrideErr != nil || len(in.Policies) != 1 {
		return nil, rightsize.ModeOff
	}
	mode := in.Policies[0].Mode
	if in.Override.Mode != "" {
		mode = in.Override.Mode
	}
	return in.Policies[0], mode
}

// bumpCgroups raises a container's memory limit, and its pod's by as much
// when the pod has one, in one leveled plan (the pod first).
func (r *rightsizer) bumpCgroups(uid string, ctr rsContainer, from, to float64) error {
	podPath := parentPath(ctr.path)
	cur, err := r.c.cgroups.ReadCurrent(podPath)
	if err != nil {
		return err
	}
	plan := cgroup.PodResources{UID: uid, Path: podPath, Containers: map[string]cgroup.Resources{}}
	lim := int64(to)
	plan.Containers[ctr.path] = cgroup.Resources{MemoryLimit: &lim}
	if cur.MemoryLimit > 0 && to > from {
		podLim := cur.MemoryLimit + int64(to-from)
		plan.Pod.MemoryLimit = &podLim
	}
	written, err := r.c.cgroups.ApplyPodResources(plan)
	r.c.metrics.writes.Add(float64(len(written)))
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
