// Package history keeps a node's own usage history on disk, bounded, in the
// trace format that `cgpilotctl replay` reads, so a platform team can try a
// policy on its own node's history before turning it on.
//
// Every collection round is folded into 5-minute windows per container
// instance: the window's mean CPU (cpu_cores), its memory working-set peak
// (mem_bytes) and its CPU peak (cpu_cores_max). At each window's end one
// row per instance is appended to the day's file
// (history-YYYYMMDD.csv under the directory), in one write, so a crash
// loses at most the window in progress and a torn last line is skipped on
// read. The series is the workload container (namespace/kind/name/
// container): the pods of one workload are several rows at one time, as
// the recommender counts them.
//
// Bounds: files older than the retention (default 14 days) are removed,
// and when the directory grows past its size cap the oldest days go first;
// if today's file alone reaches the cap, rows are dropped and counted
// rather than filling the disk.
//
// One file, history.go, holds it all: the Store (Open, Round, Flush), the
// day files and their pruning, and Export, the trace CSV the agent's
// local API streams to `cgpilotctl history`.
//
// It imports agent/collector (its Sink) and the standard library only.
package history
