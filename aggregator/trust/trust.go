// Package trust decides what of an authenticated node's report the
// aggregator believes. A token proves which node sends; it does not prove
// what the node says. A compromised node holding one agent's token could
// otherwise poison any namespace's merged recommendation (a forged report
// of another node's workload), grow the state without bound (thousands of
// fake workloads), weigh a merge with more samples than its pods could
// give, pick a looser policy for a workload, or steer the scheduler
// extender with a made-up size or usage. Check removes or bounds each:
//
//   - a workload-container counts only if the API server shows a pod of
//     that workload bound to the reporting node during the report's
//     windows (Pods); its pod count is at most those pods;
//   - its samples are at most pods × rounds, with rounds at most one per
//     SampleInterval of the windows (the agents' interval): one node's
//     weight in a merge is at most its share of the workload's pods;
//   - at most MaxKeys workload-containers per report;
//   - the policy (name, mode, conflicts) is the aggregator's own match of
//     the workload's pods (Policies), never the report's, and the preset
//     is the policy's;
//   - OOM kills and adjustments count only for pods bound to the node,
//     and an OOM kill's amounts are at most the node's memory capacity;
//   - the node's capacity and allocatable are the Node object's; its
//     requests at most allocatable; its usage at most capacity and at
//     least UsageFloor of what its pods use elsewhere (PerPod, the other
//     nodes' evidence) and the sum of its own containers' usage, so that
//     a node claiming to be idle does not draw the scheduler's pods.
//
// What is removed is counted by reason in the Verdict (the aggregator's
// cgpilot_aggregator_report_items_dropped_total) and never refuses the
// rest of the report: an honest agent racing a pod's deletion loses only
// that pod's window.
//
// Without an API server (standalone load tests) Pods, Policies and Sizes
// are nil and only the bounds that need none apply.
//
// It imports api/report and recommend; nothing of Kubernetes.
package trust

import (
	"context"
	"math"
	"time"

	"github.com/cgpilot/cgpilot/api/report"
)

// Pods is what the API server says runs where (kube.Pods).
type Pods interface {
	// Bound returns how many pods of w are bound to node, or were and
	// were deleted at or after from.
	Bound(ctx context.Context, node string, w report.Workload, from time.Time) int
	// PodOn reports whether pod namespace/name is (or was, deleted at or
	// after from) bound to node and of w.
	PodOn(ctx context.Context, node, namespace, name string, w report.Workload, from time.Time) bool
	// OnNode returns the live pods bound to node by workload.
	OnNode(node string) map[report.Workload]int
}

// Policy is the aggregator's match of a workload's pods: one policy, or
// none with the conflicting ones when several match.
type Policy struct {
	Name, Mode string
	Conflicts  []string
}

// Size is a Node object's capacity and allocatable (cores, bytes, pods).
type Size struct {
	CPUCapacity, CPUAllocatable       float64
	MemoryCapacity, MemoryAllocatable float64
	Pods                              int
}

// Config configures a Checker.
type Config struct {
	Pods Pods
	// Policies resolves the policy of a workload from its pods' labels.
	Policies func(report.Workload) Policy
	// Sizes returns the Node object's size (false: no such Node).
	Sizes func(node string) (Size, bool)
	// PerPod returns a workload's usage per pod as all nodes report it
	// (profile.Profiles), for the node usage floor.
	PerPod func(report.Workload) (cpu, memory float64, ok bool)
	// Period is the report grid; SampleInterval the agents' sampling
	// interval (default 10 s, the agents' default): a pod gives at most
	// one sample per interval.
	Period, SampleInterval time.Duration
	// MaxKeys bounds the workload-containers of one report (default
	// 1,024: 250 pods of 4 containers).
	MaxKeys int
	// UsageFloor is the share of its pods' usage elsewhere below which a
	// node's reported usage is raised (default 0.5).
	UsageFloor float64
}

// Reasons items are dropped or amounts changed for.
const (
	ReasonNotOnNode      = "not_on_node"     // no pod of the workload on the node
	ReasonOverSamples    = "over_samples"    // more samples than pods × rounds
	ReasonOverKeys       = "over_keys"       // past MaxKeys
	ReasonOOMNotOnNode   = "oom_not_on_node" // an OOM kill of a pod not on the node
	ReasonAdjNotOnNode   = "adjustment_not_on_node"
	ReasonPolicy         = "policy"            // the report named another policy
	ReasonNodeSize       = "node_size"         // capacity or allocatable not the Node's
	ReasonNodeUnknown    = "node_unknown"      // no Node object: the node's usage is not used
	ReasonUsageRaised    = "usage_raised"      // usage below what its pods use
	ReasonUsageCapped    = "usage_capped"      // usage or requests above the node's size
	ReasonOOMAmountCap   = "oom_amount_capped" // an OOM kill's bytes above the node's memory
	ReasonPodsCapped     = "pods_capped"       // more pods claimed than bound
	ReasonRoundsCapped   = "rounds_capped"     // more rounds than the windows hold
	defaultMaxKeys       = 1024
	defaultInterval      = 10 * time.Second
	defaultUsageFloor    = 0.5
	maxRoundsSlackPerWin = 1
)

// Verdict counts what Check changed, by reason.
type Verdict map[string]int

func (v Verdict) add(reason string, n int) {
	if n > 0 {
		v[reason] += n
	}
}

// Checker applies the rules to reports.
type Checker struct{ cfg Config }

// New returns a Checker of cfg.
func New(cfg Config) *Checker {
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = defaultInterval
	}
	if cfg.Period <= 0 {
		cfg.Period = report.DefaultPeriod
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = defaultMaxKeys
	}
	if cfg.UsageFloor <= 0 {
		cfg.UsageFloor = defaultUsageFloor
	}
	return &Checker{cfg: cfg}
}

// MaxRounds is how many sampling rounds windows of the grid can hold.
func (c *Checker) MaxRounds(windows int) int {
	per := int(math.Ceil(float64(c.cfg.Period) / float64(c.cfg.SampleInterval)))
	return windows * (per + maxRoundsSlackPerWin)
}

// Check removes from d (in place) what the node may not report and bounds
// the rest; d is an authenticated report of d.Node.
func (c *Checker) Check(ctx context.Context, d *report.Decoded) Verdict {
	v := Verdict{}
	from := d.WindowEnd.Add(-time.Duration(d.Windows) * time.Duration(d.PeriodSeconds) * time.Second)
	if lim := c.MaxRounds(d.Windows); d.Rounds > lim {
		d.Rounds = lim
		v[ReasonRoundsCapped]++
	}
	if len(d.Containers) > c.cfg.MaxKeys {
		v[ReasonOverKeys] += len(d.Containers) - c.cfg.MaxKeys
		d.Containers, d.Counts = d.Containers[:c.cfg.MaxKeys], d.Counts[:c.cfg.MaxKeys]
	}
	keep := 0
	var ownCPU, ownMem float64
	for i := range d.Containers {
		ct := &d.Containers[i]
		cc := d.Counts[i]
		if c.cfg.Pods != nil {
			bound := c.cfg.Pods.Bound(ctx, d.Node, ct.Workload, from)
			if bound == 0 {
				v[ReasonNotOnNode]++
				continue
			}
			if ct.Pods > bound {
				ct.Pods = bound
				ct.Unadmitted = min(ct.Unadmitted, bound)
				v[ReasonPodsCapped]++
			}
		}
		if cc.CPU.Total() > uint64(ct.Pods)*uint64(d.Rounds) {
			v[ReasonOverSamples]++
			continue
		}
		if c.cfg.Policies != nil {
			p := c.cfg.Policies(ct.Workload)
			if p.Name != ct.Policy {
				v[ReasonPolicy]++
			}
			ct.Policy, ct.Mode, ct.Conflicts, ct.Preset = p.Name, p.Mode, p.Conflicts, ""
		}
		ownCPU += ct.UsageCPU
		ownMem += ct.UsageMemory
		d.Containers[keep], d.Counts[keep] = *ct, cc
		keep++
	}
	clear(d.Containers[keep:])
	clear(d.Counts[keep:])
	d.Containers, d.Counts = d.Containers[:keep], d.Counts[:keep]

	size, sized := Size{}, false
	if c.cfg.Sizes != nil {
		size, sized = c.cfg.Sizes(d.Node)
	}
	if c.cfg.Pods != nil {
		onNode := func(k report.Key, pod string) bool {
			return c.cfg.Pods.PodOn(ctx, d.Node, k.Namespace, pod, k.Workload, from)
		}
		var kills, adjs int
		d.OOMKills, kills = keepIf(d.OOMKills, func(k report.OOMKill) bool { return onNode(k.Key, k.Pod) })
		d.Adjustments, adjs = keepIf(d.Adjustments, func(a report.Adjustment) bool { return onNode(a.Key, a.Pod) })
		v.add(ReasonOOMNotOnNode, kills)
		v.add(ReasonAdjNotOnNode, adjs)
	}
	if sized {
		for i := range d.OOMKills {
			k := &d.OOMKills[i]
			if m := size.MemoryCapacity; k.UsageBytes > m || k.LimitBytes > m || k.RequestBytes > m {
				k.UsageBytes, k.LimitBytes, k.RequestBytes = math.Min(k.UsageBytes, m), math.Min(k.LimitBytes, m), math.Min(k.RequestBytes, m)
				v[ReasonOOMAmountCap]++
			}
		}
	}
	c.checkUsage(d, size, sized, ownCPU, ownMem, v)
	return v
}

// checkUsage replaces the node's size by the Node object's and bounds its
// requests and usage.
func (c *Checker) checkUsage(d *report.Decoded, size Size, sized bool, ownCPU, ownMem float64, v Verdict) {
	if c.cfg.Sizes == nil {
		return
	}
	u := &d.Usage
	if !sized {
		// No Node object: nothing to believe the node's usage against; the
		// extender then scores it neutral-low (no allocatable).
		*u = report.NodeUsage{}
		v[ReasonNodeUnknown]++
		return
	}
	if u.CPUCapacity != size.CPUCapacity || u.CPUAllocatable != size.CPUAllocatable ||
		u.MemoryCapacity != size.MemoryCapacity || u.MemoryAllocatable != size.MemoryAllocatable {
		v[ReasonNodeSize]++
	}
	u.CPUCapacity, u.CPUAllocatable, u.MemoryCapacity, u.MemoryAllocatable = size.CPUCapacity, size.CPUAllocatable, size.MemoryCapacity, size.MemoryAllocatable
	capped := false
	bound := func(x *float64, hi float64) {
		if *x > hi {
			*x = hi
			capped = true
		}
	}
	bound(&u.CPURequests, size.CPUAllocatable)
	bound(&u.MemoryRequests, size.MemoryAllocatable)
	bound(&u.CPUUsage, size.CPUCapacity)
	bound(&u.MemoryUsage, size.MemoryCapacity)
	if size.Pods > 0 && u.Pods > size.Pods {
		u.Pods = size.Pods
		capped = true
	}
	if capped {
		v[ReasonUsageCapped]++
	}
	// The floor: what the node's own containers use, and a share of what
	// its pods' workloads use per pod on every node.
	floorCPU, floorMem := ownCPU, ownMem
	if c.cfg.Pods != nil && c.cfg.PerPod != nil {
		var cpu, mem float64
		for w, n := range c.cfg.Pods.OnNode(d.Node) {
			if pc, pm, ok := c.cfg.PerPod(w); ok {
				cpu += float64(n) * pc
				mem += float64(n) * pm
			}
		}
		floorCPU, floorMem = math.Max(floorCPU, c.cfg.UsageFloor*cpu), math.Max(floorMem, c.cfg.UsageFloor*mem)
	}
	floorCPU, floorMem = math.Min(floorCPU, size.CPUCapacity), math.Min(floorMem, size.MemoryCapacity)
	if u.CPUUsage < floorCPU || u.MemoryUsage < floorMem {
		u.CPUUsage, u.MemoryUsage = math.Max(u.CPUUsage, floorCPU), math.Max(u.MemoryUsage, floorMem)
		v[ReasonUsageRaised]++
	}
}

// keepIf keeps, in place, the elements ok accepts and returns how many it
// dropped.
func keepIf[T any](xs []T, ok func(T) bool) ([]T, int) {
	kept := xs[:0]
	for _, x := range xs {
		if ok(x) {
			kept = append(kept, x)
		}
	}
	clear(xs[len(kept):])
	return kept, len(xs) - len(kept)
}
