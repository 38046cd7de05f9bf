// Command cgpilotctl is the node-local debug CLI of cgpilot.
//
// Offline commands (topology, alloc, replay) call the libraries directly;
// online ones talk to the agent's local API.
//
// # Files
//
// main.go holds the command registry, the dispatch and the usage text;
// every other file registers its commands from init. topology.go (Linux)
// discovers a machine's or a captured tree's topology and prints it, and
// holds the --root, --path.sysfs and --path.procfs flags that alloc.go
// (Linux) shares: alloc picks or validates exclusive CPUs with
// topology.Allocate and always answers failures as JSON. replay.go
// replays a usage trace through a recommender policy against the upstream
// VPA control and prints or writes the scores and recommendations;
// sweep.go is its --sweep, the frontier sweep of policies and hindsight
// bounds written as CSV and SVG, and the gap-closure table. pods.go holds
// the online commands' flags, the one GET of a view of the local API and
// the table layout, and the pods view; events.go, explain.go, pools.go,
// recs.go and report.go each register and print one more view.
// history.go exports the node's usage history from the agent as a trace
// for replay, gzip-compressed when the file name ends in .gz.
package main
