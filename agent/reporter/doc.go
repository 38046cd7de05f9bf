// Package reporter is the agent's side of the cluster aggregator: what
// the agent tells it, and what it takes back.
//
// Every sampling round feeds a report.Builder (each workload container's
// samples, the node's usage from procfs); each decision describes the
// pod's containers (requests, policy, the local recommendation, whether
// they can be adjusted); OOM kills and adjustments are recorded as they
// happen. When a window of the report grid ends, its report goes to the
// report.Client, which keeps it (bounded, merging the oldest) until the
// aggregator accepts it. After each window the reporter fetches the merged
// recommendations of the node's workload containers, which right-sizing
// prefers while they are fresh (report.Prefer; rightsize.Container.Merged);
// with the aggregator away the node decides on its own, and nothing waits
// for the aggregator.
//
// # Files
//
// reporter.go: Options and New, the Round sink, Describe, OOMKilled,
// Adjusted, Forget, the window loop (Run), the merged fetch (MergedFor),
// the local API's view (View) and the client's metrics.
//
// # Imports
//
// api/report (the wire format and its client), agent/rightsize and
// agent/collector (the decisions and samples it describes), procfs and
// Prometheus; no k8s.io package, nothing else of the agent
// (hack/checkimports/walls.go). Package agent and agent/rightsize/runner
// import it. It builds on Linux only (procfs).
package reporter
