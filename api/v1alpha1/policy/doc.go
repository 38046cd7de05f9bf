// Package policy is the one compiler of the RightsizePolicy API: what a
// policy means, for the agent on every node, the cluster aggregator and
// its admission webhook alike. Before it, the agent and the aggregator
// each compiled policies and disagreed (CPU bounds, minHistory's
// default, a namespace not cached yet), so the webhook and the agent could
// pick different policies, or different bounds, for the same pod.
//
//   - policy.go: Policy, a RightsizePolicy in cores, bytes and durations,
//     its defaults (those of the CRD, for objects that did not come
//     through the API server) and Check, what the schema cannot check
//     (the preset exists, the overrides fit it, bounds finite and ordered).
//   - compile.go: Decode (an informer's object) and Compile.
//   - quantity.go: the one conversion between quantities and cores or
//     bytes, both ways, exact in whole millicores and bytes and saturating
//     at MaxCPU and MaxMemory instead of wrapping (CPUCores, MemoryBytes,
//     Bytes, CPUQuantity, MemoryQuantity, ValuesOf); whole millicores are
//     internal/millicpu's rounding, shared with api/local's strings.
//   - qos.go: QoSClass, the one Kubernetes QoS rule (agent/podspec reads
//     a pod's class by it, right-sizing's QoS guard by QoSOf).
//   - index.go: Index, the cluster's policies compiled once per change,
//     and Match, which of them select a pod; a namespace not cached yet is
//     matched by its name label alone, and a selector that reads any other
//     of its labels is undecided, never guessed. The sub-package feed
//     is the one informer handler that keeps an Index in step (the
//     agent's and the aggregator's); it holds what needs client-go.
//   - pod.go: what a pod's own annotations may do under its policy
//     (ForPod): only narrow it. A mode at most as strong as the policy's,
//     and only where allowPodModeOverride lets pods choose; a target
//     saturation within podTargetSaturation; a pause. A refused value
//     gives the policy's and a Refusal for a Warning Event.
//   - clamp.go: Clamp, the one function every CPU and memory value passes
//     before it reaches a pod (the agent's resizes, its OOM bumps, the
//     webhook's admission): finite, at least the usage floor, within the
//     policy's bounds, the namespace's LimitRange (limitrange.go reads the
//     API objects into plain values) and the node's allocatable, with
//     each bound that moved a value recorded as a Binding.
//
// # Where it lives, and what it imports
//
// It sits under api/v1alpha1 because it gives that API its meaning, and
// it is its own package because it needs more than the API types may
// import: recommend (a policy's overrides are the recommender's, and only
// the recommender knows which fit a preset), k8s.io/apimachinery (label
// selectors, quantities, the unstructured objects of informers) and
// robfig/cron (avoid windows), and internal/millicpu (whole millicores).
// It must not import client-go, k8s.io/api or any other cgpilot package
// (hack/checkimports, tests included), so
// that the agent's right-sizing, the aggregator's rooms and the webhook
// can all import it: LimitRanges and nodes reach it as plain values or
// through generic maps of quantities (AddLimitRangeItem, ValuesOf take a
// corev1.ResourceList as it is), never as k8s.io/api types.
//
// # Errors
//
// Compile and Check return errors wrapping ErrInvalidPolicy that name the
// policy and the field; ParsePodOverride returns ErrInvalidAnnotation
// naming the annotation and value. Clamp and ForPod never fail: whatever
// their input (NaN, infinities, negative or absurd values), their output
// is finite and bounded, and what they refused or moved is in their
// result.
package policy
