package runner

import (
	"time"

	"github.com/cgpilot/cgpilot/agent/history"
	"github.com/cgpilot/cgpilot/agent/oomwatch"
	"github.com/cgpilot/cgpilot/agent/reporter"
	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
)

// inspect.go: what the agent reads of right-sizing besides its views (the
// history export, the reporter's view, the tables' sizes) and what its
// whole-agent tests and the OOM benchmark look at. None of it changes a
// decision.

// History is the usage history (the local API's export).
func (r *Runner) History() *history.Store { return r.hist }

// Reporter is the aggregator's reporter, nil when reporting is off.
func (r *Runner) Reporter() *reporter.Reporter { return r.rep }

// OOMWatcher is the OOM watcher, nil when it is off.
func (r *Runner) OOMWatcher() *oomwatch.Watcher { return r.oom }

// Sizes adds the size of every table right-sizing keeps per pod,
// container or workload to out (cgpilot_state_entries{table}).
func (r *Runner) Sizes(out map[string]int) {
	r.mu.Lock()
	out["tracked-pods"], out["oom-watched-cgroups"], out["last-samples"], out["pending-recommendations"] = len(r.pods), len(r.dirs), len(r.last), r.pendingRec.len()
	r.mu.Unlock()
	r.apply.sizes(out)
	r.owners.mu.Lock()
	out["owner-cache"] = len(r.owners.parents)
	r.owners.mu.Unlock()
	out["histogram-keys"] = len(r.engine.Keys())
	out["sampled-containers"] = r.coll.Targets()
	if r.oom != nil {
		out["oom-watcher-cgroups"] = r.oom.Watching()
	}
}

// OnOOMBump, when set before Start (the kernel benchmark), is told the
// latency of each OOM bump from the kill to the written limit.
func (r *Runner) OnOOMBump(f func(oomwatch.Event, time.Duration)) { r.bumped = f }

// Watches says which tracked pod and container the OOM-watched memory
// cgroup dir belongs to.
func (r *Runner) Watches(dir string) (uid, container string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref, ok := r.dirs[dir]
	return ref.uid, ref.container, ok
}

// State is the state of a tracked pod's last decision ("" when the pod is
// not tracked or not decided yet).
func (r *Runner) State(uid string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rp := r.pods[uid]; rp != nil {
		return rp.decision.State
	}
	return ""
}

// ContainerKey is the workload container key ("namespace/Kind/name/
// container") of a tracked pod's container; false when not tracked.
func (r *Runner) ContainerKey(uid, container string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rp := r.pods[uid]
	if rp == nil {
		return "", false
	}
	return containerKey(rp, container), true
}

// Presets are the presets the valid RightsizePolicies name (none before
// the CRD is served).
func (r *Runner) Presets() []string {
	if pi := r.policies(); pi != nil {
		return pi.presets()
	}
	return nil
}

// Allocatable is the node's allocatable as the clamp sees it (zero until
// the Node was read).
func (r *Runner) Allocatable() policy.Values {
	_, alloc := r.bounds.of("")
	return alloc
}

// Redecide makes every tracked pod decide again at the next chance, as
// a policy change does.
func (r *Runner) Redecide() { r.policyChanged() }
