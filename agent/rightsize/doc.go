// Package rightsize decides the requests and limits of a node's containers
// from their own usage: the in-place VPA loop of cgpilot, without a central
// recommender.
//
//   - engine.go: the usage histograms (package recommend, one Recommender
//     per preset, fed every collection round), read at most once per
//     decision step per workload container with a policy's overrides, and
//     checkpointed.
//   - policy.go: what a RightsizePolicy and a pod's cgpilot.io annotations
//     ask: the names of the policy compiler (api/v1alpha1/policy), which
//     the agent, the aggregator and its webhook share.
//   - decide.go: the decision for one pod: mode, pause and avoid windows,
//     history, then per container the new requests and limits under the
//     safety rules — never a change of QoS class, never memory below
//     usage × (1 + margin), a bounded change per step, a tolerance band
//     against flapping, CPU left alone on exclusive cores — and why.
//   - oom.go: the memory limit an OOM-killed container gets at once.
//
// It writes nothing: package agent applies a Decision through pods/resize
// or package cgroup, and reports it (annotation, Events, metrics).
//
// Errors: bad policy fields and pod annotations give errors wrapping
// ErrInvalidPolicy or ErrInvalidAnnotation, naming the field and value; a
// pod whose input is invalid is reported, never changed.
//
// It imports recommend, agent/collector (its Sink), the policy compiler
// api/v1alpha1/policy and the standard library; no client-go, no k8s.io/api
// and no k8s.io package of its own: what Kubernetes means reaches it only
// through the compiler (hack/checkimports/walls.go, tests included).
package rightsize
