package recommend

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"
)

// ReplayOptions configures Replay.
type ReplayOptions struct {
	Step   time.Duration // recommendation grid, default 1 h
	Warmup time.Duration // per-series history before scoring, default 24 h
	// Policy is evaluated; Control (normally the "vpa" preset) is replayed on
	// the same samples in the same run as the control group.
	Policy, Control Policy
	// Rows, if set, receives every recommendation row in (series, ts) order.
	Rows func(RecRow) error
	// Progress, if set, is called after each series with (done, total).
	Progress func(done, total int)
	// Workers replays series in parallel (default 1); the result is the same.
	Workers int
	// ScorePeaks scores violations against the window peaks of a trace
	// with cpu_cores_max/mem_bytes_max (where a row has them) instead of
	// the means; slack is always measured from the means.
	ScorePeaks bool
}

// RecRow is one recommendation at a step boundary. OK is false when the
// policy had too little history; the control always answers.
type RecRow struct {
	TS      int64
	Series  string
	OK      bool
	Policy  Recommendation
	Control Recommendation
}

// Metrics are the scores of traces/README.md for one resource.
type Metrics struct {
	RelativeSlack             float64 `json:"relative_slack"`
	ViolationRate             float64 `json:"violation_rate"`
	ViolationOver20pctRate    float64 `json:"violation_over_20pct_rate"`
	MeanSlackSumOverSeries    float64 `json:"mean_slack_sum_over_series"`
	UsageToTargetP95PerSeries float64 `json:"usage_to_target_p95_per_series"`
	ChangesPerSeriesDay       float64 `json:"changes_per_series_day"`
}

// PolicyScore is the score of one policy over the whole trace.
type PolicyScore struct {
	Policy        string  `json:"policy"`
	ScoredSeries  int     `json:"scored_series"`
	ScoredSamples int64   `json:"scored_samples"`
	Unrecommended int64   `json:"unscored_no_recommendation"`
	CPU           Metrics `json:"cpu"`
	Memory        Metrics `json:"memory"`
}

// Summary is the result of Replay.
type Summary struct {
	Series      int         `json:"series"`
	Rows        int         `json:"rows"`
	Step        string      `json:"step"`
	Warmup      string      `json:"warmup"`
	Anchor      int64       `json:"anchor"`
	Policy      PolicyScore `json:"policy"`
	Control     PolicyScore `json:"control"`
	PolicyJSON  Policy      `json:"policy_settings"`
	ControlName string      `json:"control_name"`
	// MemoryScored is false for a CPU-only trace (memory metrics are 0).
	MemoryScored bool `json:"memory_scored"`
	ScorePeaks   bool `json:"score_peaks,omitempty"`
}

// Replay runs the trace through Policy and Control and scores both with the
// definitions of traces/README.md. It is a pure function of its inputs: the
// recommendation at boundary T = anchor + k·Step uses only samples with
// ts < T, and every sample with ts ≥ first boundary and ts ≥ first_ts +
// Warmup is scored against the latest recommendation with T ≤ ts.
func Replay(tr *Trace, opt ReplayOptions) (Summary, error) {
	if opt.Step <= 0 {
		opt.Step = time.Hour
	}
	if opt.Warmup < 0 {
		return Summary{}, fmt.Errorf("%w: warmup %v < 0", ErrInvalidPolicy, opt.Warmup)
	}
	if err := opt.Policy.Validate(); err != nil {
		return Summary{}, err
	}
	if err := opt.Control.Validate(); err != nil {
		return Summary{}, err
	}
	step := int64(opt.Step / time.Second)
	if step < 1 || time.Duration(step)*time.Second != opt.Step {
		return Summary{}, fmt.Errorf("%w: step %v must be a whole number of seconds", ErrInvalidPolicy, opt.Step)
	}
	anchor := floorDiv(tr.MinTS, step) * step
	workers := max(opt.Workers, 1)
	n := len(tr.Series)
	results := make([]*seriesResult, n)
	done := make([]chan struct{}, n)
	for i := range done {
		done[i] = make(chan struct{})
	}
	var next int
	var mu sync.Mutex
	for range workers {
		go func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				results[i] = replaySeries(tr.Series[i], anchor, step, int64(opt.Warmup/time.Second), &opt)
				close(done[i])
			}
		}()
	}
	var pol, ctl scoreAcc
	var sinkErr error
	for i := range n {
		<-done[i]
		res := results[i]
		results[i] = nil
		if opt.Rows != nil && sinkErr == nil {
			for _, row := range res.rows {
				if sinkErr = opt.Rows(row); sinkErr != nil {
					break
				}
			}
		}
		pol.merge(&res.policy)
		ctl.merge(&res.control)
		if opt.Progress != nil {
			opt.Progress(i+1, n)
		}
	}
	if sinkErr != nil {
		return Summary{}, sinkErr
	}
	return Summary{
		Series: n, Rows: tr.Rows, Step: opt.Step.String(), Warmup: opt.Warmup.String(), Anchor: anchor,
		Policy: pol.score(opt.Policy.Name), Control: ctl.score(opt.Control.Name),
		PolicyJSON: opt.Policy, ControlName: opt.Control.Name,
		MemoryScored: tr.HasMemory, ScorePeaks: opt.ScorePeaks,
	}, nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

type seriesResult struct {
	rows            []RecRow
	policy, control seriesScore
}

func replaySeries(s *Series, anchor, step, warmup int64, opt *ReplayOptions) *seriesResult {
	res := &seriesResult{}
	if len(s.TS) == 0 {
		return res
	}
	memo := new(decayMemo) // this series' containers only
	pc, cc := newContainer(&opt.Policy, memo), newContainer(&opt.Control, memo)
	first, last := s.TS[0], s.TS[len(s.TS)-1]
	scoreFrom := first + warmup
	fed, scored := 0, 0
	for T := anchor + (floorDiv(first-anchor, step)+1)*step; T <= last; T += step {
		for ; fed < len(s.TS) && s.TS[fed] < T; fed++ {
			smp := Sample{Time: time.Unix(s.TS[fed], 0), CPUCores: s.CPU[fed], MemoryBytes: at(s.Mem, fed)}
			pc.add(&opt.Policy, smp)
			cc.add(&opt.Control, smp)
		}
		now := time.Unix(T, 0)
		pr, pok := pc.recommend(&opt.Policy, now)
		cr, cok := cc.recommend(&opt.Control, now)
		if opt.Rows != nil {
			res.rows = append(res.rows, RecRow{TS: T, Series: s.Name, OK: pok, Policy: pr, Control: cr})
		}
		for scored = max(scored, fed); scored < len(s.TS) && s.TS[scored] < T+step; scored++ {
			ts := s.TS[scored]
			if ts < scoreFrom {
				continue
			}
			u := usage{cpu: s.CPU[scored], mem: at(s.Mem, scored), memScored: s.Mem != nil}
			u.cpuPeak, u.memPeak = u.cpu, u.mem
			if opt.ScorePeaks {
				if v := at(s.CPUMax, scored); v == v && s.CPUMax != nil {
					u.cpuPeak = max(v, u.cpu)
				}
				if v := at(s.MemMax, scored); v == v && s.MemMax != nil {
					u.memPeak = max(v, u.mem)
				}
			}
			res.policy.observe(pok, ts, &u, pr)
			res.control.observe(cok, ts, &u, cr)
		}
	}
	return res
}

// at returns v[i], or 0 when the column is absent (nil).
func at(v []float64, i int) float64 {
	if v == nil {
		return 0
	}
	return v[i]
}

// usage is one scored sample: means (slack) and peaks (violations).
type usage struct {
	cpu, mem, cpuPeak, memPeak float64
	memScored                  bool
}

// resourceScore accumulates one resource of one series.
type resourceScore struct {
	slack, usage float64
	viol, viol20 int64
	ratios       []float64
	changes      int64
	prevTarget   float64
	hasPrev      bool
}

func (r *resourceScore) observe(u, peak, target float64) {
	if target > u {
		r.slack += target - u
	}
	r.usage += u
	if peak > target {
		r.viol++
	}
	if peak > 1.2*target {
		r.viol20++
	}
	r.ratios = append(r.ratios, peak/target)
	if r.hasPrev && math.Abs(target-r.prevTarget) > 0.1*r.prevTarget {
		r.changes++
	}
	r.prevTarget, r.hasPrev = target, true
}

type seriesScore struct {
	n             int64
	unrecommended int64
	first, last   int64
	cpu, mem      resourceScore
}

func (s *seriesScore) observe(ok bool, ts int64, u *usage, r Recommendation) {
	if !ok {
		s.unrecommended++
		return
	}
	if s.n == 0 {
		s.first = ts
	}
	s.last = ts
	s.n++
	s.cpu.observe(u.cpu, u.cpuPeak, r.CPU.Target)
	if u.memScored {
		s.mem.observe(u.mem, u.memPeak, r.Memory.Target)
	}
}

// scoreAcc sums series scores into trace metrics.
type scoreAcc struct {
	series        int
	samples       int64
	unrecommended int64
	days          float64
	cpu, mem      resourceAcc
}

type resourceAcc struct {
	slack, usage      float64
	viol, viol20      int64
	meanSlackSum, p95 float64
	changes           int64
}

func (a *scoreAcc) merge(s *seriesScore) {
	a.unrecommended += s.unrecommended
	if s.n == 0 {
		return
	}
	a.series++
	a.samples += s.n
	a.days += float64(s.last-s.first) / 86400
	for _, p := range []struct {
		acc *resourceAcc
		rs  *resourceScore
	}{{&a.cpu, &s.cpu}, {&a.mem, &s.mem}} {
		p.acc.slack += p.rs.slack
		p.acc.usage += p.rs.usage
		p.acc.viol += p.rs.viol
		p.acc.viol20 += p.rs.viol20
		p.acc.meanSlackSum += p.rs.slack / float64(s.n)
		p.acc.changes += p.rs.changes
		if len(p.rs.ratios) == 0 {
			continue // memory of a CPU-only trace
		}
		sort.Float64s(p.rs.ratios)
		p.acc.p95 += p.rs.ratios[int(math.Ceil(0.95*float64(len(p.rs.ratios))))-1]
	}
}

func (a *scoreAcc) score(name string) PolicyScore {
	ps := PolicyScore{Policy: name, ScoredSeries: a.series, ScoredSamples: a.samples, Unrecommended: a.unrecommended}
	if a.samples == 0 {
		return ps
	}
	m := func(r *resourceAcc) Metrics {
		if r.usage == 0 && r.viol == 0 && r.slack == 0 {
			return Metrics{}
		}
		out := Metrics{
			RelativeSlack:             r.slack / r.usage,
			ViolationRate:             float64(r.viol) / float64(a.samples),
			ViolationOver20pctRate:    float64(r.viol20) / float64(a.samples),
			MeanSlackSumOverSeries:    r.meanSlackSum,
			UsageToTargetP95PerSeries: r.p95 / float64(a.series),
		}
		if a.days > 0 {
			out.ChangesPerSeriesDay = float64(r.changes) / a.days
		}
		return out
	}
	ps.CPU, ps.Memory = m(&a.cpu), m(&a.mem)
	return ps
}
