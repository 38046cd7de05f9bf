// Package runner is right-sizing on one node: the stateful half of the
// in-place VPA loop, around the pure decisions of package
// agent/rightsize. It tracks the pods the agent hands it, samples their
// containers, decides when each pod's step is due, applies the change
// (pods/resize, or leveled cgroup writes where the cluster lacks it),
// raises memory at once after an OOM kill, keeps each pod's
// cgpilot.io/recommendation annotation and each RightsizePolicy's node
// status, and tells the reporter (agent/reporter) what it did.
//
// # From a sample to pods/resize
//
//	runner.go       Track makes a pod's containers collector targets; each
//	                round feeds the histograms (rightsize.Engine) and the
//	                floors (Round); decideAll takes the pods due from
//	                due.go's queue (no walk of every pod at a tick) →
//	                decide → input builds the decision's view (policies.go's
//	                matching, bounds.go's LimitRanges and allocatable,
//	                apply.go's specs in force, oom.go's memoryUseLocked)
//	                and asks rightsize.Decide
//	apply.go        the applier's queue (pending.go: the latest change per
//	                pod wins; an OOM bump is kept under a later step
//	                change), the pods/resize patch or the cgroup plan,
//	                Verify
//
// Those are the runner's seven of the sample's 47 files; agent/doc.go
// lists the whole walk.
//
// The annotation of a change is written with the resize's outcome, after
// the patch: a refusal or verify's Applied at once, an accepted resize a
// second later unless verified meanwhile (holdAnnotation), and Applied
// with the new requests, as the next decision sees them (settle); an
// annotation that differs only in its explanations is not written at all:
// each pod update is a kubelet sync, and a resize within a PLEG relist of
// one waits for the next relist (annotate).
//
// # From an OOM kill to the raised limit
//
//	oom.go          oomLoop → onOOM: the watched cgroup's container, its
//	                pod (Host.PodByUID), oomInput (only what a bump reads,
//	                not input's decision view: bounds.go's LimitRanges and
//	                allocatable, apply.go's specs in force, the memory
//	                used with the OOM floor, memoryUseLocked), the
//	                policy (policies.go's matching, rightsize.Effective),
//	                sameOOM, rightsize.OOMBump, one leveled write of pod
//	                and container (bumpCgroups: the pod's limit read
//	                alone, cgroup.Kubepods.ReadMemoryLimit), then the kill
//	                recorded (histograms, report, Event) and the durable
//	                half through the applier; a refused raise goes back
//	                (bumpRefused)
//
// runner.go is not on that path: agent/doc.go lists the whole walk.
//
// # Files
//
// host.go (what the agent gives: Host, Options; the loops' names; the
// metrics), runner.go (tracking, sampling's floors, the decision rounds
// and input), due.go (the tracked pods ordered by their next
// decision), apply.go (the applier, and specInForce: a spec's values or
// those it wrote), oom.go (the OOM path, and memoryUseLocked: usage held
// up by a recent raise, which decisions read too), policies.go (the
// RightsizePolicy and namespace informers feeding the policy compiler
// api/v1alpha1/policy through its handler, policy/feed, and matching:
// the policies selecting a pod), policystatus.go (this node's entry of each
// policy's status, by server-side apply), bounds.go (LimitRanges and the
// node's allocatable for the clamp), workload.go (a pod's workload, by
// report.WorkloadOf, with its owners cached), report.go (what the
// reporter is told of adjustments and unadmitted pods), pending.go (the
// latest value per pod key, for the applier's resizes and the
// recommendation annotations), inspect.go (the
// sizes of its tables, the history and reporter for the local API, and
// what the agent's kernel tests read).
//
// # What it holds
//
// No pointer back to the agent: the pods it reads, the Events it sends
// and the status worker that patches its annotation come through Host;
// the API server through agent/kube's Interface; the cgroups through
// cgroup.Kubepods. Each mutex is locked only by its owner's methods (the
// Runner's tables, the applier's queue, the owner cache).
//
// # Error contract
//
// Nothing a pod carries stops another pod's right-sizing: a refused
// change is a Warning Event and a state in the annotation; an API server
// that is away delays changes (retried with backoff) and never holds up
// sampling, decisions or OOM bumps; every loop runs under the agent's
// loop.Guard.
//
// # Imports
//
// It imports agent/rightsize, agent/collector, agent/history,
// agent/oomwatch, agent/reporter, agent/kube, agent/podspec, cgroup, the
// policy compiler and client-go's informers and workqueue; never package
// agent or agent/pools, never the aggregator or a clientset, and only
// package agent imports it (hack/checkimports/walls.go).
package runner
