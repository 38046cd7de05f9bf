//go:build linux

// Command reschedbench measures rescheduling on a simulated cluster: the
// test bed's real control plane (API server, controllers, kube-scheduler
// with the aggregator's filter and prioritize verbs), N registered nodes
// whose kubelets and agents test/simcluster plays (pods become Ready;
// every period each node reports its pods' use through the real
// report.Client, as the aggregator's load generators do), cgpilot-aggregator
// built and run as a child process with --reschedule, and the upstream
// descheduler (test/deschedbin) run in-cluster style with the rescheduling
// component's policy, RBAC and eviction webhook.
//
// Usage is skewed twice: workloads' peaks follow a log-normal law, and
// every pod is first placed on a few nodes (the others cordoned). The
// pods idle now (a share of their peak) and peaked yesterday (one past
// window seeds the 7-day peaks). It measures, from the pods' placement and
// the usage it gives them (what the aggregator is told), the share of
// nodes breaking the placement rule (the sum of their pods' 7-day peaks
// above the watermark) or hot (real use above the hot watermark) before
// and after; the moves by outcome (the aggregator's records); the time to
// converge (the last move or change of that share, once no node is queued,
// nothing is pending and nothing changed for a queue pass); and the cost:
// the aggregator's and the descheduler's CPU seconds and peak RSS. The
// aggregator's CPU while it only takes reports (before the descheduler
// starts) is the same run's baseline.
//
// It prints the summary as JSON (and writes it to --out); progress goes to
// stderr. Not part of make test:
//
//	make deps && go run ./test/cmd/reschedbench --nodes 500 --out reschedbench.json
//
// Needs root (the descheduler's private mount namespace) and the built
// binaries (CGPILOT_K8S_BINS, CGPILOT_DESCHEDULER, else their build
// scripts are run). Bounds: loopback only, at most 2,000 nodes and a 40
// minute timeout; it stops everything it started by PID on the way out,
// also on Ctrl-C.
//
// # Files
//
// main.go is the run: the flags, finding the binaries and building the
// aggregator, starting the control plane, the simulated nodes and pods,
// the aggregator and the descheduler, skewing the usage, measuring before
// and after (the pods' placement, the aggregator's API and metrics) and
// the JSON summary. nodes.go registers the simulated nodes and keeps them
// alive by renewing their Leases alone, with a client of its own (the
// harness's per-node heartbeat does not scale to hundreds of nodes), and
// counts the nodes no longer Ready or tainted.
package main
