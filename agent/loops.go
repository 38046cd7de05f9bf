package agent

import (
	"github.com/cgpilot/cgpilot/agent/oomwatch"
	"github.com/cgpilot/cgpilot/agent/reporter"
	"github.com/cgpilot/cgpilot/agent/rightsize/runner"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/internal/loop"
)

// loops.go: the agent's long-lived loops and the one rule they share
// (package internal/loop): a panic costs one iteration (one key, one
// event, one round, one request), is counted in
// cgpilot_recovered_panics_total{loop} and logged with its stack, and the
// loop goes on: a workqueue key is requeued with the queue's backoff, a
// round-driven loop waits loop.Guard's growing backoff, an event handler
// takes the next event. A reconcile's panic is also reported on its pod.

// The loops, as the loop label of cgpilot_recovered_panics_total.
const (
	loopReconcile    = "reconcile"             // reconcile workers, per pod key (reconcile.go)
	loopStatus       = "status"                // the annotation writer, per key (reconcile.go)
	loopSweep        = "sweep"                 // the periodic sweep, pools and right-sizing (agent.go)
	loopPodEvents    = "pod-informer"          // the pod informer's event handlers (informer.go)
	loopCgroupEvents = cgroup.WatchLoop        // the cgroup watcher's events and the agent's callbacks (cgroup/watch.go, agent.go)
	loopPolicyEvents = runner.LoopPolicyEvents // the RightsizePolicy and namespace informers' handlers (agent/rightsize/runner)
	loopSample       = runner.LoopSample       // the sampling rounds and their sinks (agent/rightsize/runner)
	loopDecide       = runner.LoopDecide       // the decision rounds (agent/rightsize/runner)
	loopResize       = runner.LoopResize       // the applier, per pod key (agent/rightsize/runner)
	loopOOM          = runner.LoopOOM          // the OOM watcher's consumer: OOM bumps (agent/rightsize/runner)
	loopCheckpoint   = runner.LoopCheckpoint   // the histograms' checkpoints (agent/rightsize/runner)
	loopOwners       = runner.LoopOwners       // the owner lookups of ReplicaSets and Jobs (agent/rightsize/runner)
	loopReport       = reporter.LoopReport     // the report windows and merged fetches (agent/reporter)
	loopReportSend   = reporter.LoopReportSend // the report client's sender (agent/reporter)
	loopHealthHTTP   = "health-http"           // /healthz, /readyz, /metrics requests (agent.go)
	loopMetricsHTTP  = "metrics-http"          // the cluster /metrics requests (agent.go)
	loopLocalAPI     = "local-api"             // the local API's requests (agent.go)
	loopOOMWatch     = oomwatch.Loop           // the OOM watcher's own readers (agent/oomwatch)
)

// loops are every loop label, exported at 0 from the start.
var loops = []string{loopReconcile, loopStatus, loopSweep, loopPodEvents, loopCgroupEvents, loopPolicyEvents, loopSample,
	loopDecide, loopResize, loopOOM, loopCheckpoint, loopOwners, loopReport, loopReportSend, loopHealthHTTP, loopMetricsHTTP, loopLocalAPI, loopOOMWatch}

// newGuard is the controller's loop.Guard: it counts and logs.
func (c *controller) newGuard() *loop.Guard {
	return &loop.Guard{OnPanic: func(p *loop.Panic) {
		c.metrics.recovered.WithLabelValues(p.Loop).Inc()
		c.log.Error(p, "recovered a panic; the loop goes on (please report this as a bug)", "loop", p.Loop, "stack", string(p.Stack))
	}}
}
