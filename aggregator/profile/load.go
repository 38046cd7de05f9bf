package profile

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/cgpilot/cgpilot/api/report"
)

// placement is one workload on a node as its latest report saw it.
type placement struct {
	wl       report.Workload
	pods     int32
	cpu, mem float32 // the window's usage of those pods (sum)
}

// peakRing holds, per day of the last Days, the highest value of a
// per-pod series (84 bytes: placement needs the maximum, not the shape).
type peakRing struct {
	day      [Days]int32 // Unix day + 1; 0: empty
	cpu, mem [Days]float32
}

func (r *peakRing) add(t time.Time, cpu, mem float64) {
	d := int32(t.Unix()/86400) + 1
	row := int(d) % Days
	switch {
	case r.day[row] == d:
	case r.day[row] > d:
		return
	default:
		r.day[row], r.cpu[row], r.mem[row] = d, 0, 0
	}
	r.cpu[row] = max(r.cpu[row], float32(cpu))
	r.mem[row] = max(r.mem[row], float32(mem))
}

// max is the maximum over the days within the horizon as of now.
func (r *peakRing) max(now time.Time) (cpu, mem float64) {
	today := int32(now.Unix()/86400) + 1
	for row := range Days {
		if d := r.day[row]; d != 0 && d <= today && today-d < Days {
			cpu, mem = max(cpu, float64(r.cpu[row])), max(mem, float64(r.mem[row]))
		}
	}
	return cpu, mem
}

// Load is what the placement rule sees of a node: the sum, over the pods
// its latest report ran, of each pod's 7-day peak (its workload's
// PeakPodCPU/PeakPodMem; the pods' usage in that report where higher or
// where the workload has no closed window yet), beside its allocatable
// and its latest real usage.
type Load struct {
	Node string `json:"node"`
	// CPU and Memory: the sum of the pods' 7-day peaks (cores, bytes).
	CPU    float64 `json:"cpu"`
	Memory float64 `json:"memory"`
	// Allocatable and the latest real usage, from the same report.
	CPUAllocatable    float64 `json:"cpuAllocatable"`
	MemoryAllocatable float64 `json:"memoryAllocatable"`
	CPUUsage          float64 `json:"cpuUsage"`
	MemoryUsage       float64 `json:"memoryUsage"`
	Pods              int     `json:"pods"`
	// WindowEnd is the end of the report the pods come from; LastSeen
	// when it arrived.
	WindowEnd time.Time `json:"windowEnd"`
	LastSeen  time.Time `json:"lastSeen"`
	// Computed is when this load was computed (every LoadInterval).
	Computed time.Time `json:"computed"`
}

// Fresh reports whether the load can steer placement at now: the node
// reported within staleAfter and told its allocatable.
func (l Load) Fresh(now time.Time, staleAfter time.Duration) bool {
	return !report.Stale(now, l.LastSeen, staleAfter) && l.CPUAllocatable > 0 && l.MemoryAllocatable > 0
}

type loadSnapshot struct {
	at    time.Time
	nodes map[string]Load
}

// refreshLoadsLocked recomputes every node's Load when LoadInterval has
// passed since the last time, or when force is set (p.mu held).
func (p *Profiles) refreshLoadsLocked(now time.Time, force bool) {
	if !force && !p.loadsAt.IsZero() && now.Sub(p.loadsAt) < p.cfg.LoadInterval && !now.Before(p.loadsAt) {
		return
	}
	p.loadsAt = now
	snap := &loadSnapshot{at: now, nodes: make(map[string]Load, len(p.nodes))}
	peaks := map[report.Workload][2]float64{}
	for name, n := range p.nodes {
		l := Load{Node: name, CPUAllocatable: n.latest.CPUAllocatable, MemoryAllocatable: n.latest.MemoryAllocatable,
			CPUUsage: n.latest.CPUUsage, MemoryUsage: n.latest.MemoryUsage, WindowEnd: n.placedEnd, LastSeen: n.lastSeen, Computed: now}
		for _, pl := range n.placed {
			pk, ok := peaks[pl.wl]
			if !ok {
				if wp := p.workloads[pl.wl]; wp != nil {
					pk[0], pk[1] = wp.podPeak.max(now)
				}
				peaks[pl.wl] = pk
			}
			l.CPU += max(float64(pl.pods)*pk[0], float64(pl.cpu))
			l.Memory += max(float64(pl.pods)*pk[1], float64(pl.mem))
			l.Pods += int(pl.pods)
		}
		snap.nodes[name] = l
	}
	p.loads.Store(snap)
}

// Loads returns every node's Load as last computed, sorted by name.
func (p *Profiles) Loads() []Load {
	snap := p.loads.Load()
	if snap == nil {
		return nil
	}
	out := make([]Load, 0, len(snap.nodes))
	for _, l := range snap.nodes {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// NodeLoad returns one node's Load as last computed (no lock taken: the
// scheduler extender calls it for every candidate node).
func (p *Profiles) NodeLoad(name string) (Load, bool) {
	snap := p.loads.Load()
	if snap == nil {
		return Load{}, false
	}
	l, ok := snap.nodes[name]
	return l, ok
}

// RefreshLoads recomputes the loads now (tests and the rescheduler's
// queue pass; Close does it every LoadInterval).
func (p *Profiles) RefreshLoads(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refreshLoadsLocked(now, true)
}

// Placed returns what node's latest report said of workload w there: its
// pods and their use per pod (cores, bytes); ok is false when the report
// did not list it.
func (p *Profiles) Placed(node string, w report.Workload) (pods int, cpu, mem float64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.nodes[node]
	if n == nil {
		return 0, 0, 0, false
	}
	for _, pl := range n.placed {
		if pl.wl == w && pl.pods > 0 {
			return int(pl.pods), float64(pl.cpu) / float64(pl.pods), float64(pl.mem) / float64(pl.pods), true
		}
	}
	return 0, 0, 0, false
}

// StaleAfter is how long a node may be silent before its data is stale.
func (p *Profiles) StaleAfter() time.Duration { return p.cfg.StaleAfter }

// Rule is the placement rule: on every node, the sum of the 7-day peaks
// of the pods on it (Load) stays at or below these fractions of its
// allocatable CPU and memory. The scheduler extender's filter keeps a pod
// off a node it would push over; the rescheduler moves pods off nodes that
// are over. It is the one home of that rule.
type Rule struct {
	CPU, Memory float64
}

// Validate checks both fractions are in (0, 1].
func (r Rule) Validate() error {
	if !(r.CPU > 0 && r.CPU <= 1) || !(r.Memory > 0 && r.Memory <= 1) {
		return fmt.Errorf("placement watermarks cpu %v, memory %v: want (0, 1]", r.CPU, r.Memory)
	}
	return nil
}

// ValidateHotWatermark checks a hot watermark (Config.HotWatermark, the
// aggregator's and the rescheduler's) is a share of allocatable in (0, 1].
func ValidateHotWatermark(w float64) error {
	if !(w > 0 && w <= 1) {
		return fmt.Errorf("hot watermark %v, want (0, 1]", w)
	}
	return nil
}

// Resource names in Rule's answers.
const (
	ResourceCPU    = "cpu"
	ResourceMemory = "memory"
)

// Exceeds returns the first resource ("cpu", then "memory") whose peaks
// with a pod of the given peak usage added would pass the watermark on
// the node, "" when the pod fits. A node without allocatable never does.
func (r Rule) Exceeds(l Load, podCPU, podMem float64) string {
	if over(l.CPU+podCPU, l.CPUAllocatable, r.CPU) > 0 {
		return ResourceCPU
	}
	if over(l.Memory+podMem, l.MemoryAllocatable, r.Memory) > 0 {
		return ResourceMemory
	}
	return ""
}

// Ratio is the node's load over its watermark, the larger of CPU and
// memory: above 1 the node breaks the rule.
func (r Rule) Ratio(l Load) float64 {
	var out float64
	if l.CPUAllocatable > 0 && r.CPU > 0 {
		out = l.CPU / (r.CPU * l.CPUAllocatable)
	}
	if l.MemoryAllocatable > 0 && r.Memory > 0 {
		out = math.Max(out, l.Memory/(r.Memory*l.MemoryAllocatable))
	}
	return out
}

// Excess is how much of each resource must leave the node for it to meet
// the rule (0 where it does, or where the node reported no allocatable).
func (r Rule) Excess(l Load) (cpu, mem float64) {
	return over(l.CPU, l.CPUAllocatable, r.CPU), over(l.Memory, l.MemoryAllocatable, r.Memory)
}

// HotExcess is how much real use of each resource is above the hot
// watermark's share of allocatable (0 where it is not, or where the node
// reported no allocatable).
func (l Load) HotExcess(watermark float64) (cpu, mem float64) {
	return over(l.CPUUsage, l.CPUAllocatable, watermark), over(l.MemoryUsage, l.MemoryAllocatable, watermark)
}

// Hot is the one hot-node rule, for the profiles' hot nodes and the
// rescheduler alike: real CPU or memory use above the watermark's share
// of allocatable.
func (l Load) Hot(watermark float64) bool {
	cpu, mem := l.HotExcess(watermark)
	return cpu > 0 || mem > 0
}

// over is the one comparison of a node's amount against a watermark's
// share of its allocatable: how much is above it. A node that reported no
// allocatable says nothing about pressure, so nothing is above.
func over(amount, alloc, watermark float64) float64 {
	if !(alloc > 0) {
		return 0
	}
	return math.Max(0, amount-watermark*alloc)
}
