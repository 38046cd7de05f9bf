// Package kube is the agent's way to the API server: the few calls it
// makes, and nothing else. It lists and watches the pods of its node,
// patches them (annotations, pods/resize), reads and patches its Node,
// lists and watches LimitRanges, records Events, reads the owners of
// ReplicaSets and Jobs and the labels of namespaces as metadata only, asks
// discovery about two group versions, and hands out the dynamic client for
// the RightsizePolicy CRD.
//
// kube.go holds those calls: Interface, the agent's one view of the API
// server, and Client, which implements it over client-go's REST, metadata
// and dynamic clients with the core/v1-only Scheme. handlers.go holds
// GuardHandlers, which runs each informer event handler under a
// loop.Guard so that a panic does not end the process, and two constants
// of the agent's writes: its field manager and the deadline of one patch.
//
// Why not client-go's clientset: kubernetes.Clientset and its scheme link
// the typed clients, apply configurations and protobuf code of every API
// group (about 55 packages of k8s.io/api), which tripled the agent's
// binary and added tens of MiB to the memory of a process that runs on
// every node. This package builds on client-go's REST, metadata and
// dynamic clients with a scheme that knows core/v1 alone.
//
// Its core/v1 client asks for protobuf (JSON as a fallback), as the
// kubelet does: each pod event of the node is decoded on the way to a
// cgroup write, in 8 µs instead of JSON's 53 µs (BenchmarkPodDecode).
// Discovery is read raw and asks for JSON; the metadata and dynamic
// clients speak JSON (the CRD has no protobuf).
//
// It must not import k8s.io/client-go/kubernetes (or anything that does:
// the shared informer factories, discovery, the dynamic and metadata
// informer factories); hack/checkimports/walls.go enforces it for this
// package and the agent's binary. Tests that fake the API server use
// kube/kubetest, which adapts a clientset (and only tests may import it).
package kube
