//go:build linux

package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	corev1 "k8s.io/api/core/v1"

	"github.com/cgpilot/cgpilot/agent/collector"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/recommend"
)

// report.go: what the agent tells the cluster aggregator, and what it
// takes back. Every sampling round feeds a report.Builder (each workload
// container's samples, the node's usage); each decision describes the
// pod's containers (requests, policy, the local recommendation, whether
// they can be adjusted); OOM kills and adjustments are recorded as they
// happen. When a window of the report grid ends, its report goes to the
// report.Client, which keeps it (bounded, merging the oldest) until the
// aggregator accepts it. After each window the agent fetches the merged
// recommendations of its workload containers and prefers them while they
// are fresh (rightsize.Container.Merged); with the aggregator away it
// decides on its own, and nothing waits for the aggregator.

// reporter is the agent's side of the aggregator.
type reporter struct {
	c      *controller
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

func newReporter(c *controller) (*reporter, error) {
	ac := c.cfg.Aggregator
	b, err := report.NewBuilder(report.BuilderConfig{Node: c.cfg.NodeName, Period: ac.ReportPeriod.Duration, SampleInterval: c.cfg.Rightsizing.SampleInterval.Duration})
	if err != nil {
		return nil, fmt.Errorf("%w: aggregator: %w", ErrInvalidConfig, err)
	}
	client, err := report.NewClient(report.ClientConfig{URL: strings.TrimSuffix(ac.URL, "/"), CAFile: ac.CAFile, TokenFile: ac.TokenFile, MaxBufferBytes: ac.MaxBufferBytes})
	if err != nil {
		return nil, fmt.Errorf("%w: aggregator: %w", ErrInvalidConfig, err)
	}
	fs, err := procfs.NewFS(c.cfg.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, c.cfg.ProcRoot, err)
	}
	rp := &reporter{c: c, client: client, b: b, period: ac.ReportPeriod.Duration, proc: fs, sampleInterval: c.cfg.Rightsizing.SampleInterval.Duration}
	rp.register(c.metrics.reg)
	return rp, nil
}

// register exports the client's counters, read at each scrape.
func (rp *reporter) register(reg prometheus.Registerer) {
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
			func() float64 { return float64(rp.view(time.Now()).Fresh) }),
	)
}

// reportKey parses a collector key ("ns/Kind/name/container").
func reportKey(key string) (report.Key, bool) {
	parts := strings.SplitN(key, "/", 4)
	if len(parts) != 4 || parts[0] == "" || parts[1] == "" || parts[2] == "" || parts[3] == "" {
		return report.Key{}, false
	}
	return report.Key{Workload: report.Workload{Namespace: parts[0], Kind: parts[1], Name: parts[2]}, Container: parts[3]}, true
}

// Round feeds one sampling round (collector.Sink), and the node's usage
// since the previous round.
func (rp *reporter) Round(t time.Time, samples []collector.Sample) {
	cores, mem, ok := rp.nodeUsage(t)
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for i := range samples {
		s := &samples[i]
		if k, ok := reportKey(s.Target.Key); ok {
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
func (rp *reporter) nodeUsage(t time.Time) (float64, float64, bool) {
	st, err := rp.proc.Stat()
	var mi procfs.Meminfo
	if err == nil {
		mi, err = rp.proc.Meminfo()
	}
	if err == nil && (mi.MemTotalBytes == nil || mi.MemAvailableBytes == nil) {
		err = fmt.Errorf("%s/meminfo has no MemTotal or MemAvailable", rp.c.cfg.ProcRoot)
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if err != nil {
		if msg := err.Error(); msg != rp.nodeErr {
			rp.nodeErr = msg
			rp.c.log.Error(err, "node usage unreadable: reports carry no node usage until it is")
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
		cpus = float64(rp.c.pools.State().All().Size())
	}
	cores := (busy - prevBusy) / (total - prevTotal) * cpus
	used := float64(*mi.MemTotalBytes - min(*mi.MemAvailableBytes, *mi.MemTotalBytes))
	rp.alloc.CPUCapacity, rp.alloc.MemoryCapacity = cpus, float64(*mi.MemTotalBytes)
	return cores, used, true
}

// describe records what the agent knows of a pod's containers after a
// decision.
func (rp *reporter) describe(in rightsize.Pod, d rightsize.Decision, original map[string]rightsize.Requirements) {
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
		k, ok := reportKey(c.Key)
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
func (rp *reporter) forget(key string) {
	if rp == nil {
		return
	}
	if k, ok := reportKey(key); ok {
		rp.mu.Lock()
		rp.b.Forget(k)
		rp.mu.Unlock()
	}
}

// oomKilled records an OOM kill of pod (its name; the namespace is the
// key's) for the next report.
func (rp *reporter) oomKilled(key, pod string, at time.Time, usage, limit, request float64) {
	if rp == nil {
		return
	}
	if k, ok := reportKey(key); ok {
		rp.mu.Lock()
		err := rp.b.OOM(report.OOMKill{Key: k, Pod: pod, Time: at.UTC(), UsageBytes: usage, LimitBytes: limit, RequestBytes: request})
		rp.mu.Unlock()
		if err != nil {
			rp.c.log.Error(err, "an OOM kill left out of the report")
		}
	}
}

// adjusted records a change to a container's requests (applied, or
// failed with errText) for the next report: one entry per resource that
// changed (for an OOM bump that keeps the memory request, its limit).
func (rp *reporter) adjusted(key, pod string, at time.Time, from, to rightsize.Requirements, reason, errText string) {
	if rp == nil {
		return
	}
	k, ok := reportKey(key)
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
			rp.c.log.Error(err, "an adjustment left out of the report")
		}
	}
}

// run cuts the ended windows into reports, hands them to the client and
// fetches the merged recommendations after each, until ctx ends; the
// client sends in its own goroutine (started here).
func (rp *reporter) run(ctx context.Context) {
	rp.c.spawn(func() {
		rp.c.guard.Run(ctx, loopReportSend, func() bool { rp.client.Run(ctx); return false })
	})
	tick := min(rp.sampleInterval, 5*time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	// The node's requests and the unadmitted pods (a walk of every pod)
	// are read once per window, as it ends, not at every tick.
	next := report.WindowEnd(time.Now(), rp.period)
	rp.c.guard.Run(ctx, loopReport, func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		now := time.Now()
		if now.Before(next) {
			return true
		}
		next = report.WindowEnd(now, rp.period)
		rp.setNode(ctx)
		reports := rp.cut(now, rp.c.rs.unadmitted())
		for _, r := range reports {
			if err := rp.client.Enqueue(r); err != nil {
				rp.c.log.Error(err, "a report could not be encoded; its window is lost", "window", r.WindowEnd)
			}
		}
		if len(reports) > 0 {
			rp.fetch(ctx)
		}
		return true
	})
}

// cut ends the windows before now.
func (rp *reporter) cut(now time.Time, unadmitted map[report.Key]int) []*report.Report {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	rp.b.SetUnadmitted(unadmitted)
	return rp.b.Cut(now)
}

// setNode gives the builder the node's size, the requests of its pods and
// the pools' state.
func (rp *reporter) setNode(ctx context.Context) {
	var cpuReq, memReq float64
	pods := 0
	for _, p := range rp.c.listPods() {
		if p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed" {
			continue
		}
		pods++
		for _, c := range p.Spec.Containers {
			req, _ := requirementsOf(c.Resources)
			cpuReq += req.CPU
			memReq += req.Memory
		}
	}
	st := rp.c.pools.State()
	pl := &report.Pools{SharedCPUs: st.SharedPool().Size(), ExclusiveCPUs: st.Exclusive().Size(), ReservedCPUs: st.Reserved().Size(), ExclusivePods: len(st.Assignments())}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	u := rp.alloc
	u.CPURequests, u.MemoryRequests, u.Pods = cpuReq, memReq, pods
	// Allocatable: what the pools may give pods (all but the reserved
	// CPUs); memory as the capacity, the kubelet's reservation unknown here.
	u.CPUAllocatable = float64(st.All().Difference(st.Reserved()).Size())
	u.MemoryAllocatable = u.MemoryCapacity
	rp.b.SetNode(u)
	rp.b.SetPools(pl)
}

// fetch asks for the merged recommendations; an error keeps the last
// answer (each entry is used until its FreshUntil).
func (rp *reporter) fetch(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	recs, err := rp.client.Fetch(ctx, rp.c.cfg.NodeName)
	if err != nil {
		msg := err.Error()
		if old := rp.fetchErr.Load(); old == nil || *old != msg {
			rp.c.log.Info("merged recommendations unavailable: the node's own are used", "err", msg)
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
		rp.c.log.Info("merged recommendations available again", "items", len(recs.Items))
	}
}

// mergedFor is the fresh merged recommendation of a workload container.
func (rp *reporter) mergedFor(key string, now time.Time) *rightsize.Merged {
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

// view is the local API's view of the reports.
func (rp *reporter) view(now time.Time) local.AggregatorView {
	s := rp.client.Stats()
	v := local.AggregatorView{URL: rp.c.cfg.Aggregator.URL, PeriodSeconds: int(rp.period / time.Second),
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
			if now.Before(w.FreshUntil) {
				v.Fresh++
			}
		}
	}
	return v
}

// reportAdjusted records a change the applier made, or failed to make
// (errText), to the pod's containers.
func (r *rightsizer) reportAdjusted(p *corev1.Pod, ch change, errText string) {
	if r.rep == nil {
		return
	}
	r.mu.Lock()
	var wl workloadRef
	if rp := r.pods[string(p.UID)]; rp != nil {
		wl = rp.workload
	}
	r.mu.Unlock()
	if wl == "" {
		return
	}
	reason := report.ReasonRecommendation
	if ch.reason == "OOMBump" {
		reason = report.ReasonOOM
	}
	for _, spec := range p.Spec.Containers {
		to, ok := ch.containers[spec.Name]
		if !ok {
			continue
		}
		req, lim := requirementsOf(spec.Resources)
		r.rep.adjusted(string(wl)+"/"+spec.Name, p.Name, time.Now(), rightsize.Requirements{Requests: req, Limits: lim}, to, reason, errText)
	}
}

// unadmitted counts, per workload container, the pods an Auto policy
// covers that carry no cgpilot.io/admission annotation: the aggregator's
// webhook did not see them (it fails open).
func (r *rightsizer) unadmitted() map[report.Key]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[report.Key]int{}
	for uid, rp := range r.pods {
		if rp.decision.Mode != rightsize.ModeAuto {
			continue
		}
		p := r.c.podByUID(uid)
		if p == nil {
			continue
		}
		if _, ok := p.Annotations[v1alpha1.AnnotationAdmission]; ok {
			continue
		}
		for name := range rp.containers {
			if k, ok := reportKey(string(rp.workload) + "/" + name); ok {
				out[k]++
			}
		}
	}
	return out
}
