// Package analysis computes the effect of right-sizing from the agents'
// reports: coverage (workloads and containers under a policy, adjustable
// or not and why), requests before (as the workloads declared them) and
// after (in force) and the capacity released per namespace and for the
// cluster, saturation (usage / requests in force) over time, the history
// of adjustments and OOM kills, and anomalies: failed writes, containers
// matched by several policies, nodes not reporting, sampling gaps, pods
// under an Auto policy that the webhook did not see.
//
// Each node's latest report stands for the node, so sums need no window
// bookkeeping and a silent node drops out after StaleAfter; each
// workload-container's latest description stands for it. Histories and
// series are bounded rings. The aggregator serves the results as JSON,
// Prometheus metrics and the dashboard.
//
// One file, analysis.go, holds it all: what Observe keeps of each report,
// what Tick samples and forgets, and the queries over them.
//
// It imports api/report only.
package analysis
