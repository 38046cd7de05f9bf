// Package kube is everything the aggregator reads from and writes to the
// API server besides its Lease: the WorkloadRecommendation checkpoints
// (Checkpointer: load all at start or takeover, write changed workloads
// within a write budget by server-side apply, delete those of workloads
// gone), the nodes' usage-profile annotations (NodeAnnotator), the
// RightsizePolicy and namespace caches (Policies) that feed the policy
// compiler (api/v1alpha1/policy) to resolve a report's policy and match new
// pods for the webhook, the LimitRange and node caches (Limits) that
// bound the webhook's clamp, and what the rescheduler reads (Cluster: a
// pod, its PodDisruptionBudgets, a controller's newest placed pod, the
// node names from a metadata-only informer).
//
// Writes are budgeted because the API server is shared: at the default 20
// checkpoint writes a second, 50,000 workloads are each written every 42
// minutes; the histograms decay with half-lives of 12-18 hours, so a
// takeover loses at most that much of a day's evidence for a workload.
//
// Errors: a failed write is logged, counted and retried on the next pass
// (the workload stays dirty); an object that does not decode is skipped at
// load, never fatal.
//
// It imports client-go, api/v1alpha1 and its compiler, and the
// aggregator's state and profile; nothing of agent and no HTTP room
// (hack/checkimports/walls.go).
package kube
