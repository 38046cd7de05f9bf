//go:build linux

package reporter

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"

	"github.com/cgpilot/cgpilot/agent/collector"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/internal/loop"
	"github.com/cgpilot/cgpilot/recommend"
)

// The reporter's loops, as the loop label of
// cgpilot_recovered_panics_total.
const (
	LoopReport     = "report"      // the report windows and merged fetches (reporter.go)
	LoopReportSend = "report-send" // the report client's sender (api/report)
)

// Pools are the node's CPU pools' sizes, for the report.
type Pools struct {
	// All, Reserved, Shared, Exclusive count CPUs; Allocatable are the
	// CPUs the pools may give pods (all but the reserved).
	All, Reserved, Shared, Exclusive, Allocatable int
	ExclusivePods                                 int
}

// Options are what New needs: the aggregator's address and the agent's
// view of its node.
type Options struct {
	Node           string
	URL            string // the aggregator's, without a trailing slash
	CAFile         string
	TokenFile      string
	MaxBufferBytes int
	Period         time.Duration // the report window
	SampleInterval time.Duration
	ProcRoot       string
	Registerer     prometheus.Registerer
	Log            logr.Logger
	Guard          *loop.Guard
	// Spawn runs f in a goroutine the agent waits for before it returns.
	Spawn func(f func())
	// Requests are the node's pods' CPU (cores) and memory (bytes)
	// requests and how many pods are not finished, read once a window.
	Requests func() (cpu, memory float64, pods int)
	// Pools are the pools' sizes now.
	Pools func() Pools
}

// Reporter is the agent's side of the aggregator.
type Reporter struct {
	o      Options
	client *report.Client
	period time.Duration
	proc   procfs.FS
	// sampleInterval turns a merged recommendation's sample count into
	// the history span minHistory is compared with.
	sampleInterval time.Duration

	mu sync.Mutex
	b  *report.Builder
	// busy, total: the node's CPU seconds at the previous round.
	busy, total float64
	haveCPU     bool
	nodeErr     string // the last node read error logged, to log changes only
	// nodeAlloc: the Node's allocatable, read once per window.
	alloc report.NodeUsage

	merged    atomic.Pointer[mergedIndex]
	fetchErr  atomic.Pointer[string]
	fetchedAt atomic.Pointer[time.Time]
}

// mergedIndex is the aggregator's last answer, by workload container key.
type mergedIndex struct {
	generated time.Time
	byKey     map[string]*report.WorkloadRecommendation
}

// New builds the reporter; an error names the option that is wrong.
func New(o Options) (*Reporter, error) {
	b, err := report.NewBuilder(report.BuilderConfig{Node: o.Node, Period: o.Period, SampleInterval: o.SampleInterval})
	if err != nil {
		return nil, fmt.Errorf("aggregator: %w", err)
	}
	client, err := report.NewClient(report.ClientConfig{URL: o.URL, CAFile: o.CAFile, TokenFile: o.TokenFile, MaxBufferBytes: o.MaxBufferBytes})
	if err != nil {
		return nil, fmt.Errorf("aggregator: %w", err)
	}
	fs, err := procfs.NewFS(o.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.ProcRoot, err)
	}
	rp := &Reporter{o: o, client: client, b: b, period: o.Period, proc: fs, sampleInterval: o.SampleInterval}
	rp.register(o.Registerer)
	return rp, nil
}

// Period is the report window.
func (rp *Reporter) Period() time.Duration { return rp.period }

// register exports the client's counters, read at each scrape.
func (rp *Reporter) register(reg prometheus.Registerer) {
	stat := func(f func(report.Stats) int) func() float64 {
		return func() float64 { return float64(f(rp.client.Stats())) }
	}
	for _, r := range []struct {
		result string
		f      func(report.Stats) int
	}{
		{"accepted", func(s report.Stats) int { return s.Accepted }},
		{"duplicate", func(s report.Stats) int { return s.Duplicates }},
		{"rejected", func(s report.Stats) int { return s.Rejected }},
		{"failed", func(s report.Stats) int { return s.Failures }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cgpilot_aggregator_reports_total",
			Help:        "Reports to the aggregator by result: accepted, duplicate (it had them), rejected (refused for good, dropped), failed (attempts retried).",
			ConstLabels: prometheus.Labels{"result": r.result}}, stat(r.f)))
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cgpilot_aggregator_buffered_reports", Help: "Reports waiting for the aggregator to accept them."},
			stat(func(s report.Stats) int { return s.Buffered })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cgpilot_aggregator_buffered_bytes", Help: "Bytes of the reports waiting for the aggregator."},
			stat(func(s report.Stats) int { return s.BufferedBytes })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cgpilot_aggregator_merged_fresh", Help: "Merged recommendations fresh enough to be used in decisions."},
			func() float64 { return float64(rp.View(time.Now()).Fresh) }),
	)
}

// Round feeds one sampling round (collector.Sink), and the node's usage
// since the previous round.
func (rp *Reporter) Round(t time.Time, samples []collector.Sample) {
	cores, mem, ok := rp.nodeUsage(t)
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for i := range samples {
		s := &samples[i]
		if k, ok := report.ParseKey(s.Target.Key); ok {
			rp.b.Sample(k, s.Target.PodUID, t, s.CPUCores, float64(s.MemoryWorkingSet))
		}
	}
	if ok {
		rp.b.NodeSample(t, cores, mem)
	}
}

// nodeUsage reads the node's CPU use since the previous call (cores) and
// its memory in use (total − available) from procfs: the host's, also in
// the agent's container.
func (rp *Reporter) nodeUsage(t time.Time) (float64, float64, bool) {
	st, err := rp.proc.Stat()
	var mi procfs.Meminfo
	if err == nil {
		mi, err = rp.proc.Meminfo()
	}
	if err == nil && (mi.MemTotalBytes == nil || mi.MemAvailableBytes == nil) {
		err = fmt.Errorf("%s/meminfo has no MemTotal or MemAvailable", rp.o.ProcRoot)
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if err != nil {
		if msg := err.Error(); msg != rp.nodeErr {
			rp.nodeErr = msg
			rp.o.Log.Error(err, "node usage unreadable: reports carry no node usage until it is")
		}
		return 0, 0, false
	}
	rp.nodeErr = ""
	c := st.CPUTotal
	busy := c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	total := busy + c.Idle + c.Iowait
	prevBusy, prevTotal, had := rp.busy, rp.total, rp.haveCPU
	rp.busy, rp.total, rp.haveCPU = busy, total, true
	if !had || total <= prevTotal || busy < prevBusy {
		return 0, 0, false // the first round, or counters that went back
	}
	cpus := float64(len(st.CPU)) // the online CPUs
	if cpus == 0 {
		cpus = float64(rp.o.Pools().All)
	}
	cores := (busy - prevBusy) / (total - prevTotal) * cpus
	used := float64(*mi.MemTotalBytes - min(*mi.MemAvailableBytes, *mi.MemTotalBytes))
	rp.alloc.CPUCapacity, rp.alloc.MemoryCapacity = cpus, float64(*mi.MemTotalBytes)
	return cores, used, true
}

// describe records what the agent knows of a pod's containers after a
// decision.
func (rp *Reporter) Describe(in rightsize.Pod, d rightsize.Decision, original map[string]rightsize.Requirements) {
	if rp == nil {
		return
	}
	byName := map[string]rightsize.ContainerDecision{}
	for _, cd := range d.Containers {
		byName[cd.Name] = cd
	}
	adjustable, reason := adjustability(in, d)
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for _, c := range in.Containers {
		k, ok := report.ParseKey(c.Key)
		if !ok {
			continue
		}
		info := report.ContainerInfo{Current: resourcesOf(c.Spec), QOS: in.QoS, Policy: d.Policy, Mode: string(d.Mode), Preset: d.Preset,
			Adjustable: adjustable, Reason: reason}
		if o, ok := original[c.Name]; ok {
			info.Original = resourcesOf(o)
		}
		if d.State == rightsize.StateConflict {
			for _, p := range in.Policies {
				info.Conflicts = append(info.Conflicts, p.Name)
			}
		}
		cd := byName[c.Name]
		if cd.CPUNote == rightsize.NoteExclusiveCPUs && adjustable {
			info.Reason = rightsize.NoteExclusiveCPUs // memory still adjusts; the CPU request does not
		}
		if rec := cd.Recommendation; rec != nil && cd.Nodes == 0 {
			info.Local = &report.Recommendation{CPU: estimate(rec.CPU), Memory: estimate(rec.Memory)}
		}
		rp.b.Describe(k, info)
	}
}

// adjustability says whether the agent can apply recommendations to the
// pod, and why not, in the words of the aggregator's coverage.
func adjustability(in rightsize.Pod, d rightsize.Decision) (bool, string) {
	switch d.State {
	case rightsize.StateConflict:
		return false, "MatchedByTwoPolicies"
	case rightsize.StateInvalid:
		return false, "InvalidPolicy"
	case rightsize.StateNotAdjustable:
		return false, in.QoS
	case rightsize.StateOff:
		if d.Policy == "" {
			return false, "NoPolicy"
		}
		return false, "ModeOff"
	}
	return true, ""
}

func resourcesOf(r rightsize.Requirements) report.Resources {
	return report.Resources{CPURequest: r.Requests.CPU, CPULimit: r.Limits.CPU, MemoryRequest: r.Requests.Memory, MemoryLimit: r.Limits.Memory}
}

func estimate(e recommend.Estimate) report.Estimate {
	return report.Estimate{Target: e.Target, Lower: e.Lower, Upper: e.Upper, Limit: e.Limit}
}

// forget drops the description of a workload container no pod runs.
func (rp *Reporter) Forget(key string) {
	if rp == nil {
		return
	}
	if k, ok := report.ParseKey(key); ok {
		rp.mu.Lock()
		rp.b.Forget(k)
		rp.mu.Unlock()
	}
}

// oomKilled records an OOM kill of pod (its name; the namespace is the
// key's) for the next report.
func (rp *Reporter) OOMKilled(key, pod string, at time.Time, usage, limit, request float64) {
	if rp == nil {
		return
	}
	if k, ok := report.ParseKey(key); ok {
		rp.mu.Lock()
		err := rp.b.OOM(report.OOMKill{Key: k, Pod: pod, Time: at.UTC(), UsageBytes: usage, LimitBytes: limit, RequestBytes: request})
		rp.mu.Unlock()
		if err != nil {
			rp.o.Log.Error(err, "an OOM kill left out of the report")
		}
	}
}

// adjusted records a change to a container's requests (applied, or
// failed with errText) for the next report: one entry per resource that
// changed (for an OOM bump that keeps the memory request, its limit).
func (rp *Reporter) Adjusted(key, pod string, at time.Time, from, to rightsize.Requirements, reason, errText string) {
	if rp == nil {
		return
	}
	k, ok := report.ParseKey(key)
	if !ok {
		return
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for _, x := range []struct {
		res      string
		from, to float64
	}{{report.ResourceCPU, from.Requests.CPU, to.Requests.CPU}, {report.ResourceMemory, from.Requests.Memory, to.Requests.Memory}} {
		if reason == report.ReasonOOM && x.res == report.ResourceMemory && x.from == x.to {
			// An OOM bump raises the limit; the request may stay.
			x.from, x.to = from.Limits.Memory, to.Limits.Memory
		}
		if x.from == x.to {
			continue
		}
		if err := rp.b.Adjusted(report.Adjustment{Key: k, Pod: pod, Time: at.UTC(), Resource: x.res, From: x.from, To: x.to, Reason: reason, Error: errText}); err != nil {
			rp.o.Log.Error(err, "an adjustment left out of the report")
		}
	}
}

// run cuts the ended windows into reports, hands them to the client and
// fetches the merged recommendations after each, until ctx ends; the
// client sends in its own goroutine (started here).
func (rp *Reporter) Run(ctx context.Context, unadmitted func() map[report.Key]int) {
	rp.o.Spawn(func() {
		rp.o.Guard.Run(ctx, LoopReportSend, func() bool { rp.client.Run(ctx); return false })
	})
	tick := min(rp.sampleInterval, 5*time.Second)
	// The node's requests and the unadmitted pods (a walk of every pod)
	// are read once per window, as it ends, not at every tick.
	next := report.WindowEnd(time.Now(), rp.period)
	rp.o.Guard.Every(ctx, LoopReport, tick, func() {
		now := time.Now()
		if now.Before(next) {
			return
		}
		next = report.WindowEnd(now, rp.period)
		rp.setNode()
		reports := rp.cut(now, unadmitted())
		for _, r := range reports {
			if err := rp.client.Enqueue(r); err != nil {
				rp.o.Log.Error(err, "a report could not be encoded; its window is lost", "window", r.WindowEnd)
			}
		}
		if len(reports) > 0 {
			rp.fetch(ctx)
		}
	})
}

// cut ends the windows before now.
func (rp *Reporter) cut(now time.Time, unadmitted map[report.Key]int) []*report.Report {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	rp.b.SetUnadmitted(unadmitted)
	return rp.b.Cut(now)
}

// setNode gives the builder the node's size, the requests of its pods and
// the pools' state.
func (rp *Reporter) setNode() {
	cpuReq, memReq, pods := rp.o.Requests()
	st := rp.o.Pools()
	pl := &report.Pools{SharedCPUs: st.Shared, ExclusiveCPUs: st.Exclusive, ReservedCPUs: st.Reserved, ExclusivePods: st.ExclusivePods}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	u := rp.alloc
	u.CPURequests, u.MemoryRequests, u.Pods = cpuReq, memReq, pods
	// Allocatable: what the pools may give pods (all but the reserved
	// CPUs); memory as the capacity, the kubelet's reservation unknown here.
	u.CPUAllocatable = float64(st.Allocatable)
	u.MemoryAllocatable = u.MemoryCapacity
	rp.b.SetNode(u)
	rp.b.SetPools(pl)
}

// fetch asks for the merged recommendations; an error keeps the last
// answer (each entry is used until its FreshUntil).
func (rp *Reporter) fetch(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	recs, err := rp.client.Fetch(ctx, rp.o.Node)
	if err != nil {
		msg := err.Error()
		if old := rp.fetchErr.Load(); old == nil || *old != msg {
			rp.o.Log.Info("merged recommendations unavailable: the node's own are used", "err", msg)
		}
		rp.fetchErr.Store(&msg)
		return
	}
	idx := &mergedIndex{generated: recs.Generated, byKey: make(map[string]*report.WorkloadRecommendation, len(recs.Items))}
	for k, v := range recs.Index() {
		idx.byKey[k.String()] = v
	}
	rp.merged.Store(idx)
	now := time.Now()
	rp.fetchedAt.Store(&now)
	if old := rp.fetchErr.Swap(nil); old != nil {
		rp.o.Log.Info("merged recommendations available again", "items", len(recs.Items))
	}
}

// mergedFor is the fresh merged recommendation of a workload container.
func (rp *Reporter) MergedFor(key string, now time.Time) *rightsize.Merged {
	if rp == nil {
		return nil
	}
	idx := rp.merged.Load()
	if idx == nil {
		return nil
	}
	w := idx.byKey[key]
	if _, fresh := report.Prefer(w, report.Recommendation{}, now); !fresh {
		return nil
	}
	m := &rightsize.Merged{Preset: w.Preset, Nodes: w.Nodes,
		CPU:    recommend.Estimate{Target: w.CPU.Target, Lower: w.CPU.Lower, Upper: w.CPU.Upper, Limit: w.CPU.Limit},
		Memory: recommend.Estimate{Target: w.Memory.Target, Lower: w.Memory.Lower, Upper: w.Memory.Upper, Limit: w.Memory.Limit}}
	if w.Samples > 0 {
		m.History = time.Duration(min(w.Samples, 1<<40)) * rp.sampleInterval
	}
	return m
}

// UseMerged stores merged recommendations (by workload container key) as
// the aggregator's latest answer, generated then: what a fetch stores.
// The agent's kernel tests use it to stand in for an aggregator.
func (rp *Reporter) UseMerged(generated time.Time, byKey map[string]*report.WorkloadRecommendation) {
	rp.merged.Store(&mergedIndex{generated: generated, byKey: byKey})
}

// View is the local API's view of the reports.
func (rp *Reporter) View(now time.Time) local.AggregatorView {
	s := rp.client.Stats()
	v := local.AggregatorView{URL: rp.o.URL, PeriodSeconds: int(rp.period / time.Second),
		Accepted: s.Accepted, Duplicates: s.Duplicates, Rejected: s.Rejected, Failures: s.Failures, Coalesced: s.Coalesced,
		DroppedEvents: s.DroppedEvents, Buffered: s.Buffered, BufferedBytes: s.BufferedBytes, LastError: s.LastError}
	if e := rp.fetchErr.Load(); e != nil {
		v.FetchError = *e
	}
	if t := rp.fetchedAt.Load(); t != nil {
		at := t.UTC()
		v.Fetched = &at
	}
	if idx := rp.merged.Load(); idx != nil {
		for _, w := range idx.byKey {
			v.Merged++
			if _, fresh := report.Prefer(w, report.Recommendation{}, now); fresh {
				v.Fresh++ // as MergedFor counts it: used in decisions
			}
		}
	}
	return v
}
