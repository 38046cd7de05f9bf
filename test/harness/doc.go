// Package harness starts a real, throw-away Kubernetes test bed on this
// machine: etcd and kube-apiserver (optionally kube-controller-manager and
// kube-scheduler) on 127.0.0.1 with free ports, and, when asked, a real node
// (containerd, runc, CNI plugins and a kubelet with the cgroupfs driver).
//
// Everything a test bed starts or creates is recorded in state.json inside
// its directory before it is created, so Teardown can undo it from the same
// process (t.Cleanup, SIGINT/SIGTERM) or from another one (the testbed
// command's `down`). Processes are ended only by recorded PID, checked against
// their recorded start time, never by name.
//
// Error contract: Start* functions either return a running test bed or an
// error that wraps ErrStart, names the component and carries the tail of its
// log; on error nothing they started is left behind. Teardown tries every
// step, and returns every failure it met joined (wrapping ErrTeardown).
//
// It imports client-go and the test images, and nothing of cgpilot's
// production packages: the agent must be testable against it, not built
// from it.
package harness
