// Package harness starts a real, throw-away Kubernetes test bed on this
// machine: etcd and kube-apiserver (optionally kube-controller-manager and
// kube-scheduler) on 127.0.0.1 with free ports, and, when asked, a real node
// (containerd 2, runc, CNI plugins and a kubelet with the cgroupfs driver).
// The container runtime is the one test/runtimebins builds from the Go
// module proxy (NodeOptions.RuntimeBinDir, $CGPILOT_RUNTIME_BINS), never the
// host's.
//
// Everything a test bed starts or creates is recorded in state.json inside
// its directory before it is created, so Teardown can undo it from the same
// process (t.Cleanup, SIGINT/SIGTERM) or from another one (the testbed
// command's `down`). Processes are ended by recorded PID, checked against
// their recorded start time, never by name alone: the only others a
// teardown ends are the node's stray shims and processes whose command
// line holds the test bed's own socket or directory, and what still runs
// in the kubepods cgroups the node created.
//
// A node changes host state a kubelet always changes: kubepods cgroups in
// every hierarchy, /var/lib/kubelet/device-plugins, /run/containerd/s (the
// shim sockets), /var/lib/cni, /var/log/containers and six kernel sysctls
// (plus ip_forward from the ptp plugin); and it puts its node IP
// (DefaultNodeIP, a TEST-NET-2 address) on the loopback device, because the
// kubelet refuses a 127/8 node IP and the API server must reach the kubelet
// for logs and exec. StartNode records what existed before, refuses to
// start when kubepods exists, and holds NodeLockFile; teardown removes only
// what is new and puts the sysctls back.
//
// Beyond a plain cluster, a test can stop and restart the API server
// (StopAPIServer, StartAPIServer), force 410 Gone on watches
// (Options.DisableWatchCache with CompactEtcd), add kubelet-less Nodes
// (CreateFakeNode), pass extra flags and feature gates (Options.ExtraFlags,
// Options.FeatureGates, NodeOptions.FeatureGates), and run the kubelet's
// static CPU manager (NodeOptions.StaticCPUManager, RestartKubelet). It drains
// the node through the API first, deleting the controllers that own its
// pods (a DaemonSet would re-create them) and then the pods. If a test
// process dies without teardown (a go test -timeout panic, SIGKILL), its
// children die with it but shims and host state stay: the next StartNode
// names the directory, and `go run ./test/cmd/testbed down --dir DIR`
// cleans it from the recorded state.
//
// Error contract: Start* functions either return a running test bed or an
// error that wraps ErrStart, names the component and carries the tail of its
// log; on error nothing they started is left behind. Teardown tries every
// step, and returns every failure it met joined (wrapping ErrTeardown).
//
// It imports client-go and the test images, and nothing of cgpilot's
// production packages: the agent must be testable against it, not built
// from it.
//
// # Files
//
// Every file builds only on Linux. controlplane.go starts etcd,
// kube-apiserver and the controllers, stops and restarts the API server,
// writes the admin kubeconfig and picks the free ports. etcd.go reads
// etcd's revision and compacts its history through its JSON gateway.
// fakenode.go creates kubelet-less Nodes and keeps them alive. pki.go is
// the test bed's CA, the certificates it signs and the service-account
// signing key. node_linux.go starts a real node (the node lock,
// containerd's and the kubelet's configuration, the images, Ready),
// restarts its kubelet, and undoes it in teardownNode. drain_linux.go
// deletes the controllers that own the node's pods before they are drained.
// host_linux.go records and restores the host state a node changes: host
// paths, mounts, kubepods cgroups, sysctls, veths, the node IP on the
// loopback device. proc_linux.go starts, identifies and stops processes by
// their records, finds a node's stray ones by their command line, and reads
// log tails. state.go is state.json, the
// record a teardown works from, and the errors ErrStart and ErrTeardown.
// teardown.go undoes a recorded test bed (Teardown); signals.go tears down
// this process's test beds on SIGINT or SIGTERM. testing_linux.go holds the
// helpers for tests (MustStart, MustStartNode, Node.Stop).
package harness
