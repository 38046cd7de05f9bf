// Package state is the aggregator's merged state: it applies decoded,
// authenticated reports (report.Decoded) and keeps, per
// workload-container, the merged histograms (in one recommend.Recommender
// per preset), what the latest reports said of it and its merged
// recommendation; per node, the replay guard and the keys it reported.
//
// # The exact merge
//
// Reports of one grid window are summed per workload-container as they
// arrive (recommend.Counts, whole numbers: exact in any order). Fold
// merges every window Grace after its end, oldest first, with one
// Recommender.AddCounts per workload-container and window, in sorted key
// order; the result is bit for bit what one recorder of all the samples
// would hold (TestStoreMergeIsExact). A report for a window already merged
// ("late": its agent buffered it while the aggregator was away) is merged
// on arrival with its window's own weight; only the order of float
// additions then differs from the in-order merge. OOM kills are recorded
// as they arrive, as on the agents.
//
// Recommendations are recomputed at most once per step (the policy's,
// or Config.Step): with hysteresis each computation is a decision, as on
// the agents. FreshUntil tells agents how long to prefer it.
//
// Checkpoints: Dirty, Export, MarkDirty, Restore and Expire give package
// kube's Checkpointer what it writes to and reads from the API server,
// one workload at a time (a workload's containers share a shard).
//
// Files: state.go holds the Store (Apply with its replay guard, the
// windows awaiting reports, Fold's exact merge, the recommendations
// recomputed per step, and what it answers of containers, nodes and
// itself: Recommendation, ForNode, Node, Nodes, Entries, Stats);
// checkpoint.go a workload's checkpoint (WorkloadState) and the calls
// above that export, restore and expire it.
//
// Errors: Apply refuses replays (ErrReplayed) and reports off the grid
// (ErrWindow) and then changes nothing.
//
// It imports api/report and recommend; no client-go, no Prometheus (the
// wiring turns Stats into metrics), nothing of agent.
package state
