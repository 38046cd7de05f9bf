package analysis

import (
	"cmp"
	"sort"
	"sync"
	"time"

	"github.com/cgpilot/cgpilot/api/report"
)

// Config configures an Analysis.
type Config struct {
	// Period is the report grid; StaleAfter when a silent node counts as
	// not reporting (default 3 periods) and Forget when it is dropped
	// (default 24 h). Containers not reported for Forget are dropped too.
	Period, StaleAfter, Forget time.Duration
	// History bounds the adjustment and OOM history and the anomaly
	// lists (default 2000 each).
	History int
	// Step is the saturation series' resolution (default 5 min, kept for
	// Points steps: default 288, a day).
	Step   time.Duration
	Points int
	// Recent is how far back failed writes and sampling gaps count as
	// current anomalies (default 1 h; the history keeps them longer).
	Recent time.Duration
}

// Analysis computes the effect of right-sizing from the reports: coverage,
// requests before and after, the capacity released, saturation over time,
// the history of adjustments and OOM bumps, and anomalies. Each node's
// latest report stands for the node (sums are over nodes reporting), each
// workload-container's latest description for the container. Safe for
// concurrent use.
type Analysis struct {
	cfg        Config
	mu         sync.Mutex
	nodes      map[string]*node
	containers map[report.Key]*container
	history    ring[Event]
	failed     ring[Event]
	gaps       ring[Gap]
	series     map[string]*series // by namespace; "" is the cluster
	nextPoint  time.Time
	totals     Totals
}

// Totals are counters since start.
type Totals struct {
	Adjustments, FailedWrites, OOMKills, Gaps uint64
}

type node struct {
	lastSeen, lastWindow time.Time
	missedRounds         int
	ns                   map[string]*Sums
}

type container struct {
	policy, mode, reason string
	adjustable           bool
	conflicts            []string
	pods                 int
	// unadmitted by node (the latest report of each).
	unadmitted map[string]int
	lastSeen   time.Time
}

// Sums are requests and usage of a set of pod-containers: Before the
// requests the workloads declared, After those in force, Usage the real
// mean usage (cores and bytes).
type Sums struct {
	Containers                             int     `json:"containers"`
	BeforeCPU, AfterCPU, UsageCPU          float64 `json:"-"`
	BeforeMemory, AfterMemory, UsageMemory float64 `json:"-"`
}

func (s *Sums) add(o *Sums) {
	s.Containers += o.Containers
	s.BeforeCPU += o.BeforeCPU
	s.AfterCPU += o.AfterCPU
	s.UsageCPU += o.UsageCPU
	s.BeforeMemory += o.BeforeMemory
	s.AfterMemory += o.AfterMemory
	s.UsageMemory += o.UsageMemory
}

// Event is one adjustment, failed write or OOM kill.
type Event struct {
	Time     time.Time  `json:"time"`
	Node     string     `json:"node"`
	Key      report.Key `json:"key"`
	Pod      string     `json:"pod"`
	Kind     string     `json:"kind"` // adjustment, oom
	Resource string     `json:"resource,omitempty"`
	From     float64    `json:"from,omitempty"`
	To       float64    `json:"to,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	Error    string     `json:"error,omitempty"`
	Usage    float64    `json:"usageBytes,omitempty"`
}

// Gap is a sampling gap of a node: rounds missed within a window, or
// windows with no report between two reports.
type Gap struct {
	Time          time.Time `json:"time"`
	Node          string    `json:"node"`
	MissedRounds  int       `json:"missedRounds,omitempty"`
	MissedWindows int       `json:"missedWindows,omitempty"`
}

// New returns an empty Analysis.
func New(cfg Config) *Analysis {
	report.FillTiming(&cfg.Period, nil, &cfg.StaleAfter)
	cfg.Forget = cmp.Or(cfg.Forget, 24*time.Hour)
	cfg.History = cmp.Or(cfg.History, 2000)
	cfg.Step = cmp.Or(cfg.Step, 5*time.Minute)
	cfg.Points = cmp.Or(cfg.Points, 288)
	cfg.Recent = cmp.Or(cfg.Recent, time.Hour)
	return &Analysis{cfg: cfg, nodes: map[string]*node{}, containers: map[report.Key]*container{},
		history: newRing[Event](cfg.History), failed: newRing[Event](cfg.History), gaps: newRing[Gap](cfg.History),
		series: map[string]*series{}}
}

// Observe records an accepted report received at now.
func (a *Analysis) Observe(d *report.Decoded, now time.Time) {
	ns := map[string]*Sums{}
	for _, c := range d.Containers {
		s := ns[c.Namespace]
		if s == nil {
			s = &Sums{}
			ns[c.Namespace] = s
		}
		p := float64(c.Pods)
		before := c.Original
		if before == (report.Resources{}) {
			before = c.Current
		}
		s.Containers += c.Pods
		s.BeforeCPU += p * before.CPURequest
		s.AfterCPU += p * c.Current.CPURequest
		s.BeforeMemory += p * before.MemoryRequest
		s.AfterMemory += p * c.Current.MemoryRequest
		s.UsageCPU += c.UsageCPU
		s.UsageMemory += c.UsageMemory
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.nodes[d.Node]
	if n == nil {
		n = &node{}
		a.nodes[d.Node] = n
	}
	if !n.lastWindow.IsZero() && d.WindowEnd.After(n.lastWindow) {
		if missed := int(d.WindowEnd.Sub(n.lastWindow)/a.cfg.Period) - d.Windows; missed > 0 {
			a.gaps.add(Gap{Time: d.WindowEnd, Node: d.Node, MissedWindows: missed})
			a.totals.Gaps++
		}
	}
	if d.MissedRounds > 0 {
		a.gaps.add(Gap{Time: d.WindowEnd, Node: d.Node, MissedRounds: d.MissedRounds})
		a.totals.Gaps++
	}
	if d.WindowEnd.After(n.lastWindow) {
		n.lastWindow, n.ns, n.missedRounds = d.WindowEnd, ns, d.MissedRounds
	}
	n.lastSeen = now
	for _, c := range d.Containers {
		ci := a.containers[c.Key]
		if ci == nil {
			ci = &container{}
			a.containers[c.Key] = ci
		}
		un := ci.unadmitted
		*ci = container{policy: c.Policy, mode: c.Mode, reason: c.Reason, adjustable: c.Adjustable, conflicts: c.Conflicts, pods: c.Pods, lastSeen: now, unadmitted: un}
		switch {
		case c.Unadmitted > 0:
			if ci.unadmitted == nil {
				ci.unadmitted = map[string]int{}
			}
			ci.unadmitted[d.Node] = c.Unadmitted
		case ci.unadmitted != nil:
			delete(ci.unadmitted, d.Node)
		}
	}
	for _, adj := range d.Adjustments {
		e := Event{Time: adj.Time, Node: d.Node, Key: adj.Key, Pod: adj.Pod, Kind: "adjustment", Resource: adj.Resource,
			From: adj.From, To: adj.To, Reason: adj.Reason, Error: adj.Error}
		if adj.Error != "" {
			a.failed.add(e)
			a.totals.FailedWrites++
			continue
		}
		a.history.add(e)
		a.totals.Adjustments++
	}
	for _, k := range d.OOMKills {
		a.history.add(Event{Time: k.Time, Node: d.Node, Key: k.Key, Pod: k.Pod, Kind: "oom", Resource: report.ResourceMemory,
			From: k.LimitBytes, Usage: k.UsageBytes, Reason: report.ReasonOOM})
		a.totals.OOMKills++
	}
}

// Tick appends a saturation point per Step and forgets nodes and
// containers silent for Forget. Call it every few seconds.
func (a *Analysis) Tick(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, n := range a.nodes {
		if now.Sub(n.lastSeen) > a.cfg.Forget {
			delete(a.nodes, name)
		}
	}
	for k, c := range a.containers {
		if now.Sub(c.lastSeen) > a.cfg.Forget {
			delete(a.containers, k)
		}
	}
	if now.Before(a.nextPoint) {
		return
	}
	a.nextPoint = now.Truncate(a.cfg.Step).Add(a.cfg.Step)
	cluster, byNS := a.sumsLocked(now)
	a.point("", now, cluster)
	for ns, s := range byNS {
		a.point(ns, now, s)
	}
}

func (a *Analysis) point(ns string, now time.Time, s *Sums) {
	sr := a.series[ns]
	if sr == nil {
		sr = &series{pts: newRing[Point](a.cfg.Points)}
		a.series[ns] = sr
	}
	sr.pts.add(Point{Time: now, CPU: ratio(s.UsageCPU, s.AfterCPU), Memory: ratio(s.UsageMemory, s.AfterMemory),
		ReleasedCPU: s.BeforeCPU - s.AfterCPU, ReleasedMemory: s.BeforeMemory - s.AfterMemory})
}

func ratio(used, req float64) float64 {
	if req <= 0 {
		return 0
	}
	return used / req
}

// sumsLocked adds the latest report of every reporting node, per
// namespace and for the cluster.
func (a *Analysis) sumsLocked(now time.Time) (*Sums, map[string]*Sums) {
	cluster, byNS := &Sums{}, map[string]*Sums{}
	for _, n := range a.nodes {
		if report.Stale(now, n.lastSeen, a.cfg.StaleAfter) {
			continue
		}
		for ns, s := range n.ns {
			t := byNS[ns]
			if t == nil {
				t = &Sums{}
				byNS[ns] = t
			}
			t.add(s)
			cluster.add(s)
		}
	}
	return cluster, byNS
}

// Point is one saturation sample: usage / requests in force, and the
// capacity released then.
type Point struct {
	Time           time.Time `json:"time"`
	CPU            float64   `json:"cpu"`
	Memory         float64   `json:"memory"`
	ReleasedCPU    float64   `json:"releasedCPU"`
	ReleasedMemory float64   `json:"releasedMemory"`
}

type series struct{ pts ring[Point] }

// ring is a bounded FIFO.
type ring[T any] struct {
	buf   []T
	next  int
	full  bool
	limit int
}

func newRing[T any](n int) ring[T] { return ring[T]{limit: n} }

func (r *ring[T]) add(v T) {
	if len(r.buf) < r.limit {
		r.buf = append(r.buf, v)
		return
	}
	r.buf[r.next] = v
	r.next = (r.next + 1) % r.limit
	r.full = true
}

// items returns the elements oldest first.
func (r *ring[T]) items() []T {
	if !r.full {
		return append([]T(nil), r.buf...)
	}
	return append(append([]T(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}

// Coverage is how much of the cluster right-sizing covers, counted in
// workloads and in workload-containers (each container of a workload
// once, whatever its replicas).
type Coverage struct {
	Workloads  int `json:"workloads"`
	Containers int `json:"containers"`
	// UnderPolicy: covered by exactly one RightsizePolicy, by mode.
	UnderPolicy int            `json:"underPolicy"`
	ByMode      map[string]int `json:"byMode"`
	NoPolicy    int            `json:"noPolicy"`
	// Adjustable: under a policy and adjustable; NotAdjustable by reason.
	Adjustable    int            `json:"adjustable"`
	NotAdjustable map[string]int `json:"notAdjustable"`
	// MultiplePolicies: matched by more than one policy (none applies).
	MultiplePolicies int `json:"multiplePolicies"`
	// WorkloadsUnderPolicy counts workloads with at least one covered container.
	WorkloadsUnderPolicy int `json:"workloadsUnderPolicy"`
}

// Coverage returns the coverage now.
func (a *Analysis) Coverage() Coverage { return a.CoverageIn("") }

// CoverageIn returns the coverage of one namespace ("": the cluster).
func (a *Analysis) CoverageIn(ns string) Coverage {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := Coverage{ByMode: map[string]int{}, NotAdjustable: map[string]int{}}
	wl := map[report.Workload]bool{}
	for k, ci := range a.containers {
		if ns != "" && k.Namespace != ns {
			continue
		}
		c.Containers++
		covered := wl[k.Workload]
		switch {
		case len(ci.conflicts) > 1:
			c.MultiplePolicies++
			c.NotAdjustable["MatchedByTwoPolicies"]++
		case ci.policy == "":
			c.NoPolicy++
		default:
			covered = true
			c.UnderPolicy++
			c.ByMode[ci.mode]++
			if ci.adjustable {
				c.Adjustable++
			} else {
				reason := ci.reason
				if reason == "" {
					reason = "Unknown"
				}
				c.NotAdjustable[reason]++
			}
		}
		wl[k.Workload] = covered
	}
	c.Workloads = len(wl)
	for _, cov := range wl {
		if cov {
			c.WorkloadsUnderPolicy++
		}
	}
	return c
}

// Capacity is requests before and after right-sizing and what was
// released (before − after), with real usage, in cores and bytes.
type Capacity struct {
	Namespace      string  `json:"namespace"`
	Containers     int     `json:"podContainers"`
	BeforeCPU      float64 `json:"beforeCPU"`
	AfterCPU       float64 `json:"afterCPU"`
	ReleasedCPU    float64 `json:"releasedCPU"`
	UsageCPU       float64 `json:"usageCPU"`
	BeforeMemory   float64 `json:"beforeMemory"`
	AfterMemory    float64 `json:"afterMemory"`
	ReleasedMemory float64 `json:"releasedMemory"`
	UsageMemory    float64 `json:"usageMemory"`
}

func capacityOf(ns string, s *Sums) Capacity {
	return Capacity{Namespace: ns, Containers: s.Containers, BeforeCPU: s.BeforeCPU, AfterCPU: s.AfterCPU, ReleasedCPU: s.BeforeCPU - s.AfterCPU,
		UsageCPU: s.UsageCPU, BeforeMemory: s.BeforeMemory, AfterMemory: s.AfterMemory, ReleasedMemory: s.BeforeMemory - s.AfterMemory, UsageMemory: s.UsageMemory}
}

// Capacity returns the cluster's (Namespace "") and each namespace's
// capacity, namespaces by CPU released, most first.
func (a *Analysis) Capacity(now time.Time) (Capacity, []Capacity) {
	a.mu.Lock()
	cluster, byNS := a.sumsLocked(now)
	a.mu.Unlock()
	out := make([]Capacity, 0, len(byNS))
	for ns, s := range byNS {
		out = append(out, capacityOf(ns, s))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ReleasedCPU != out[j].ReleasedCPU {
			return out[i].ReleasedCPU > out[j].ReleasedCPU
		}
		return out[i].Namespace < out[j].Namespace
	})
	return capacityOf("", cluster), out
}

// Saturation returns the saturation series of a namespace ("" for the
// cluster), oldest first.
func (a *Analysis) Saturation(ns string) []Point {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.series[ns]; s != nil {
		return s.pts.items()
	}
	return nil
}

// History returns the adjustments and OOM kills, newest first, at most limit.
func (a *Analysis) History(limit int) []Event { return a.HistoryIn("", limit) }

// HistoryIn is History of one namespace ("": the cluster).
func (a *Analysis) HistoryIn(ns string, limit int) []Event {
	a.mu.Lock()
	items := a.history.items()
	a.mu.Unlock()
	return newestFirst(inNamespace(items, ns), limit)
}

func inNamespace(events []Event, ns string) []Event {
	if ns == "" {
		return events
	}
	out := events[:0]
	for _, e := range events {
		if e.Key.Namespace == ns {
			out = append(out, e)
		}
	}
	return out
}

func newestFirst[T any](items []T, limit int) []T {
	if items == nil {
		items = []T{}
	}
	for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
		items[i], items[j] = items[j], items[i]
	}
	if limit > 0 && len(items) > limit {
		items = items[:limit]
	}
	return items
}

// Anomalies are what needs a look: failed writes, containers under
// several policies, nodes not reporting, sampling gaps.
type Anomalies struct {
	FailedWrites     []Event      `json:"failedWrites"`
	MultiplePolicies []Conflict   `json:"multiplePolicies"`
	NodesNotReport   []NodeSilent `json:"nodesNotReporting"`
	SamplingGaps     []Gap        `json:"samplingGaps"`
	// Unadmitted: pods under an Auto policy admitted without the webhook.
	Unadmitted []Unadmitted `json:"unadmitted"`
}

// Unadmitted is a workload-container with pods the webhook did not see.
type Unadmitted struct {
	Key    report.Key `json:"key"`
	Policy string     `json:"policy"`
	Pods   int        `json:"pods"`
}

// Conflict is a workload-container matched by several policies.
type Conflict struct {
	Key      report.Key `json:"key"`
	Policies []string   `json:"policies"`
}

// NodeSilent is a node whose last report is older than StaleAfter.
type NodeSilent struct {
	Node     string    `json:"node"`
	LastSeen time.Time `json:"lastSeen"`
}

// Anomalies returns the current anomalies (failed writes and sampling
// gaps of the last Recent), each list newest first and at most limit long
// (limit 0: all).
func (a *Analysis) Anomalies(now time.Time, limit int) Anomalies {
	return a.AnomaliesIn(now, "", limit)
}

// AnomaliesIn is Anomalies of one namespace ("": the cluster); a
// namespace's have no node anomalies (nodes are the cluster's).
func (a *Analysis) AnomaliesIn(now time.Time, ns string, limit int) Anomalies {
	a.mu.Lock()
	defer a.mu.Unlock()
	since := now.Add(-a.cfg.Recent)
	an := Anomalies{
		FailedWrites: newestFirst(inNamespace(recent(a.failed.items(), since, func(e Event) time.Time { return e.Time }), ns), limit),
		SamplingGaps: []Gap{},
	}
	if ns == "" {
		an.SamplingGaps = newestFirst(recent(a.gaps.items(), since, func(g Gap) time.Time { return g.Time }), limit)
	}
	for k, c := range a.containers {
		if ns != "" && k.Namespace != ns {
			continue
		}
		if len(c.conflicts) > 1 {
			an.MultiplePolicies = append(an.MultiplePolicies, Conflict{Key: k, Policies: c.conflicts})
		}
		if n := sum(c.unadmitted); n > 0 {
			an.Unadmitted = append(an.Unadmitted, Unadmitted{Key: k, Policy: c.policy, Pods: n})
		}
	}
	sort.Slice(an.Unadmitted, func(i, j int) bool { return an.Unadmitted[i].Key.String() < an.Unadmitted[j].Key.String() })
	sort.Slice(an.MultiplePolicies, func(i, j int) bool { return an.MultiplePolicies[i].Key.String() < an.MultiplePolicies[j].Key.String() })
	for name, n := range a.nodes {
		if ns == "" && report.Stale(now, n.lastSeen, a.cfg.StaleAfter) {
			an.NodesNotReport = append(an.NodesNotReport, NodeSilent{Node: name, LastSeen: n.lastSeen})
		}
	}
	sort.Slice(an.NodesNotReport, func(i, j int) bool { return an.NodesNotReport[i].LastSeen.Before(an.NodesNotReport[j].LastSeen) })
	if limit > 0 {
		an.Unadmitted = an.Unadmitted[:min(limit, len(an.Unadmitted))]
		an.MultiplePolicies = an.MultiplePolicies[:min(limit, len(an.MultiplePolicies))]
		an.NodesNotReport = an.NodesNotReport[:min(limit, len(an.NodesNotReport))]
	}
	return an
}

// Totals returns the counters since start.
func (a *Analysis) Totals() Totals {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.totals
}

// Namespaces lists the namespaces with a saturation series.
func (a *Analysis) Namespaces() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.series))
	for ns := range a.series {
		if ns != "" {
			out = append(out, ns)
		}
	}
	sort.Strings(out)
	return out
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func recent[T any](items []T, since time.Time, at func(T) time.Time) []T {
	out := items[:0]
	for _, x := range items {
		if !at(x).Before(since) {
			out = append(out, x)
		}
	}
	return out
}
