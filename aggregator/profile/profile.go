package profile

import (
	"cmp"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cgpilot/cgpilot/api/report"
)

// Days is the profiles' horizon: the 7-day maximum and the 7-day average
// of the busiest hour.
const Days = 7

// Ring holds one series' usage (cores and bytes) for the last Days days:
// per day and hour of day (UTC) the hour's mean usage, and per day the
// maximum. The hour being filled is summed in float64 and stored as its
// mean when the next hour begins; stored means are bfloat16 (8 bits of
// exponent, 8 of precision: within 0.4 %), maxima float32. Profiles
// steer placement: they need two or three digits, not sixteen, and at
// about 0.8 KiB a ring, 50,000 workloads cost 40 MiB. A window that
// arrives after its hour was stored counts for the day's maximum only.
type Ring struct {
	day            [Days]int32 // day index (Unix days) + 1 each row holds; 0: empty
	cpu, mem       [Days][24]uint16
	hours          [Days]uint32 // bit h: hour h has a mean
	maxCPU, maxMem [Days]float32
	// The hour being filled: Unix hour + 1 (0: none), sums and count.
	curHour        int64
	curCPU, curMem float64
	curN           uint32
}

func bf16(v float64) uint16 {
	b := math.Float32bits(float32(v))
	b += 0x7fff + (b>>16)&1 // round to nearest even
	return uint16(b >> 16)
}

func fromBF16(u uint16) float64 { return float64(math.Float32frombits(uint32(u) << 16)) }

// row returns the row of Unix day index d (+1), clearing it for a new
// day; -1 when d is older than the row holds (outside the horizon).
func (r *Ring) row(d int32) int {
	row := int(d) % Days
	switch {
	case r.day[row] == d:
	case r.day[row] > d:
		return -1
	default:
		r.day[row] = d
		r.cpu[row], r.mem[row], r.hours[row] = [24]uint16{}, [24]uint16{}, 0
		r.maxCPU[row], r.maxMem[row] = 0, 0
	}
	return row
}

// flush stores the hour being filled as its mean.
func (r *Ring) flush() {
	if r.curHour == 0 || r.curN == 0 {
		return
	}
	hour := r.curHour - 1
	if row := r.row(int32(hour/24) + 1); row >= 0 {
		h := hour % 24
		r.cpu[row][h] = bf16(r.curCPU / float64(r.curN))
		r.mem[row][h] = bf16(r.curMem / float64(r.curN))
		r.hours[row] |= 1 << h
	}
	r.curHour, r.curCPU, r.curMem, r.curN = 0, 0, 0, 0
}

// Add records one window's usage ending at t.
func (r *Ring) Add(t time.Time, cpu, mem float64) {
	hour := t.Unix() / 3600
	if row := r.row(int32(hour/24) + 1); row >= 0 {
		r.maxCPU[row] = max(r.maxCPU[row], float32(cpu))
		r.maxMem[row] = max(r.maxMem[row], float32(mem))
	}
	switch {
	case hour+1 == r.curHour:
	case hour+1 > r.curHour:
		r.flush()
		r.curHour = hour + 1
	default:
		return // its hour is stored already: the maximum only
	}
	r.curCPU += cpu
	r.curMem += mem
	r.curN++
}

// Summary is a usage profile: the maximum over the last 7 days, and the
// expected peak-hour usage: for each hour of the day the mean usage in
// that hour averaged over the days that have it, at the busiest hour.
type Summary struct {
	CPU    Resource `json:"cpu"`
	Memory Resource `json:"memory"`
	// Days is how many of the last 7 days have data.
	Days int `json:"days"`
}

// Resource is one resource's profile (cores or bytes).
type Resource struct {
	Max7d    float64 `json:"max7d"`
	PeakHour float64 `json:"peakHour"`
	// Hour is the busiest hour of the day (UTC, 0-23).
	Hour int `json:"hour"`
}

// Summary computes the profile as of now (rows older than 7 days count
// as empty; the hour being filled counts with its mean so far).
func (r *Ring) Summary(now time.Time) Summary {
	today := int32(now.Unix()/86400) + 1
	var s Summary
	var cpuH, memH [24]float64
	var days [24]int
	inHorizon := func(d int32) bool { return d != 0 && d <= today && today-d < Days }
	curDay, curH := int32(0), int64(-1)
	if r.curHour != 0 && r.curN > 0 {
		curDay, curH = int32((r.curHour-1)/24)+1, (r.curHour-1)%24
	}
	for row := range Days {
		d := r.day[row]
		if !inHorizon(d) {
			continue
		}
		s.Days++
		s.CPU.Max7d = max(s.CPU.Max7d, float64(r.maxCPU[row]))
		s.Memory.Max7d = max(s.Memory.Max7d, float64(r.maxMem[row]))
		for h := range 24 {
			switch {
			case d == curDay && int64(h) == curH:
				cpuH[h] += r.curCPU / float64(r.curN)
				memH[h] += r.curMem / float64(r.curN)
			case r.hours[row]&(1<<h) != 0:
				cpuH[h] += fromBF16(r.cpu[row][h])
				memH[h] += fromBF16(r.mem[row][h])
			default:
				continue
			}
			days[h]++
		}
	}
	for h := range 24 {
		if days[h] == 0 {
			continue
		}
		if v := cpuH[h] / float64(days[h]); v > s.CPU.PeakHour {
			s.CPU.PeakHour, s.CPU.Hour = v, h
		}
		if v := memH[h] / float64(days[h]); v > s.Memory.PeakHour {
			s.Memory.PeakHour, s.Memory.Hour = v, h
		}
	}
	return s
}

// Config configures Profiles.
type Config struct {
	// Period and Grace as in the state store: a workload's usage of a
	// window is the sum over the nodes that reported it within Grace.
	Period, Grace time.Duration
	// HotWatermark is the share of allocatable CPU or memory in real use
	// above which a node is hot (default 0.8).
	HotWatermark float64
	// StaleAfter: a node not reporting for this long is left out of the
	// cluster's averages and the hot list (default 3 periods).
	StaleAfter time.Duration
	// LoadInterval is how often the nodes' placement loads are recomputed
	// (default 1 min).
	LoadInterval time.Duration
}

// Profiles keeps the usage profiles of every node and workload, the
// nodes' latest usage, and each workload's latest usage per pod. Safe
// for concurrent use.
type Profiles struct {
	cfg       Config
	mu        sync.Mutex
	nodes     map[string]*nodeProfile
	workloads map[report.Workload]*workloadProfile
	// open sums each workload's usage per window over the nodes.
	open map[int64]map[report.Workload]*windowSum
	// loads is the latest placement-load snapshot (see Loads), read
	// without the lock.
	loads   atomic.Pointer[loadSnapshot]
	loadsAt time.Time
}

type nodeProfile struct {
	ring     Ring
	latest   report.NodeUsage
	lastSeen time.Time
	// placed is what the latest report ran: per workload its pods and
	// their usage on this node; placedEnd is that report's window end.
	placed    []placement
	placedEnd time.Time
}

type workloadProfile struct {
	ring Ring
	// perPodCPU and perPodMem: the last closed window's usage per pod.
	perPodCPU, perPodMem float32
	lastWindow           time.Time
	// podPeak: per day the highest usage of one pod (see windowSum).
	podPeak peakRing
}

type windowSum struct {
	cpu, mem float64
	pods     int
	// podCPU and podMem: the highest usage per pod on any one node.
	podCPU, podMem float64
}

// New returns empty profiles.
func New(cfg Config) *Profiles {
	report.FillTiming(&cfg.Period, &cfg.Grace, &cfg.StaleAfter)
	cfg.HotWatermark = cmp.Or(cfg.HotWatermark, 0.8)
	cfg.LoadInterval = cmp.Or(cfg.LoadInterval, time.Minute)
	return &Profiles{cfg: cfg, nodes: map[string]*nodeProfile{}, workloads: map[report.Workload]*workloadProfile{}, open: map[int64]map[report.Workload]*windowSum{}}
}

// Observe records an accepted report received at now.
func (p *Profiles) Observe(d *report.Decoded, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.nodes[d.Node]
	if n == nil {
		n = &nodeProfile{}
		p.nodes[d.Node] = n
	}
	n.ring.Add(d.WindowEnd.Add(-time.Nanosecond), d.Usage.CPUUsage, d.Usage.MemoryUsage)
	n.latest, n.lastSeen = d.Usage, now
	w := d.WindowEnd.UnixNano()
	win := p.open[w]
	if win == nil {
		win = map[report.Workload]*windowSum{}
		p.open[w] = win
	}
	// Per workload on this node: its pods (the most of any of its
	// containers) and its usage (the sum over them).
	n.placed = n.placed[:0]
	at := map[report.Workload]int{}
	for _, c := range d.Containers {
		s := win[c.Workload]
		if s == nil {
			s = &windowSum{}
			win[c.Workload] = s
		}
		s.cpu += c.UsageCPU
		s.mem += c.UsageMemory
		i, ok := at[c.Workload]
		if !ok {
			i = len(n.placed)
			at[c.Workload] = i
			n.placed = append(n.placed, placement{wl: c.Workload})
		}
		pl := &n.placed[i]
		pl.pods = max(pl.pods, int32(c.Pods))
		pl.cpu += float32(c.UsageCPU)
		pl.mem += float32(c.UsageMemory)
	}
	n.placedEnd = d.WindowEnd
	for _, pl := range n.placed {
		s := win[pl.wl]
		s.pods += int(pl.pods)
		if pl.pods > 0 {
			s.podCPU = max(s.podCPU, float64(pl.cpu)/float64(pl.pods))
			s.podMem = max(s.podMem, float64(pl.mem)/float64(pl.pods))
		}
	}
}

// Close adds every window that ended Grace before now to the workload
// profiles (a report arriving later for it is left out of them), and
// recomputes the placement loads when LoadInterval has passed.
func (p *Profiles) Close(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.refreshLoadsLocked(now, false)
	cutoff := now.Add(-p.cfg.Grace).UnixNano()
	var due []int64
	for w := range p.open {
		if w <= cutoff {
			due = append(due, w)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i] < due[j] })
	for _, w := range due {
		at := time.Unix(0, w).UTC()
		for wl, s := range p.open[w] {
			wp := p.workloads[wl]
			if wp == nil {
				wp = &workloadProfile{}
				p.workloads[wl] = wp
			}
			wp.ring.Add(at.Add(-time.Nanosecond), s.cpu, s.mem)
			wp.podPeak.add(at.Add(-time.Nanosecond), s.podCPU, s.podMem)
			if s.pods > 0 && !at.Before(wp.lastWindow) {
				wp.perPodCPU, wp.perPodMem, wp.lastWindow = float32(s.cpu/float64(s.pods)), float32(s.mem/float64(s.pods)), at
			}
		}
		delete(p.open, w)
	}
}

// NodeInfo is a node's latest usage and profile.
type NodeInfo struct {
	Name    string           `json:"name"`
	Usage   report.NodeUsage `json:"usage"`
	Profile Summary          `json:"profile"`
	// CPUFraction and MemoryFraction are usage / allocatable.
	CPUFraction    float64   `json:"cpuFraction"`
	MemoryFraction float64   `json:"memoryFraction"`
	Hot            bool      `json:"hot"`
	Stale          bool      `json:"stale"`
	LastSeen       time.Time `json:"lastSeen"`
}

func frac(used, alloc float64) float64 {
	if alloc <= 0 {
		return 0
	}
	return used / alloc
}

func (p *Profiles) nodeInfo(name string, n *nodeProfile, now time.Time) NodeInfo {
	i := NodeInfo{Name: name, Usage: n.latest, Profile: n.ring.Summary(now), LastSeen: n.lastSeen,
		CPUFraction: frac(n.latest.CPUUsage, n.latest.CPUAllocatable), MemoryFraction: frac(n.latest.MemoryUsage, n.latest.MemoryAllocatable)}
	i.Stale = report.Stale(now, n.lastSeen, p.cfg.StaleAfter)
	u := Load{CPUUsage: n.latest.CPUUsage, CPUAllocatable: n.latest.CPUAllocatable,
		MemoryUsage: n.latest.MemoryUsage, MemoryAllocatable: n.latest.MemoryAllocatable}
	i.Hot = !i.Stale && u.Hot(p.cfg.HotWatermark)
	return i
}

// Node returns one node's info.
func (p *Profiles) Node(name string, now time.Time) (NodeInfo, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.nodes[name]
	if !ok {
		return NodeInfo{}, false
	}
	return p.nodeInfo(name, n, now), true
}

// Nodes returns every node's info, sorted by name.
func (p *Profiles) Nodes(now time.Time) []NodeInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]NodeInfo, 0, len(p.nodes))
	for name, n := range p.nodes {
		out = append(out, p.nodeInfo(name, n, now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Hot returns the hot nodes (real usage above the watermark), hottest
// first.
func (p *Profiles) Hot(now time.Time) []NodeInfo {
	var hot []NodeInfo
	for _, n := range p.Nodes(now) {
		if n.Hot {
			hot = append(hot, n)
		}
	}
	sort.Slice(hot, func(i, j int) bool {
		return max(hot[i].CPUFraction, hot[i].MemoryFraction) > max(hot[j].CPUFraction, hot[j].MemoryFraction)
	})
	return hot
}

// Watermark returns the hot-node watermark.
func (p *Profiles) Watermark() float64 { return p.cfg.HotWatermark }

// WorkloadInfo is a workload's profile and latest usage per pod.
type WorkloadInfo struct {
	Workload  report.Workload `json:"workload"`
	Profile   Summary         `json:"profile"`
	PerPodCPU float64         `json:"perPodCPU"`
	PerPodMem float64         `json:"perPodMemory"`
	// PeakPodCPU and PeakPodMem are the 7-day maximum usage of one pod:
	// of each window, the highest usage per pod on any node.
	PeakPodCPU float64 `json:"peakPodCPU"`
	PeakPodMem float64 `json:"peakPodMemory"`
}

func workloadInfo(w report.Workload, wp *workloadProfile, now time.Time) WorkloadInfo {
	i := WorkloadInfo{Workload: w, Profile: wp.ring.Summary(now), PerPodCPU: float64(wp.perPodCPU), PerPodMem: float64(wp.perPodMem)}
	i.PeakPodCPU, i.PeakPodMem = wp.podPeak.max(now)
	return i
}

// Workload returns one workload's info.
func (p *Profiles) Workload(w report.Workload, now time.Time) (WorkloadInfo, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	wp, ok := p.workloads[w]
	if !ok {
		return WorkloadInfo{}, false
	}
	return workloadInfo(w, wp, now), true
}

// Workloads returns every workload's info, sorted.
func (p *Profiles) Workloads(now time.Time) []WorkloadInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]WorkloadInfo, 0, len(p.workloads))
	for w, wp := range p.workloads {
		out = append(out, workloadInfo(w, wp, now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Workload.String() < out[j].Workload.String() })
	return out
}

// Forget drops a workload (gone from the cluster) and nodes not seen
// since cutoff.
func (p *Profiles) Forget(workloads []report.Workload, cutoff time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range workloads {
		delete(p.workloads, w)
	}
	for name, n := range p.nodes {
		if n.lastSeen.Before(cutoff) {
			delete(p.nodes, name)
		}
	}
}
