// Package rightsize decides the requests and limits of a node's containers
// from their own usage: the in-place VPA loop of cgpilot, without a central
// recommender.
//
//   - engine.go: the usage histograms (package recommend, one Recommender
//     per preset, fed every collection round), read at most once per
//     decision step per workload container with a policy's overrides, and
//     checkpointed; the kills it records for the histograms
//     (RecordOOM) are a recommender's, the OOM path's counts are in
//     bumps.go.
//   - policy.go: what a RightsizePolicy and a pod's cgpilot.io annotations
//     ask: the names of the policy compiler (api/v1alpha1/policy), which
//     the agent, the aggregator and its webhook share.
//   - decide.go: the decision for one pod: the policy, what the pod's
//     annotations may change under it (Policy.ForPod: only narrow it),
//     mode, pause, avoid windows and history, then per container the new
//     requests and limits under the safety rules — never a change of QoS
//     class, never memory below usage × (1 + margin), a bounded change per
//     step, a tolerance band against flapping, CPU left alone on exclusive
//     cores, one resize a step whatever brings the decision forward — and
//     the one clamp last (bound: apipolicy.Clamp with the policy's bounds,
//     the namespace's LimitRange and the node's allocatable), and why.
//   - oom.go: the memory limit an OOM-killed container gets at once: at
//     most maxOOMBumpsPerDay a day, below a limit pods/resize refused,
//     through the same clamp, from an input of its own (OOMInput: the
//     pod's specs and bounds, not a decision's Pod); it uses decide.go's
//     bound and roundMemory, the one clamp and rounding.
//   - bumps.go: what the OOM path counts per container within OOMWindow:
//     its kills (Engine.Kills, the next bump's exponent) and its bumps
//     (Engine.Bumps, for maxOOMBumpsPerDay), the bumps kept in the
//     checkpoint directory so that a restart grants no extra raise.
//
// It writes nothing: agent/rightsize/runner applies a Decision through
// pods/resize or package cgroup, and reports it (annotation, Events,
// metrics).
//
// Errors: a pod annotation its policy does not allow is refused
// (Decision.Refused, for a Warning Event) and the policy's value applies;
// a policy the recommender refuses gives StateInvalid and no change.
//
// It imports recommend, agent/collector (its Sink), the policy compiler
// api/v1alpha1/policy, internal/millicpu (whole millicores) and the
// standard library; no client-go, no k8s.io/api
// and no k8s.io package of its own: what Kubernetes means reaches it only
// through the compiler (hack/checkimports/walls.go, tests included).
package rightsize
