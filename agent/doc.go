// Package agent is the cgpilot node agent: it watches its node's pods,
// runs the CPU pools' controller and wires the libraries, right-sizing
// (agent/rightsize/runner) and reporting (agent/reporter) to Kubernetes;
// every decision and every cgroup write happens in the packages it wires.
//
// # From a pod to a cgroup write
//
// One exclusive-core annotation travels through six files:
//
//	agent/informer.go        the pod informer (spec.nodeName field selector)
//	                         and the cgroup watcher's events become workqueue
//	                         keys: the single hand-off
//	agent/reconcile.go       a worker pops the key, turns the pod into a
//	                         pools.Pod (pod.go) and calls Manager.Sync
//	agent/pools/pools.go     the pools decide (policy.go asks package
//	                         topology for the cores, state.go records and
//	                         checkpoints them) and plan every pod's cpuset
//	cgroup/kubepods.go       the pod's placement becomes leveled plans
//	cgroup/writer.go         safety checks, then the writes in a safe order
//	cgroup/file.go           the confined open and write of cpuset.cpus
//
// Afterwards reconcile.go reports: metrics, Events, and the status
// annotations, patched by a second worker off the write path, so an API
// round trip never delays the next cgroup write. A failed write becomes a
// status annotation, an Event and a requeue; a pod whose cgroups are only
// half created (one hierarchy at a time) is synced again shortly, with no
// Warning.
//
// # From an OOM kill to a raised limit
//
// One OOM kill seen by the eBPF backend, followed call by call up to the
// write of the raised memory limit (the recording, the Events and the
// durable raise through pods/resize come after it), enters 26 files,
// listed in the order first entered; the kill's one hand-off is
// oomwatch's channel:
//
//	agent/oomwatch/bpf_linux.go        bpfBackend.run: the ring buffer's record
//	agent/oomwatch/watcher_linux.go    Monotonic, wallAt, match (the inode's
//	                                   watched directory), emit: the channel
//	internal/loop/loop.go              Guard.Do around the record, Guard.Run
//	                                   around the consumer
//	agent/rightsize/runner/oom.go      oomLoop, onOOM: the directory's
//	                                   container; oomInput, memoryUseLocked,
//	                                   sameOOM, then bumpCgroups
//	agent/reconcile.go                 controller.PodByUID (the Host's)
//	agent/podspec/podspec.go           QoS, Requirements
//	agent/rightsize/runner/bounds.go   nodeBounds.of: LimitRanges, allocatable
//	agent/rightsize/runner/apply.go    applier.values, specInForce
//	agent/rightsize/oom.go             OOMInput.Spec, then OOMBump
//	agent/rightsize/runner/policies.go matching, policyIndex.match
//	api/v1alpha1/policy/index.go       Index.Match, Policy.Selects
//	agent/rightsize/decide.go          Effective; for OOMBump roundMemory,
//	                                   bound, floorOf, tidyMemoryLimit
//	api/v1alpha1/policy/pod.go         Policy.ForPod
//	agent/rightsize/bumps.go           Engine.Kills, Engine.Bumps
//	api/v1alpha1/policy/policy.go      MayBumpOOM, OOMFactorOr, Allowed
//	recommend/container.go             OOMLimit
//	api/v1alpha1/policy/clamp.go       Policy.Bounds, Clamp (the one clamp)
//	internal/millicpu/millicpu.go      Cores, Floor (the clamp's CPU units)
//	api/v1alpha1/policy/quantity.go    Bytes (its memory units)
//	cgroup/kubepods.go                 ReadMemoryLimit (the pod's),
//	                                   ApplyPodResources
//	cgroup/layout.go                   DirsAt
//	cgroup/memory.go                   readMemoryLimit, readMemoryUsage,
//	                                   readMemsw, memoryValue
//	cgroup/file.go                     readFile, at last writeFile: the
//	                                   confined open and write
//	cgroup/writer.go                   apply: the checks, readCurrent, the
//	                                   leveled passes (pod first), write
//	cgroup/parse.go                    parseUint (the usage)
//	cgroup/known.go                    known.write (memory files are not
//	                                   recorded)
//
// Only on some kills: api/v1alpha1/policy/limitrange.go (a namespace
// with LimitRanges), api/v1alpha1/policy/qos.go (a pod whose status has
// no QoS class yet).
//
// The counters backend starts in counters_linux.go (readInotify or
// readEventFD, check, diff) with parse.go and kmsg_linux.go instead of
// bpf_linux.go. Rules are not copied to shorten the walk: the policy
// compiler's (selection, annotations, defaults, the clamp) stay in
// api/v1alpha1/policy, the bump's formula in recommend, the leveled
// write and its checks in cgroup.
//
// # Files
//
// agent.go (New, Run: discovery, servers, restore), loops.go (the
// long-lived loops and their recover-and-count), informer.go,
// reconcile.go (the pools controller and the status worker), pod.go (pod
// → pools.Pod, saturating CPU arithmetic through agent/podspec),
// kubeletstate.go (the kubelet's static CPU manager), podresources.go
// (the kubelet's pod-resources socket), events.go, metrics.go,
// queuemetrics.go (the work queues' series), state.go (the tables'
// sizes), health.go (/healthz, /readyz), api.go (the local API of
// package api/local), socket.go (its unix socket and peer credentials),
// config.go, wire.go (right-sizing and reporting built from the config,
// and the controller as right-sizing's Host: rsHost embeds it, so
// Host.PodByUID is reconcile.go's PodByUID).
//
// Sub-packages: pools (the CPU pools), rightsize (right-sizing's
// decisions) and rightsize/runner (right-sizing on the node: tracking,
// deciding, applying, OOM raises, policy status), reporter (the
// aggregator's side), collector (sampling), history, oomwatch (OOM
// kills), podspec (what the agent reads of a pod), kube (the API
// client).
//
// # Error contract
//
// Configuration errors wrap ErrInvalidConfig and name the field; pool
// refusals and write failures come from package pools (pools.ErrRefused,
// pools.ErrCgroupWrite) and become a status annotation and an Event on the
// pod. Bad input from a pod never changes anything but that pod's status:
// no other pod's cgroup, no allocation, no checkpoint byte. Every
// long-lived loop (loops.go lists them: reconcile and status workers,
// sweep, sampling, decisions, resizes, owner lookups, OOM bumps, reports, informer and
// cgroup-watch handlers, the HTTP servers) runs its iterations under one
// loop.Guard (internal/loop): a panic is recovered, counted in
// cgpilot_recovered_panics_total{loop}, logged with its stack, and the
// loop goes on with backoff; a reconcile's panic is also reported on its
// pod and the pod retried; other pods go on.
//
// # Imports
//
// agent imports client-go, Prometheus and every cgpilot package; only cmd/*
// and test/* import it, and its sub-packages never do (hack/checkimports/walls.go):
// right-sizing (agent/rightsize/runner) gets the controller only as its
// Host (pod lookup, Events, the status worker, exclusive CPUs), and feeds
// the RightsizePolicies, the namespaces' labels, LimitRanges and the
// node's allocatable to the policy compiler (api/v1alpha1/policy) and its
// one clamp itself.
// The agent builds on Linux only.
package agent
