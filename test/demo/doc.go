// Package demo is `make demo`: on the test bed's single-node cluster
// (harness: etcd, kube-apiserver, controllers, containerd and a kubelet) it
// deploys the agent from the kustomize base of deploy/ (rendered in process
// by test/deploy: RBAC, the CRD, the admission policy and the real
// DaemonSet, with the few test-bed changes localize makes and prints) from
// a locally built image, cached by the hash of its inputs (test/images),
// starts an exclusive-core pod and busy shared pods, and prints what
// cgpilotctl reports beside the values read from the cgroup files
// themselves, then times four changes from the API call to the cgroup
// files: release-isolation on and off, the exclusive pod deleted (shared
// pods widen) and created again. The cluster stays up; Down deletes the
// agent DaemonSet (so nothing re-creates its pod) and runs harness.Teardown.
//
// Up returns a Result with every observation, so the node-tier test in
// test/e2e asserts the same state the demo prints.
//
// Until the agent has every flag the manifests pass (--path.interrupts,
// --kubelet-pod-resources, issue 11), localize drops the ones the built
// agent's -h does not list, and says so.
//
// Error contract: errors wrap ErrDemo and name the step, the object or file
// and, for a failed agent, the tail of its container log. A failed Up tears
// down everything it started. It imports harness, images, deploy and cgroup
// (to resolve cgroup directories) and never the agent package: it sees the
// agent only through the API server, the cgroup files and cgpilotctl.
package demo
