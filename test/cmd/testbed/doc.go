// Command testbed starts, shows and stops the local test bed of `make
// demo` bare, without the agent (test/cmd/demo deploys the agent on one;
// `make demo-down` removes either):
//
//	go run ./test/cmd/testbed up [--node] [--dir DIR] [--bins DIR] [--runtime-bins DIR]
//	go run ./test/cmd/testbed status [--dir DIR]
//	go run ./test/cmd/testbed down [--dir DIR]
//
// up starts etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler (and with --node containerd + a kubelet, as root) in DIR
// ($CGPILOT_DEMO_DIR, default /tmp/cgpilot-demo), writes DIR/kubeconfig and
// leaves them running; status lists the recorded processes, whether each
// runs, and the node's readiness; down stops them by their recorded PIDs
// and removes everything they created (or only the stale node lock a
// crashed run left). The Kubernetes binaries come from --bins,
// $CGPILOT_K8S_BINS, or test/k8sbins/build.sh --check; the node's container
// runtime (containerd 2 and runc) from --runtime-bins,
// $CGPILOT_RUNTIME_BINS, or test/runtimebins/build.sh --check.
//
// Errors go to stderr with exit status 1; a failed up tears down what it
// started. It imports only package harness of cgpilot.
//
// main.go, built only on Linux, is all of it: the subcommands and their
// flags, finding the binaries, and the calls into package harness.
package main
