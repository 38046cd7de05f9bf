// Package e2e holds the end-to-end tests of the test bed itself and, later,
// of cgpilot against a real Kubernetes: a real kube-apiserver (tier.E2E,
// make test-e2e) and a real kubelet + containerd node (tier.Node, root).
// Every test starts its own test bed through package harness and proves
// it leaves nothing behind.
//
// It has no non-test code.
package e2e
