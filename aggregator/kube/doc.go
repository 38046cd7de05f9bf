// Package kube is most of what the aggregator reads from and writes to
// the API server (its Lease, the CA ConfigMap, Events and the owner
// lookups of ReplicaSets and Jobs are package aggregator's): the
// WorkloadRecommendation checkpoints (Checkpointer: load all at start or
// takeover, write changed workloads within a write budget by server-side
// apply, delete those of workloads gone), the nodes' usage-profile
// annotations (NodeAnnotator), the RightsizePolicy and namespace caches
// (Policies) that feed the policy compiler (api/v1alpha1/policy) to
// resolve a report's policy and match new pods for the webhook, the
// LimitRange and node caches (Limits) that bound the webhook's clamp, and
// what the rescheduler reads (Cluster: a pod, its PodDisruptionBudgets, a
// controller's newest placed pod, the node names from a metadata-only
// informer).
//
// Files, one part each:
//
//	checkpoint.go    Checkpointer, and a workload's checkpoint to and from
//	                 its WorkloadRecommendation object
//	annotate.go      NodeAnnotator: the nodes' usage-profile annotations
//	policies.go      Policies: the RightsizePolicy and namespace caches
//	limits.go        Limits: the LimitRange cache and the largest node
//	                 allocatable, for the webhook's clamp
//	nodes.go         Nodes: every Node's capacity and allocatable, which
//	                 trust and Limits read; Quotas: the ResourceQuotas the
//	                 webhook never patches a pod past
//	pods.go          Pods: a slim store of which pods are bound where and
//	                 the workloads they count for, which trust checks each
//	                 report against
//	cluster.go       Cluster: what the rescheduler reads
//	tokenreview.go   TokenReviewer: auth.Authenticator by TokenReview,
//	                 cached, prechecked and rate-limited
//	accessreview.go  AccessReviewer: auth.Authorizer by SubjectAccessReview,
//	                 cached
//	audiences.go     TokenAudiences: the audiences of the aggregator's own
//	                 token, the default for the descheduler's
//	util.go          the checkpoints' write order (longest unwritten
//	                 first) and the node annotator's patch options
//
// Writes are budgeted because the API server is shared: at the default 20
// checkpoint writes a second, 50,000 workloads are each written every 42
// minutes; the histograms decay with half-lives of 12-18 hours, so a
// takeover loses at most that much of a day's evidence for a workload.
//
// Errors: a failed write is logged, counted and retried once MinAge has
// passed (the workload stays dirty); an object that does not decode is
// skipped at load, never fatal.
//
// It imports client-go, api/report, api/v1alpha1 and its compiler, the
// aggregator's state and profile, and the types of its auth; nothing of
// agent and no HTTP room (hack/checkimports/walls.go).
package kube
