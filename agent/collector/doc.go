// Package collector samples the containers of a node's pods: every
// interval, one round reads each container's cgroup through a held
// cgroup.Reader (one pread per file, no allocation) and turns the counters
// into usage — CPU cores from usage deltas, the memory working set,
// throttled periods, pressure stall, OOM kills — stamped with the round's one time,
// and hands the round to a Sink (the recommender, the on-disk history).
//
// It follows node_exporter's collector pattern: each kind of measure is a
// collector whose update, in its own file (cpu.go, memory.go, throttle.go,
// psi.go, oom.go), fills part of a Sample from the previous and the current
// Stats; one flat table (collectors.go) names them, says which are
// required, and holds the counter rule they share (delta). A collector whose kernel feature is
// absent (no PSI, no CFS bandwidth on a v2 cgroup without the cpu
// controller) returns ErrNoData, which is counted apart from errors; each
// collector exports how often it succeeded, had no data or failed.
//
// collector.go holds the Collector itself: its targets, the round (Run,
// Collect) and the Sample and Sink types; metrics.go its series, the
// cgpilot_collector_* ones, per-collector results included. Targets come
// from the agent (Set, Remove), already resolved to cgroup directories by
// package cgroup: this package knows no Kubernetes types and builds no
// cgroup path. A container whose cgroup vanished (it exited) is dropped
// at its next read.
//
// It imports cgroup, internal/loop (Options.Guard: a panicking round is
// recovered and counted by the agent), the Prometheus client and the
// standard library; no client-go, no other cgpilot package
// (hack/checkimports/walls.go).
package collector
