// Package deploy renders the manifests of deploy/ as users apply them and
// tests them: the kustomize base (with any of its components) in process,
// with the kustomize library kubectl 1.36 embeds (sigs.k8s.io/kustomize/api
// v0.21.1), and the Helm chart with the pinned helm binary of hack/tool.sh.
// It decodes renders into unstructured objects and normalises them, so that
// the two renders can be compared object by object, and applies them to a
// real API server. `make demo` deploys the agent from Kustomize's render.
//
// Its tests prove the manifests' contract with the agent (flags, mounts,
// least-privilege RBAC) and, with the aggregator, what the agents report
// with (URL, projected token, only the CA of its Secret) and that nothing
// else of the agent changes; that the chart renders exactly the kustomize
// objects for each layout, that both pass server-side dry-run on the test
// bed's kube-apiserver, and that the admission policy confines the agent's
// own token to its node (TestAgentIdentityConfinedToItsNode).
//
// Error contract: errors wrap ErrRender and name the directory, the
// command or the document that failed.
//
// It imports no cgpilot package except, in its tests, test/tier, the
// aggregator's constants (aggregator/auth, aggregator/webhook) and
// test/harness in its e2e tests; it never imports agent.
//
// # Files
//
// render.go renders (Kustomize in memory, KustomizeDir on disk, Helm with
// the pinned binary that Tool builds), decodes and finds objects, and names
// the components, the namespace and the Kubernetes version given to Helm.
// normalize.go removes what only the rendering tool changes and compares
// two renders (Normalize, Diff). apply.go server-side-applies objects to an
// API server, waiting for each CRD to be established. contract.go holds the
// flags the manifests pass to the aggregator (the rescheduling component's
// too) and those the aggregator component adds to the agent, which the two
// commands' tests parse. testbed.go is TestBed, the test bed's changes to
// the agent's manifests as a kustomize overlay, Helm values and notes;
// testbed_aggregator.go is AggregatorBed, the same for the aggregator
// component (host network, a serving certificate made by the caller, no
// cert-manager).
package deploy
