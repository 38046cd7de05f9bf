// Package aggregator is cgpilot-aggregator, the cluster side of cgpilot:
// it takes every node agent's report (api/report), merges the usage
// histograms of each workload-container from all its nodes exactly into
// one recommendation, which agents fetch back and prefer to their own
// while it is fresh, and analyses the effect of right-sizing. Like agent,
// it only wires the packages that do the work:
//
//	aggregator/auth      who calls: a token becomes a node or a user, and what a
//	                     user may read (static tokens for load tests)
//	aggregator/trust     what of an authenticated node's report is believed
//	aggregator/ingest    the agent API: POST reports, GET recommendations
//	aggregator/state     the exact merge, replay guard, recommendations, checkpoints
//	aggregator/analysis  coverage, released capacity, saturation, history, anomalies
//	aggregator/profile   usage profiles (7-day max, peak hour) and hot nodes
//	aggregator/kube      the API server: TokenReview, SubjectAccessReview, the
//	                     pods bound to each node (for trust), WorkloadRecommendation
//	                     checkpoints, node annotations, the policy cache (fed to
//	                     the policy compiler, api/v1alpha1/policy, which the
//	                     agents share), LimitRanges and nodes' allocatable for
//	                     the webhook's clamp
//	aggregator/extender  the kube-scheduler extender: the 7-day-peak filter, the
//	                     dynamic-weight usage score
//	aggregator/webhook   the mutating admission webhook of Auto policies; every
//	                     value it writes passes the compiler's clamp
//	aggregator/reschedule what cgpilot adds to the upstream descheduler: its
//	                     utilization query, the eviction webhook's caps,
//	                     the queue, the move records and daily report
//	aggregator/web       the JSON API and the dashboard
//
// The package's own files: aggregator.go is the replica (Config and its
// defaults, the API clients and caches, the handlers on their two
// servers, the Lease and the leader's loops: merging, checkpoints, node
// annotations, the rescheduler, Events for pods admitted without the
// webhook); servers.go is what stands in front of the handlers (the
// serving certificate reloaded when its files change, a follower's proxy
// to the leader, the client certificates the webhook and extender paths
// require, and per-path gates on body size and concurrent requests);
// ca.go publishes the serving certificate's CA in the ConfigMap the agents
// mount; metrics.go exports the state, analysis and profiles as metrics
// computed at scrape time.
//
// # Replicas
//
// Two (or more) replicas elect a leader with a coordination.k8s.io Lease.
// The leader loads the WorkloadRecommendation checkpoints, then serves;
// a follower forwards every request that needs the state to the leader,
// whose pod IP it reads from the Lease's holder identity ("name@IP"), so
// one Service in front of all replicas works. A leader that loses the
// Lease returns ErrLostLease and its process restarts as a follower with
// an empty state: the new leader continues from the checkpoints.
//
// Servers: HTTPS (SecureAddr) for agents, the webhooks (admission and
// eviction) and the extender, with a certificate re-read when its files
// change; HTTP (HTTPAddr) for the dashboard, the JSON API, the
// descheduler's query, /metrics, /healthz and /readyz.
//
// It never imports agent: agents and the aggregator meet in api/report.
package aggregator
