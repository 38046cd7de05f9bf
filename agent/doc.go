// Package agent is the cgpilot node agent: it watches its node's pods,
// runs the CPU pools' controller and wires the libraries, right-sizing
// (agent/rightsize/runner) and reporting (agent/reporter) to Kubernetes;
// every decision and every cgroup write happens in the packages it wires.
//
// # From a pod to a cgroup write
//
// One exclusive-core annotation travels through six files:
//
//	agent/informer.go        the pod informer (spec.nodeName field selector)
//	                         and the cgroup watcher's events become workqueue
//	                         keys: the single hand-off
//	agent/reconcile.go       a worker pops the key, turns the pod into a
//	                         pools.Pod (pod.go) and calls Manager.Sync
//	agent/pools/pools.go     the pools decide (policy.go asks package
//	                         topology for the cores, state.go records and
//	                         checkpoints them) and plan every pod's cpuset
//	cgroup/kubepods.go       the pod's placement becomes leveled plans
//	cgroup/writer.go         safety checks, then the writes in a safe order
//	cgroup/file.go           the confined open and write of cpuset.cpus
//
// Afterwards reconcile.go reports: metrics, Events, and the status
// annotations, patched by a second worker off the write path, so an API
// round trip never delays the next cgroup write. A failed write becomes a
// status annotation, an Event and a requeue; a pod whose cgroups are only
// half created (one hierarchy at a time) is synced again shortly, with no
// Warning.
//
// # Files
//
// agent.go (New, Run: discovery, servers, restore), loops.go (the
// long-lived loops and their recover-and-count), informer.go,
// reconcile.go (the pools controller and the status worker), pod.go (pod
// → pools.Pod, saturating CPU arithmetic through agent/podspec),
// kubeletstate.go (the kubelet's static CPU manager), podresources.go
// (the kubelet's pod-resources socket), events.go, metrics.go,
// queuemetrics.go (the work queues' series), state.go (the tables'
// sizes), health.go (/healthz, /readyz), api.go (the local API of
// package api/local), socket.go (its unix socket and peer credentials),
// config.go, wire.go (right-sizing and reporting built from the config,
// and the controller as right-sizing's Host).
//
// Sub-packages: pools (the CPU pools), rightsize (right-sizing's
// decisions) and rightsize/runner (right-sizing on the node: tracking,
// deciding, applying, OOM raises, policy status), reporter (the
// aggregator's side), collector (sampling), history, oomwatch (OOM
// kills), podspec (what the agent reads of a pod), kube (the API
// client).
//
// # Error contract
//
// Configuration errors wrap ErrInvalidConfig and name the field; pool
// refusals and write failures come from package pools (pools.ErrRefused,
// pools.ErrCgroupWrite) and become a status annotation and an Event on the
// pod. Bad input from a pod never changes anything but that pod's status:
// no other pod's cgroup, no allocation, no checkpoint byte. Every
// long-lived loop (loops.go lists them: reconcile and status workers,
// sweep, sampling, decisions, resizes, owner lookups, OOM bumps, reports, informer and
// cgroup-watch handlers, the HTTP servers) runs its iterations under one
// loop.Guard (internal/loop): a panic is recovered, counted in
// cgpilot_recovered_panics_total{loop}, logged with its stack, and the
// loop goes on with backoff; a reconcile's panic is also reported on its
// pod and the pod retried; other pods go on.
//
// # Imports
//
// agent imports client-go, Prometheus and every cgpilot package; only cmd/*
// and test/* import it, and its sub-packages never do (hack/checkimports/walls.go):
// right-sizing (agent/rightsize/runner) gets the controller only as its
// Host (pod lookup, Events, the status worker, exclusive CPUs), and feeds
// the RightsizePolicies, the namespaces' labels, LimitRanges and the
// node's allocatable to the policy compiler (api/v1alpha1/policy) and its
// one clamp itself.
// The agent builds on Linux only.
package agent
