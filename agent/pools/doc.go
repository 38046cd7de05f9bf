// Package pools runs a node's exclusive and shared CPU pools: which pod
// holds which cores, the checkpoint that makes that survive restarts, and
// the cgroup writes that make every pod run where it should. It is the
// kubelet CPU manager's split, in one package with one door:
//
//   - state.go: what is assigned (Reader; the writer half is unexported)
//     and checkpoint.go, its file (versioned, checksummed, atomic through
//     internal/atomicfile), written on every change of ownership before
//     the change reaches a cgroup (a change of ReleaseIsolation alone
//     waits for Manager.Flush, off the path to the cgroups);
//   - policy.go: the decision, a pure function of the state that asks
//     package topology for the cores, so the cap, the sellable rule and
//     explicit-set validation live there only (cgpilotctl alloc decides
//     the same);
//   - pools.go: Manager.Sync, Forget and Sweep turn decisions into leveled
//     writes through the Cgroups interface (cgroup.Kubepods in production;
//     the synced pod and a sweep's pods are read before they are written,
//     the other pods of a pool-wide refresh are written from the record
//     the cgroup watch keeps, see cgroup.Kubepods.ApplyPod);
//     Agrees tells the cgroup watch whether a write it saw left the value
//     the pools want (else the pod is synced: drift is set back at once,
//     and Sweep is only the slow safety net);
//   - restore.go: the state after a start, trusting only what the agent
//     wrote and can check;
//   - cgroups.go: the Cgroups interface, what the pools need of the
//     kubepods tree, so that the planning is tested on a recording fake;
//   - pod.go: the Manager's input and output, Pod and the Result of a
//     Sync, Forget or Sweep (its status, Events, writes and failures).
//
// The controller (package agent) changes pool state only through Manager's
// exported methods. Pods come in as Pod values the controller extracts
// from the API objects, so this package knows no Kubernetes types.
//
// # Error contract
//
// Refusals (a well-formed request that cannot be granted) wrap ErrRefused
// and map to a wire reason with Reason; a failed write wraps ErrCgroupWrite
// (the cgroup package's error, naming file, value and errno, stays in the
// chain); checkpoint problems wrap ErrCheckpointNotFound, ErrCheckpointCorrupt,
// ErrCheckpointVersion or ErrCheckpointWrite. A refused or failed change
// changes nothing: no other pod's cgroup, no allocation, no checkpoint byte.
//
// # Imports
//
// cgroup, topology, api/local and internal/*; no client-go, no k8s.io
// package except k8s.io/utils/cpuset, tests included. Only package agent
// imports it (and tests: cgpilotctl's, that alloc agrees with the pools,
// and test/*) (hack/checkimports/walls.go).
package pools
