package reschedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/internal/loop"
)

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("reschedule: invalid configuration")

// Queue reasons.
const (
	ReasonPeak      = "peak"      // the sum of the pods' 7-day peaks is above the watermark
	ReasonHot       = "hot"       // real use above the hot watermark
	ReasonEmergency = "emergency" // real CPU use above the emergency watermark
)

// Config configures a Rescheduler.
type Config struct {
	// Rule is the placement rule; HotWatermark the profiles' hot-node
	// threshold (share of allocatable in real use).
	Rule         profile.Rule
	HotWatermark float64
	// Emergency is the share of allocatable CPU in real use above which a
	// node is queued at once, whatever the hour (default 0.9).
	Emergency float64
	// Period is the report grid (a report covers the period before its
	// window end).
	Period time.Duration
	// QueueInterval between queue passes (default 10 min); CheckInterval
	// between passes that follow admitted moves (default 1 min);
	// MoveTimeout is how long an evicted pod's replacement may take to be
	// placed before the move counts as unresolved (default 10 min).
	QueueInterval, CheckInterval, MoveTimeout time.Duration
	// Hours, when set, are the hours (UTC) when the queue pass may queue
	// nodes; emergencies are queued at any hour.
	Hours Hours
	// Caps per sliding hour: moves from one node, of one workload, and in
	// all (defaults 2, 1, 30; a negative cap allows none).
	PerNode, PerWorkload, PerHour int
	// DeschedulerUser is the username whose evictions Admit judges (the
	// descheduler's service account); others are allowed untouched.
	DeschedulerUser string
	// MaxRecords bounds the move records kept (default 20,000); records
	// older than 8 days are dropped.
	MaxRecords int
}

func (c *Config) defaults() error {
	c.Emergency = cmp.Or(c.Emergency, 0.9)
	c.QueueInterval = cmp.Or(c.QueueInterval, 10*time.Minute)
	c.CheckInterval = cmp.Or(c.CheckInterval, time.Minute)
	c.MoveTimeout = cmp.Or(c.MoveTimeout, 10*time.Minute)
	c.Period = cmp.Or(c.Period, report.DefaultPeriod)
	c.PerNode = cmp.Or(c.PerNode, 2)
	c.PerWorkload = cmp.Or(c.PerWorkload, 1)
	c.PerHour = cmp.Or(c.PerHour, 30)
	c.MaxRecords = cmp.Or(c.MaxRecords, 20000)
	if err := c.Rule.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := profile.ValidateHotWatermark(c.HotWatermark); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if !(c.Emergency > c.HotWatermark && c.Emergency <= 1) {
		return fmt.Errorf("%w: emergency watermark %v: want above the hot watermark %v and at most 1", ErrConfig, c.Emergency, c.HotWatermark)
	}
	if c.QueueInterval < time.Second || c.CheckInterval < time.Second || c.MoveTimeout < c.CheckInterval {
		return fmt.Errorf("%w: intervals: queue %v and check %v at least 1s, move timeout %v at least the check interval", ErrConfig,
			c.QueueInterval, c.CheckInterval, c.MoveTimeout)
	}
	if c.DeschedulerUser == "" {
		return fmt.Errorf("%w: the descheduler's username is empty", ErrConfig)
	}
	return nil
}

// Source is what the rescheduler reads of the profiles
// (profile.Profiles).
type Source interface {
	Loads() []profile.Load
	NodeLoad(name string) (profile.Load, bool)
	RefreshLoads(now time.Time)
	Workload(w report.Workload, now time.Time) (profile.WorkloadInfo, bool)
	Placed(node string, w report.Workload) (pods int, cpu, mem float64, ok bool)
	StaleAfter() time.Duration
}

// Cluster is what the rescheduler reads of the API server (package kube).
type Cluster interface {
	// Pod returns the pod, nil when it does not exist.
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// BlockingPDB names a PodDisruptionBudget covering pod that allows no
	// disruption now ("" when none).
	BlockingPDB(ctx context.Context, pod *corev1.Pod) (string, error)
	// Replacement returns the node of the earliest pod of the controller
	// owner created after after and already placed ("" when none yet).
	Replacement(ctx context.Context, namespace string, owner types.UID, selector map[string]string, after time.Time) (string, error)
	// NodeNames lists the cluster's nodes.
	NodeNames(ctx context.Context) ([]string, error)
}

// Entry is a queued node.
type Entry struct {
	Node   string    `json:"node"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	// CPU and Memory are what is left to move (cores, bytes).
	CPU    float64 `json:"cpu"`
	Memory float64 `json:"memory"`
	// Ratio is the node's ratio when queued: placement ratio (peak), real
	// use over the hot watermark (hot, emergency).
	Ratio float64 `json:"ratio"`
	// Moves admitted since queued.
	Moves int `json:"moves"`
}

func (e *Entry) open() bool { return e.CPU > 1e-9 || e.Memory > 1e-9 }

// Rescheduler is the queue, the caps and the move records (see the
// package doc). Safe for concurrent use.
type Rescheduler struct {
	cfg     Config
	src     Source
	cluster Cluster
	log     logr.Logger
	// Now is the clock (the aggregator's).
	Now func() time.Time

	mu        sync.Mutex
	queue     map[string]*Entry
	moves     []*Move
	nextID    uint64
	nodes     []string // the cluster's nodes, as last listed
	lastQueue time.Time
	lastCheck time.Time
	lastDay   string

	m metrics
}

type metrics struct {
	evictions *prometheus.CounterVec
	outcomes  *prometheus.CounterVec
	queued    *prometheus.GaugeVec
	query     prometheus.Histogram
	passes    *prometheus.CounterVec
}

// New returns a Rescheduler registered with reg.
func New(cfg Config, src Source, cluster Cluster, log logr.Logger, reg prometheus.Registerer) (*Rescheduler, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	r := &Rescheduler{cfg: cfg, src: src, cluster: cluster, log: log, Now: time.Now, queue: map[string]*Entry{},
		m: metrics{
			evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_reschedule_evictions_total",
				Help: "Evictions by the descheduler seen by the eviction webhook, by result (allowed, denied) and reason (queued, not_queued, or why denied)."}, []string{"result", "reason"}),
			outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_reschedule_moves_total",
				Help: "Admitted moves by outcome: moved (placed on another node), failed (not evicted, or placed back), unresolved (no replacement placed in time)."}, []string{"outcome"}),
			queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cgpilot_aggregator_reschedule_queued_nodes",
				Help: "Nodes queued for rescheduling by reason: peak, hot, emergency."}, []string{"reason"}),
			query: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cgpilot_aggregator_reschedule_query_seconds",
				Help: "Time to answer the descheduler's utilization query.", Buckets: []float64{.0005, .001, .005, .01, .05, .1, .5}}),
			passes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_reschedule_passes_total",
				Help: "Rescheduler passes by kind: queue, check, emergency (a node queued at once)."}, []string{"kind"}),
		}}
	for _, o := range []string{OutcomeMoved, OutcomeFailed, OutcomeUnresolved} {
		r.m.outcomes.WithLabelValues(o)
	}
	for _, q := range []string{ReasonPeak, ReasonHot, ReasonEmergency} {
		r.m.queued.WithLabelValues(q)
	}
	if reg != nil {
		reg.MustRegister(r.m.evictions, r.m.outcomes, r.m.queued, r.m.query, r.m.passes)
	}
	return r, nil
}

// Config returns the configuration with defaults filled in.
func (r *Rescheduler) Config() Config { return r.cfg }

func (r *Rescheduler) now() time.Time { return r.Now() }

// Run runs the passes until ctx ends: the check pass every
// CheckInterval, the queue pass every QueueInterval (the first one a
// CheckInterval after the start, once the loads are computed), the node
// list refreshed with the check pass.
func (r *Rescheduler) Run(ctx context.Context) {
	tick := min(r.cfg.CheckInterval, 5*time.Second)
	start := r.now()
	loop.Every(ctx, tick, func() { r.step(ctx, start) })
}

// step runs the passes that are due; a panic in one is counted and logged,
// and the loop goes on.
func (r *Rescheduler) step(ctx context.Context, start time.Time) {
	defer func() {
		if p := recover(); p != nil {
			r.m.passes.WithLabelValues("panic").Inc()
			r.log.Error(fmt.Errorf("%v", p), "rescheduler pass panicked; continuing")
		}
	}()
	now := r.now()
	r.mu.Lock()
	checkDue := now.Sub(r.lastCheck) >= r.cfg.CheckInterval
	queueDue := now.Sub(start) >= r.cfg.CheckInterval && now.Sub(r.lastQueue) >= r.cfg.QueueInterval
	r.mu.Unlock()
	if checkDue {
		r.RefreshNodes(ctx)
		r.Check(ctx)
	}
	if queueDue {
		r.QueuePass(now)
	}
	r.rollDay(now)
}

// RefreshNodes lists the cluster's nodes again: each gets a value in the
// query, the neutral one when it has no fresh load (the descheduler
// refuses a query that misses a node it considers).
func (r *Rescheduler) RefreshNodes(ctx context.Context) {
	names, err := r.cluster.NodeNames(ctx)
	if err != nil {
		r.log.V(1).Info("listing the nodes failed; keeping the last list", "err", err.Error())
		return
	}
	r.mu.Lock()
	r.nodes = names
	r.mu.Unlock()
}

// QueuePass queues the nodes that break the rule or are hot (within
// Hours), each with what must leave it, less what admitted moves have
// taken off since its latest report; it drops the others but the
// emergencies.
func (r *Rescheduler) QueuePass(now time.Time) {
	r.src.RefreshLoads(now)
	loads := r.src.Loads()
	stale := r.src.StaleAfter()
	inHours := r.cfg.Hours.Contains(now)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastQueue = now
	r.m.passes.WithLabelValues("queue").Inc()
	seen := map[string]bool{}
	for _, l := range loads {
		seen[l.Node] = true
		old := r.queue[l.Node]
		// An open emergency: its reports decide (Observe). One whose
		// excess has all been admitted is judged again like any node:
		// moves may leave it between the hot and the emergency
		// watermarks, where Observe neither queues nor drops it.
		if old != nil && old.Reason == ReasonEmergency && old.open() && l.Fresh(now, stale) {
			continue
		}
		if !inHours || !l.Fresh(now, stale) {
			delete(r.queue, l.Node)
			continue
		}
		cpu, mem, reason, ratio := r.excess(l)
		if reason == "" {
			delete(r.queue, l.Node)
			continue
		}
		// What admitted moves took off the node since the window its
		// latest report covers began is not in that report yet.
		icpu, imem := r.inflightLocked(l.Node, l.WindowEnd.Add(-r.cfg.Period), reason)
		e := &Entry{Node: l.Node, Reason: reason, Since: now, CPU: cpu - icpu, Memory: mem - imem, Ratio: ratio}
		if old != nil && old.Reason == reason {
			e.Since, e.Moves = old.Since, old.Moves
		}
		if !e.open() {
			delete(r.queue, l.Node)
			continue
		}
		r.queue[l.Node] = e
	}
	for n, e := range r.queue {
		if !seen[n] && e.Reason != ReasonEmergency {
			delete(r.queue, n)
		}
	}
	r.gaugesLocked()
}

// excess is what must leave a node and why: the rule first, then the hot
// watermark.
func (r *Rescheduler) excess(l profile.Load) (cpu, mem float64, reason string, ratio float64) {
	if ratio = r.cfg.Rule.Ratio(l); ratio > 1 {
		cpu, mem = r.cfg.Rule.Excess(l)
		return cpu, mem, ReasonPeak, ratio
	}
	hot := r.cfg.HotWatermark
	if cpu, mem = l.HotExcess(hot); cpu > 0 || mem > 0 {
		return cpu, mem, ReasonHot, realRatio(l.CPUUsage, l.CPUAllocatable, l.MemoryUsage, l.MemoryAllocatable, hot)
	}
	return 0, 0, "", ratio
}

func realRatio(cpu, cpuAlloc, mem, memAlloc, watermark float64) float64 {
	var out float64
	if cpuAlloc > 0 {
		out = cpu / (watermark * cpuAlloc)
	}
	if memAlloc > 0 {
		out = math.Max(out, mem/(watermark*memAlloc))
	}
	return out
}

// inflightLocked sums the amounts of the moves admitted from node since
// since that count for reason (a peak for the rule, real use otherwise).
func (r *Rescheduler) inflightLocked(node string, since time.Time, reason string) (cpu, mem float64) {
	for i := len(r.moves) - 1; i >= 0; i-- {
		m := r.moves[i]
		if m.Time.Before(since) {
			break
		}
		if m.Node != node || m.State == StateDenied || m.State == StateFailed {
			continue
		}
		c, mm := m.amount(reason)
		cpu += c
		mem += mm
	}
	return cpu, mem
}

// Observe sees every accepted report: a node whose real CPU use is above
// the emergency watermark is queued at once (unless its report predates a
// move admitted from it: that move is not in it yet); an emergency that a
// report shows over (CPU back under the hot watermark) is dropped.
func (r *Rescheduler) Observe(d *report.Decoded, now time.Time) {
	u := d.Usage
	// A late report (an agent's buffer after an outage) says nothing of
	// now.
	if u.CPUAllocatable <= 0 || now.Sub(d.WindowEnd) > 2*r.cfg.Period {
		return
	}
	frac := u.CPUUsage / u.CPUAllocatable
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.queue[d.Node]
	switch {
	case frac > r.cfg.Emergency:
		if e != nil && e.Reason == ReasonEmergency {
			return
		}
		cpu := u.CPUUsage - r.cfg.HotWatermark*u.CPUAllocatable
		icpu, _ := r.inflightLocked(d.Node, d.WindowEnd.Add(-r.cfg.Period), ReasonEmergency)
		ne := &Entry{Node: d.Node, Reason: ReasonEmergency, Since: now, CPU: cpu - icpu, Ratio: frac / r.cfg.HotWatermark}
		if !ne.open() {
			return
		}
		r.queue[d.Node] = ne
		r.m.passes.WithLabelValues("emergency").Inc()
		r.log.Info("emergency: a node's real CPU use crossed the emergency watermark; queued at once", "node", d.Node,
			"cpu", fmt.Sprintf("%.2f/%.2f", u.CPUUsage, u.CPUAllocatable), "watermark", r.cfg.Emergency)
	case e != nil && e.Reason == ReasonEmergency && frac <= r.cfg.HotWatermark:
		delete(r.queue, d.Node)
	default:
		return
	}
	r.gaugesLocked()
}

func (r *Rescheduler) gaugesLocked() {
	counts := map[string]float64{ReasonPeak: 0, ReasonHot: 0, ReasonEmergency: 0}
	for _, e := range r.queue {
		if e.open() {
			counts[e.Reason]++
		}
	}
	for k, v := range counts {
		r.m.queued.WithLabelValues(k).Set(v)
	}
}

// Queue returns the queued nodes, highest ratio first.
func (r *Rescheduler) Queue() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Entry, 0, len(r.queue))
	for _, e := range r.queue {
		if e.open() {
			out = append(out, *e)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Ratio != out[j].Ratio {
			return out[i].Ratio > out[j].Ratio
		}
		return out[i].Node < out[j].Node
	})
	return out
}

// Pressure is the value the descheduler reads for every node (see the
// package doc), sorted by node.
func (r *Rescheduler) Pressure(now time.Time) []NodePressure {
	stale := r.src.StaleAfter()
	loads := r.src.Loads()
	r.mu.Lock()
	defer r.mu.Unlock()
	vals := map[string]float64{}
	for _, n := range r.nodes {
		vals[n] = 0.5
	}
	for _, l := range loads {
		v := 0.5
		if l.Fresh(now, stale) {
			if !l.Hot(r.cfg.HotWatermark) {
				v = math.Min(0.5, r.cfg.Rule.Ratio(l)/2)
			}
		}
		vals[l.Node] = v
	}
	for n, e := range r.queue {
		if e.open() {
			vals[n] = math.Max(0.51, math.Min(1, e.Ratio/2))
		}
	}
	out := make([]NodePressure, 0, len(vals))
	for n, v := range vals {
		out = append(out, NodePressure{Node: n, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// NodePressure is one node's value in the descheduler's query.
type NodePressure struct {
	Node  string
	Value float64
}
