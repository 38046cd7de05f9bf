package report

import (
	"fmt"
	"sort"
	"time"

	"github.com/cgpilot/cgpilot/recommend"
)

// DefaultPeriod is the report grid's period: agents report every minute.
const DefaultPeriod = time.Minute

// DefaultGrace is how late a window's reports may come, by default, for a
// report period: two periods.
func DefaultGrace(period time.Duration) time.Duration { return 2 * period }

// DefaultStaleAfter is how long a node may send nothing, by default, before
// its usage counts as stale: three periods.
func DefaultStaleAfter(period time.Duration) time.Duration { return 3 * period }

// FillTiming sets each zero of period, grace and staleAfter (nil: the
// caller has none) to its default, grace and staleAfter from the period it
// leaves, so that the aggregator's parts on one report grid default alike.
func FillTiming(period, grace, staleAfter *time.Duration) {
	if *period == 0 {
		*period = DefaultPeriod
	}
	if grace != nil && *grace == 0 {
		*grace = DefaultGrace(*period)
	}
	if staleAfter != nil && *staleAfter == 0 {
		*staleAfter = DefaultStaleAfter(*period)
	}
}

// Stale says whether a node whose latest report arrived at lastSeen is
// stale at now: it has sent nothing for more than staleAfter. The
// aggregator's analysis and node profiles (and through Load.Fresh the
// extender and the rescheduler) judge a node by it.
func Stale(now, lastSeen time.Time, staleAfter time.Duration) bool {
	return now.Sub(lastSeen) > staleAfter
}

// BuilderConfig configures a Builder.
type BuilderConfig struct {
	// Node is the agent's node.
	Node string
	// Period is the report grid (the aggregator's --report-period);
	// default DefaultPeriod. It must divide a day.
	Period time.Duration
	// SampleInterval is how often the agent samples; with it the Builder
	// counts rounds that were due but missing (MissedRounds). 0: it does
	// not count them.
	SampleInterval time.Duration
}

// ContainerInfo is what the agent knows of a workload-container besides
// its samples (see Container's fields of the same names).
type ContainerInfo struct {
	Current, Original Resources
	QOS               string
	Local             *Recommendation
	Policy            string
	Mode              string
	Preset            string
	Conflicts         []string
	Adjustable        bool
	Reason            string
	Unadmitted        int
}

// Builder turns an agent's samples into one Report per window of the
// report grid. Feed it every sampling round (Sample for each pod's
// container, NodeSample for the node) and, as they happen, OOM kills
// and adjustments; Cut returns the windows that have ended. It is not
// safe for concurrent use. Memory: per workload-container on the node,
// its non-empty buckets (at most 176 per resource) and the pod names of
// the open window.
type Builder struct {
	cfg  BuilderConfig
	end  time.Time // end of the open window; zero before the first sample
	cont map[Key]*acc
	info map[Key]ContainerInfo
	// rounds: distinct round times in the open window; last the latest.
	rounds  int
	last    time.Time
	nodeCPU float64
	nodeMem float64
	nodeN   int
	usage   NodeUsage
	pools   *Pools
	oom     []OOMKill
	adj     []Adjustment
	dropped int
	ready   []*Report
	// partialWindow: the open window is the first, begun mid-way.
	partialWindow, begun bool
}

type acc struct {
	cpu, mem       *recommend.Counts
	pods           map[string]struct{}
	sumCPU, sumMem float64
}

// NewBuilder returns a Builder for cfg.
func NewBuilder(cfg BuilderConfig) (*Builder, error) {
	if cfg.Period == 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Period < time.Second || cfg.Period > MaxPeriodSeconds*time.Second || cfg.Period%time.Second != 0 || (24*time.Hour)%cfg.Period != 0 {
		return nil, fmt.Errorf("%w: period %v: whole seconds, at most %ds, dividing a day", ErrMalformed, cfg.Period, MaxPeriodSeconds)
	}
	if err := checkName("node", cfg.Node, 253, dnsSubdomain); err != nil {
		return nil, err
	}
	if cfg.SampleInterval < 0 || cfg.SampleInterval > cfg.Period {
		return nil, fmt.Errorf("%w: sample interval %v, want 0..%v", ErrMalformed, cfg.SampleInterval, cfg.Period)
	}
	return &Builder{cfg: cfg, cont: map[Key]*acc{}, info: map[Key]ContainerInfo{}}, nil
}

// WindowEnd returns the end of the grid window holding t.
func WindowEnd(t time.Time, period time.Duration) time.Time {
	return time.Unix(0, 0).UTC().Add(t.Sub(time.Unix(0, 0)).Truncate(period) + period)
}

// roll moves to the window holding t, finishing the open one if t is
// past it. A sample older than the open window counts in it.
func (b *Builder) roll(t time.Time) {
	end := WindowEnd(t, b.cfg.Period)
	if b.end.IsZero() {
		b.end, b.partialWindow, b.begun = end, !b.begun, true
	} else if end.After(b.end) {
		b.finish()
		b.end, b.partialWindow = end, false
	}
	if b.rounds == 0 || t.After(b.last) {
		b.rounds++
		b.last = t
	}
}

// Sample records one sample of a pod's container at t: CPU cores used
// since the pod's previous sample, memory working set in bytes. Use the
// round's time for every pod of one round. A NaN, negative or infinite
// value is not counted.
func (b *Builder) Sample(k Key, pod string, t time.Time, cpuCores, memBytes float64) {
	b.roll(t)
	a := b.cont[k]
	if a == nil {
		cpu, _ := recommend.NewCounts(recommend.CPUHistogramOptions())
		mem, _ := recommend.NewCounts(recommend.MemoryHistogramOptions())
		a = &acc{cpu: cpu, mem: mem, pods: map[string]struct{}{}}
		b.cont[k] = a
	}
	a.pods[pod] = struct{}{}
	if validAmount(cpuCores) {
		a.cpu.Add(cpuCores)
		a.sumCPU += cpuCores
		if validAmount(memBytes) {
			a.mem.Add(memBytes)
			a.sumMem += memBytes
		}
	}
}

func validAmount(v float64) bool { return v >= 0 && v <= 1e18 }

// NodeSample records the node's usage (cores, working-set bytes) at t.
func (b *Builder) NodeSample(t time.Time, cpuCores, memBytes float64) {
	b.roll(t)
	if validAmount(cpuCores) && validAmount(memBytes) {
		b.nodeCPU += cpuCores
		b.nodeMem += memBytes
		b.nodeN++
	}
}

// Describe sets what the agent knows of a workload-container; it is kept
// until Forget and sent with every window that has samples of it.
func (b *Builder) Describe(k Key, info ContainerInfo) { b.info[k] = info }

// SetUnadmitted sets, for every described workload-container, how many
// of its pods an Auto policy covers without the admission annotation
// (absent from counts: none).
func (b *Builder) SetUnadmitted(counts map[Key]int) {
	for k, info := range b.info {
		info.Unadmitted = counts[k]
		b.info[k] = info
	}
}

// Forget drops a workload-container's description (its pods are gone).
func (b *Builder) Forget(k Key) { delete(b.info, k) }

// SetNode sets the node's capacity, allocatable and requests (the usage
// fields come from NodeSample).
func (b *Builder) SetNode(u NodeUsage) { b.usage = u }

// SetPools sets the CPU pools' state (nil: no pools).
func (b *Builder) SetPools(p *Pools) { b.pools = p }

// OOM records an OOM kill for the next report. One the aggregator would
// refuse (a bad name, no time) is not recorded: the error says why, and
// the report it would have spoilt goes out without it.
func (b *Builder) OOM(k OOMKill) error {
	if err := k.validate(); err != nil {
		return fmt.Errorf("OOM kill of %s: %w", k.Key, err)
	}
	b.oom = keepNewest(b.oom, k, MaxOOMKills, &b.dropped)
	return nil
}

// Adjusted records an adjustment (applied, or failed with Error) for the
// next report; the error text is truncated to its bound. One the
// aggregator would refuse is not recorded, as with OOM.
func (b *Builder) Adjusted(a Adjustment) error {
	a.Error = truncate(a.Error, maxError-len("…"))
	if err := a.validate(); err != nil {
		return fmt.Errorf("adjustment of %s: %w", a.Key, err)
	}
	b.adj = keepNewest(b.adj, a, MaxAdjustments, &b.dropped)
	return nil
}

// Dropped is how many events (OOM kills, adjustments) were dropped
// because more than the bounds happened in one window.
func (b *Builder) Dropped() int { return b.dropped }

// keepNewest appends v to a window's events, bounded at bound: when the
// list is full its oldest event makes room and counts in *dropped (the
// rule behind Dropped, for every bounded list of the builder).
func keepNewest[T any](list []T, v T, bound int, dropped *int) []T {
	if len(list) >= bound {
		list = list[1:]
		*dropped++
	}
	return append(list, v)
}

// Cut returns a Report for every window that ended at or before now and
// forgets them. APIVersion, Agent and Sequence are the Client's to set.
func (b *Builder) Cut(now time.Time) []*Report {
	if !b.end.IsZero() && !now.Before(b.end) {
		b.finish()
		b.end = time.Time{}
	}
	out := b.ready
	b.ready = nil
	return out
}

func (b *Builder) finish() {
	r := &Report{
		Node: b.cfg.Node, WindowEnd: b.end, PeriodSeconds: int(b.cfg.Period / time.Second), Windows: 1,
		OOMKills: b.oom, Adjustments: b.adj, Pools: b.pools, Usage: b.usage, Rounds: b.rounds,
	}
	if iv := b.cfg.SampleInterval; iv > 0 && !b.partialWindow {
		r.MissedRounds = max(0, int(b.cfg.Period/iv)-b.rounds)
	}
	if b.nodeN > 0 && b.rounds > 0 {
		r.Usage.CPUUsage, r.Usage.MemoryUsage = b.nodeCPU/float64(b.rounds), b.nodeMem/float64(b.rounds)
	}
	keys := make([]Key, 0, len(b.cont))
	for k := range b.cont {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		a := b.cont[k]
		if a.cpu.Total() == 0 {
			continue
		}
		info := b.info[k]
		c := Container{Key: k, Pods: len(a.pods), CPU: a.cpu.AppendBinary(nil), Memory: a.mem.AppendBinary(nil),
			Current: info.Current, Original: info.Original, QOS: info.QOS, Local: info.Local, Policy: info.Policy,
			Mode: info.Mode, Preset: info.Preset, Conflicts: info.Conflicts, Adjustable: info.Adjustable, Reason: info.Reason,
			Unadmitted: min(info.Unadmitted, len(a.pods))}
		if b.rounds > 0 {
			c.UsageCPU, c.UsageMemory = a.sumCPU/float64(b.rounds), a.sumMem/float64(b.rounds)
		}
		r.Containers = append(r.Containers, c)
	}
	b.ready = append(b.ready, r)
	clear(b.cont)
	b.oom, b.adj = nil, nil
	b.rounds, b.nodeCPU, b.nodeMem, b.nodeN = 0, 0, 0, 0
}
