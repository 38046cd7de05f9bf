// Package demo is `make demo`: the whole agent on the test bed's
// single-node cluster (harness: etcd, kube-apiserver, controllers,
// containerd and a kubelet), shown step by step, each step a function of
// its own that prints "step i/N" and its time:
//
//  1. checkHost: root, 2 CPUs, no demo running; the agent image,
//     cgpilotctl and the aggregator image start building (test/images,
//     cached by the hash of their inputs) while
//  2. startCluster starts the test bed;
//  3. images imports the agent and aggregator images into the node's
//     containerd (no registry);
//  4. deployAgent writes a kustomize overlay of deploy/kustomize and its
//     aggregator component with the test bed's few changes
//     (test/deploy.TestBed and AggregatorBed, each printed with its
//     reason; a serving certificate the demo makes, no cert-manager) and
//     runs `kubectl apply -k` on it: the DaemonSet controller and the
//     scheduler place the agent, under the admission policy, and the
//     aggregator;
//  5. startWorkloads creates an exclusive-core pod, busy shared pods, and
//     (kubectl apply -f) a web-like Deployment that asks for far more than
//     it uses under an InPlace RightsizePolicy with short windows, and a
//     memory hog under a second InPlace policy;
//  6. showPools: the exclusive pod pinned, shown through cgpilotctl
//     (pools, pods, explain) beside the cgroup files themselves;
//  7. release, 8. restore, 9. deleteExclusive, 10. recreateExclusive:
//     four changes timed from the API call to the cgroup files:
//     release-isolation on and off, the exclusive pod deleted (the shared
//     pods widen) and created again;
//  11. showResize: the web pod's requests lowered in place (pods/resize,
//     no restart), cgpilotctl recs and explain beside cpu.shares,
//     cpu.cfs_quota_us and memory.limit_in_bytes (their v2 names on v2);
//  12. showOOM: the memory hog's limit raised at its OOM kills, no restart
//     loop, through kubectl logs and cgpilotctl explain;
//  13. checkEvents: no Warning Event in any namespace besides the expected
//     ones (expectedWarnings: the kubelet's cgroup v1 notice, on a v1 host
//     only, and the hog's OOM kills), else the demo fails naming each;
//  14. showAggregator: the agent's reports taken by the aggregator
//     (TokenReview of its projected token), cgpilotctl report;
//  15. showDashboard: the dashboard as a user reaches it: the JSON API and
//     /metrics refuse a request without a token (401); a ServiceAccount
//     bound to cgpilot-dashboard-viewer and its token read the summary;
//     the page drawn in headless Chromium and its screenshot saved
//     (aggregator.go; the API server presents its client certificate to
//     the webhook, as kubeadm's can).
//
// On a cgroup v2 node (make demo-v2: TestDemoUpAndDown inside the v2 VM
// of test/v2node) the same steps run with what differs there: the overlay
// adds the cgroup-v2 component (one read-write kubepods mount), the files
// read are their v2 names, an OOM kills the hog's whole container
// (memory.oom.group), so it restarts and the kills are counted in the
// pod's memory.events, and the VM passes Options.Prebuilt (no Go
// toolchain to build the images), Slow (TCG: every wait x4, the files
// polled every 10 ms, the busy pods and the web client mostly asleep, so
// that they leave the emulated CPUs to the node) and NoBrowser (no
// Chromium: the screenshot is skipped, the JSON API still checked). A step
// that fails after the agent's deploy prints the agent's log.
//
// The cluster stays up; Down deletes the agent DaemonSet (so nothing
// re-creates its pod) and runs harness.Teardown. Up returns a Result with
// every observation, so the node-tier test in test/e2e asserts the same
// state the demo prints.
//
// Error contract: errors wrap ErrDemo and name the step, the object or file
// and, for a failed agent, the tail of its container log. A failed Up tears
// down everything it started. It imports harness, images, deploy, cgroup
// (to resolve cgroup directories), aggtest (the aggregator's certificate
// and the API server's webhook client configuration) and the API packages
// (the policy and annotation types), and never the agent package: it sees
// the agent only through the API server, the cgroup files and cgpilotctl.
//
// # Files
//
// Every file builds only on Linux. demo.go is Up and its list of steps,
// the host check, the cluster's start, the images (WriteImages for the v2
// VM), the agent's deploy and the closing summary, Down, and
// WaitAgentReady. pools.go is the CPU pool steps: the exclusive and
// shared pods, the four changes and the watcher that polls their cgroup
// files. rightsize.go is the right-sizing steps: the two policies, the
// web Deployment and the memory hog, the in-place resize and the OOM bump.
// cgroups.go reads the demo containers' cgroup files straight from the
// host (cpusets and quotas, shares, memory limits, OOM kills).
// events.go is the Warning Event check and its expected warnings per
// cgroup mode and under emulation. aggregator.go is the aggregator and
// dashboard steps. util.go holds the helpers the steps share: cgpilotctl
// and kubectl runs, the agent's log tail and metrics, polling with the
// time scale, a free port, a file copy.
package demo
