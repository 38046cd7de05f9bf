// Package reschedule is what cgpilot adds to the upstream descheduler
// (sigs.k8s.io/descheduler) so that it moves pods off nodes that break
// the placement rule, and nothing more: the descheduler lists the pods,
// picks which to evict (its DefaultEvictor never picks DaemonSet, static,
// mirror, local-storage or bare pods) and evicts them through the Eviction
// API, which enforces PodDisruptionBudgets; the scheduler, with the
// aggregator's filter (package extender), places the replacements.
//
// The descheduler reads real utilization from a Prometheus-compatible
// source (LowNodeUtilization's metricsUtilization.source: Prometheus, the
// way its maintainers support real usage): Query serves the instant query
// cgpilot_reschedule_pressure, one value per node (label instance) in
// [0, 1], where 0.5 is "at the watermark". A queued node reads above 0.5;
// any other node reads its placement ratio (profile.Rule.Ratio) halved,
// capped at 0.5, except that a hot node not queued (outside Hours, say)
// reads 0.5; a node without a fresh load reads 0.5 (neither a source nor
// a destination: fail-open). The policy's thresholds are therefore
// fixed (targetThresholds 50, thresholds below it), whatever the
// watermarks.
//
// The queue (Rescheduler): a pass every QueueInterval (10 min) queues the
// nodes that break the rule (the sum of their pods' 7-day peaks above the
// watermark) or are hot (real use above the hot watermark), each with the
// excess to move, within Hours when set; an emergency queues a node at once,
// whatever the hour, when a report shows its real CPU use above the
// Emergency watermark. Every eviction the descheduler makes goes through
// Admit (a validating webhook on pods/eviction that only the descheduler's
// identity reaches), which refuses forbidden pods again, holds the caps
// (moves per node, per workload and in all per sliding hour) and takes
// the moved pod's share off its node's excess (its 7-day peak from a node
// over the rule, its latest use from a hot one): a node leaves the queue
// as soon as enough has been admitted, before its next report shows it. A
// pass every CheckInterval (1 min) follows each admitted move: evicted or
// not (a PodDisruptionBudget refused it: the amount goes back to the
// queue), and where the replacement landed. Report summarises the records
// per UTC day: moves, success rate, failures and denials by reason, and
// what is still unresolved.
//
// State is the leader's, in memory: a takeover starts with an empty queue
// (the next pass fills it) and without the records of the old leader.
//
// Files: reschedule.go holds Config and the Rescheduler (the queue pass,
// the emergencies seen in reports, each node's pressure); query.go the
// descheduler's query, the status API of the dashboard's card
// (PathStatus) and the answers when rescheduling is off; admission.go the
// eviction webhook (Admit: the pods never moved, the caps); records.go the
// move records, the check pass that follows them and the daily reports;
// hours.go Hours, the UTC hours in which the queue pass may queue nodes.
//
// It imports k8s.io/api types (admission, core), the aggregator's profile
// and api/report; no client-go (Cluster is implemented by package kube).
package reschedule
