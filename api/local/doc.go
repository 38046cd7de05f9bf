// Package local is cgpilot's node-local protocol: the pod and Node
// annotations users and the agent exchange (cgpilot.io/*), and the JSON
// views of the agent's local API on its unix socket, with a small client
// for that socket. It is what `cgpilotctl` and tests speak to a running
// agent, so it is small and imports no client-go: cgpilotctl links none
// of it.
//
// Annotations (annotations.go): ParseAnnotations validates a pod's
// cgpilot.io/* request strictly (bounded CPU lists through
// internal/cpulist); Status and NodeSummary are the JSON the agent writes
// back. Views (views.go): one struct per local API path, and the reasons
// and Event reasons the agent reports. Right-sizing (rightsize.go): the
// cgpilot.io/recommendation annotation's JSON, the views of the recs and
// aggregator paths (the history path streams CSV), and FormatCPU and
// FormatMemory, the quantities the agent writes in that annotation, its
// pods/resize patches and its Events. Client (client.go): GET over the
// socket with timeouts and a bounded body, asking again while the agent
// answers that it is starting.
//
// Errors: every annotation error is an *AnnotationError wrapping exactly one
// of the specific sentinels, each of which wraps ErrInvalidAnnotation; the
// client's errors say which socket and whether the agent answered.
//
// It imports the standard library, k8s.io/utils/cpuset, internal/cpulist
// and internal/millicpu (FormatCPU's rounding) only: no client-go, and no
// other cgpilot package.
package local
