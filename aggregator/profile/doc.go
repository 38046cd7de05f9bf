// Package profile keeps usage profiles of nodes and workloads for
// placement: per series the 7-day maximum and the expected peak-hour
// usage (for each hour of the day, the mean usage in that hour averaged
// over the last 7 days; the value at the busiest hour), the nodes' latest
// real usage and the hot nodes whose usage exceeds a watermark of their
// allocatable, and each workload's latest usage per pod (what the
// scheduler extender expects a new pod to use).
//
// Placement (Load, Rule): each workload's 7-day peak per pod (per window
// the highest usage per pod on any one node; per day its maximum), and per
// node the sum of those peaks over the pods its latest report ran,
// recomputed every LoadInterval into a snapshot read without a lock. Rule
// keeps that sum under a fraction of allocatable: the extender's filter
// and the rescheduler both ask it.
//
// A node's series is its reported usage per window; a workload's is the
// sum over the nodes that reported it in a window, closed Grace after the
// window ends. Each series costs a fixed 0.8 KiB (Ring: per day and hour
// a bfloat16 mean, per day a maximum), so memory grows with the number of
// nodes and workloads only.
//
// Files: profile.go holds the Ring and Profiles (what each report adds,
// the windows closed into the workloads' series, the node and workload
// views, the hot nodes); load.go the placement side (the per-pod peaks,
// the nodes' Load snapshot, Rule) and the one hot-node comparison that
// the profiles and the rescheduler share.
//
// It imports api/report only: no client-go (the aggregator writes the
// profiles as node annotations), nothing of agent.
package profile
