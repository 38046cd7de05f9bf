// Package v1alpha1 is cgpilot's cluster-facing API, group cgpilot.io,
// version v1alpha1: the RightsizePolicy custom resource (which pods the
// agent right-sizes, how, and when not to), the WorkloadRecommendation
// custom resource (the cluster aggregator's merged recommendation per
// workload, and its checkpoint), the usage profile the aggregator writes
// on Nodes, and the pod annotations that override a policy for one pod or
// carry the agent's recommendation.
//
// The Go types are the source of truth: `make generate` runs controller-gen
// (pinned in hack/tool.sh) to write zz_generated.deepcopy.go and the CRD in
// deploy/crds/, with the OpenAPI validation taken from the markers below.
// What a schema cannot check (a selector that matches nothing, a pod
// matched by two policies) the agent reports in the policy's status.
//
// It imports only the standard library and k8s.io/apimachinery, never
// client-go, k8s.io/api or other cgpilot packages (hack/checkimports/walls.go),
// so the agent, cgpilotctl and outside tools can all use it cheaply. What a
// policy means (defaults, validation beyond the schema, matching, what a
// pod's annotations may change, the clamp of every applied value) is its
// compiler's, the sub-package policy.
//
// +kubebuilder:object:generate=true
// +groupName=cgpilot.io
package v1alpha1
