// Package agent is the cgpilot node agent: it watches its node's pods,
// runs the CPU pools' controller and wires the libraries, right-sizing
// (agent/rightsize/runner) and reporting (agent/reporter) to Kubernetes;
// every decision and every cgroup write happens in the packages it wires.
//
// # From a pod to a cgroup write
//
// A running pod given cgpilot.io/cpu-pool: exclusive, followed call by
// call from the pod informer's update handler up to the first write of
// its containers' cpuset.cpus (the status annotation, the Events and the
// metrics come after it), enters 35 files, listed in the order first
// entered; the one hand-off is the workqueue:
//
//	agent/kube/handlers.go             GuardHandlers' UpdateFunc
//	internal/loop/loop.go              Guard.Do around the handler; after
//	                                   the queue Work, Guard.DoErr
//	agent/informer.go                  UpdateFunc, onlyOwnAnnotations,
//	                                   enqueuePod, enqueue: the key
//	agent/podspec/podspec.go           Key; later QoS, MilliOf, Requirements
//	agent/reconcile.go                 the worker's handler, reconcileSafely,
//	                                   reconcile, takeSince, rememberPod,
//	                                   podInfo; later allPods
//	agent/health.go                    health.reconciling
//	agent/kubeletstate.go              kubeletMayOwn, kubeletStatic.holds
//	agent/pod.go                       poolPod, cpuDemandMilli
//	api/local/annotations.go           ParseAnnotations
//	agent/config.go                    Config.manages
//	agent/rightsize/runner/runner.go   Track (right-sizing, on by default,
//	                                   goes before Sync): containerIDs,
//	                                   containerPath, fingerprint
//	agent/rightsize/runner/workload.go ownerCache.workloadOf, controllerOf,
//	                                   known, askLater
//	api/report/workload.go             WorkloadOf
//	cgroup/kubepods.go                 ContainerPath, Layout; later PodPath,
//	                                   Children, QoSPaths, WidenCPUs,
//	                                   ApplyPod, podPlans, childDirs
//	cgroup/layout.go                   ContainerPath, PodPath, DirsAt; later
//	                                   QoSPath, isDir
//	api/report/types.go                Key.String, Workload.String
//	agent/rightsize/engine.go          Engine.SetResources
//	agent/collector/collector.go       Collector.Set, Sampled
//	agent/rightsize/runner/policies.go policies, policyIndex.match
//	api/v1alpha1/policy/index.go       Index.Match, Policy.Selects
//	agent/pools/pools.go               Manager.Sync, syncExclusive; later
//	                                   apply, target
//	agent/pools/state.go               SharedPool, Assignment; then
//	                                   checkpointState.setAssignment,
//	                                   writeLocked
//	agent/pools/policy.go              policy.Allocate, topoState
//	topology/alloc.go                  Allocate, buildMasks, limits, pick
//	topology/allocpick.go              allocIndex, newPicker, picker.allocate
//	agent/pools/checkpoint.go          writeCheckpoint, encodeCheckpoint
//	internal/atomicfile/envelope.go    Seal, Checksum
//	internal/atomicfile/atomicfile.go  WriteFile: the checkpoint, before
//	                                   any cgroup
//	cgroup/file.go                     subdirs, the reads; at last
//	                                   writeHeld (writeFile where the
//	                                   directory is not watched): the write
//	cgroup/cpuset.go                   readCPUSetWith, checkCPUSet
//	cgroup/known.go                    known.read; at last known.write
//	internal/cpulist/cpulist.go        Parse (each cpuset read)
//	cgroup/writer.go                   apply: checkStatic, readCurrent,
//	                                   checkRelations, the leveled passes
//	                                   (containers narrowed first), write
//	cgroup/cpu.go                      checkQuota, readQuotaWith,
//	                                   parseCPUMax (the exclusive pod's
//	                                   quota is lifted)
//	cgroup/memory.go                   memoryFiles (limitFile, which
//	                                   checkStatic calls for every target)
//
// The cores leave the shared pool, so Manager.apply writes every shared
// pod in the same call, through the same files, in cgroup path order (a
// shared pod written before the pod enters memory.go before cpu.go: it
// has no quota to check). With right-sizing off, the eight files only
// Track enters drop out: 27; without the RightsizePolicy CRD, index.go
// does. Only on some pods: the first event of a pod not tracked yet
// (due.go; a new container's cgroup.OpenReader and OOM watch), a
// Guaranteed pod with whole CPUs where the kubelet runs the static CPU
// manager (refreshKubeletState, through podresources.go when the
// kubelet's socket is configured). The informer's transform and indexers
// run as the cache stores the pod, before the handler, in informer.go
// and reconcile.go (sweepSlice).
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
// durable raise through pods/resize come after it), enters 27 files,
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
//	api/v1alpha1/policy/policy.go      Mode.Applies; later MayBumpOOM,
//	                                   OOMFactorOr, Allowed
//	agent/rightsize/bumps.go           Engine.Kills, Engine.Bumps
//	recommend/policy.go                Preset (the preset's factor, the
//	                                   policy setting no oomFactor)
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
//	cgroup/parse.go                    trimSpace (the limit), parseUint
//	                                   (the usage)
//	cgroup/writer.go                   apply: the checks, readCurrent, the
//	                                   leveled passes (pod first), write
//	cgroup/known.go                    known.write (memory files are not
//	                                   recorded)
//
// Only on some kills: api/v1alpha1/policy/limitrange.go (a namespace
// with LimitRanges), api/v1alpha1/policy/qos.go (a pod whose status has
// no QoS class yet); a policy that sets oomFactor skips
// recommend/policy.go (26).
//
// The counters backend starts in counters_linux.go (readInotify or
// readEventFD, check, diff) with parse.go and kmsg_linux.go instead of
// bpf_linux.go. Rules are not copied to shorten the walk: the policy
// compiler's (selection, annotations, defaults, the clamp) stay in
// api/v1alpha1/policy, the bump's formula in recommend, the leveled
// write and its checks in cgroup.
//
// # From a sample to pods/resize
//
// One usage sample of one container, followed call by call from the
// collector's read of its cgroup up to the pods/resize patch of the
// decision that takes it in (the default preset, cgpilot-balanced; the
// annotation and the Events come after the patch), enters 47 files,
// listed in the order first entered. Its hand-offs are the state the
// round leaves (the histograms, the runner's latest usage), read by the
// decision round when the pod's step is due, and the applier's queue:
//
//	internal/loop/loop.go              Guard.Every, Run, Do: the round;
//	                                   later the decision round's, Work
//	agent/collector/collector.go       Collect, read
//	cgroup/reader.go                   Reader.Read
//	cgroup/file.go                     heldFile.read: one pread a file
//	cgroup/cpu.go                      parseCPUStat
//	cgroup/parse.go                    eachKV, nextLine, kvUint, cutField,
//	                                   parseUint, trimSpace
//	cgroup/memory.go                   parseMemoryLimit, parseMemoryStat,
//	                                   ParseOOMKills
//	cgroup/psi.go                      parsePSI
//	agent/collector/cpu.go             updateCPU
//	agent/collector/collectors.go      delta
//	agent/collector/metrics.go         metrics.observe
//	agent/collector/memory.go          updateMemory
//	agent/collector/throttle.go        updateThrottle
//	agent/collector/oom.go             updateOOM
//	agent/collector/psi.go             updatePSI
//	agent/rightsize/engine.go          Engine.Round (a sink); later
//	                                   Engine.Recommendation
//	recommend/recommender.go           Recorder.Add, checkSample,
//	                                   addChecked; later RecommendWith,
//	                                   budgetViews, budgetRate
//	recommend/container.go             container.add, resourceState.add;
//	                                   later established, recommend,
//	                                   target, propose, clampRound
//	recommend/objective.go             tracker.observe; later step, explain
//	recommend/histogram.go             AddSample, decayFactor, addRaw;
//	                                   later Percentile, costOptimum, cdf
//	recommend/bucket.go                bucketLayout.find
//	agent/rightsize/runner/runner.go   Round (a sink: the latest usage);
//	                                   decideLoop, decideAll, decide,
//	                                   input, resizeState, containersInput,
//	                                   containerKey, summarize
//	agent/rightsize/runner/due.go      dueLocked, scheduleLocked
//	agent/reconcile.go                 controller.PodByUID (the Host's)
//	agent/podspec/podspec.go           QoS, Key, Requirements, MilliOf
//	agent/rightsize/runner/policies.go matching, policyIndex.match
//	api/v1alpha1/policy/index.go       Index.Match, Policy.Selects
//	agent/rightsize/runner/bounds.go   nodeBounds.of: LimitRanges,
//	                                   allocatable
//	agent/wire.go                      rsHost.HoldsExclusive,
//	                                   holdsExclusive; later rsHost.Pod
//	agent/pools/pools.go               Manager.State
//	agent/pools/state.go               Assignment
//	agent/kubeletstate.go              kubeletStatic.holds
//	agent/rightsize/runner/apply.go    applier.values, specInForce; later
//	                                   request, queue, applyOne, resizePatch
//	api/report/types.go                Key.String, Workload.String
//	agent/rightsize/runner/oom.go      memoryUseLocked (the usage floors)
//	agent/reporter/reporter.go         MergedFor, later Describe (on a nil
//	                                   Reporter without the aggregator)
//	agent/rightsize/decide.go          Decide: policyOf, overrides, target,
//	                                   bound, floorOf, tidyMemoryLimit,
//	                                   guardQoS
//	api/v1alpha1/policy/pod.go         Policy.ForPod, Effective.Why
//	recommend/budget.go                budgetState.tick, budgetActive,
//	                                   offer, budgetValue, costAt
//	internal/millicpu/millicpu.go      Cores (roundCPU), Ceil, Floor
//	api/v1alpha1/policy/clamp.go       Policy.Bounds, Clamp (the one clamp)
//	api/v1alpha1/policy/policy.go      Allowed; Mode.Applies, InWindow
//	api/v1alpha1/policy/quantity.go    Bytes (the clamp's memory units)
//	api/v1alpha1/policy/qos.go         QoSOf, QoSClass
//	api/local/rightsize.go             FormatCPU, FormatMemory
//	agent/rightsize/runner/pending.go  pending.put; after the queue, take
//	agent/kube/kube.go                 Client.PatchPod: pods/resize
//
// The round also hands the samples to agent/history (Store.Round), which
// no decision reads: not counted. Only on some: a cgroup without PSI
// skips cgroup/psi.go (the collector's psi.go runs and finds no data); a
// namespace with LimitRanges adds policy/limitrange.go; a pod on
// exclusive cores skips kubeletstate.go; a clamped resize adds
// agent/events.go (its Event); overrides the Recommender has not seen
// add recommend/policy.go; a recommendation read within the step for
// another pod of the workload comes from Engine's cache (no budget.go);
// the aggregator, when on, adds api/report/builder.go (its sink,
// Describe) and, for a merged recommendation, api/report/client.go. The
// other presets add fleet.go (cgpilot-fleet), season.go (cgpilot-cyclic)
// or vpa.go (vpa, which has no budget.go). A cluster without pods/resize
// gets applyCgroups' leveled write instead of the patch.
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
