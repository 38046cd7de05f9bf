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
	// Rows, if set, receives every recommendation row: in (series, ts)
	// order, or, for a policy with a FleetObjective (series replayed
	// together), in (ts, series) order.
	Rows func(RecRow) error
	// Progress, if set, is called with (done, total) after each series, or
	// after each boundary when the series are replayed together.
	Progress func(done, total int)
	// Workers replays series in parallel (default 1); the result is the
	// same.
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
//
// The whole trace is one node. When the policy has a FleetObjective, the
// series advance together, boundary by boundary, so that its controller
// sees at T every series' samples before T and nothing after (Workers
// split each boundary's series). Otherwise no state is shared between
// series and each is replayed on its own, from start to end, which gives
// the same result with a far smaller working set (Workers take whole
// series). The result does not depend on Workers.
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
	rs := make([]*seriesReplay, 0, len(tr.Series))
	firstT, lastT := int64(math.MaxInt64), int64(math.MinInt64)
	for _, s := range tr.Series {
		sr := newSeriesReplay(s, anchor, step, int64(opt.Warmup/time.Second), &opt)
		rs = append(rs, sr)
		if len(s.TS) > 0 {
			firstT, lastT = min(firstT, sr.firstT), max(lastT, s.TS[len(s.TS)-1])
		}
	}
	fleets := newReplayFleet(&opt.Policy)
	var pol, ctl scoreAcc
	var err error
	if fleets.active() {
		if err = replayTogether(rs, fleets, firstT, lastT, step, &opt); err == nil {
			for _, sr := range rs {
				pol.merge(&sr.policy)
				ctl.merge(&sr.control)
			}
		}
	} else {
		err = replayEach(rs, &opt, &pol, &ctl)
	}
	if err != nil {
		return Summary{}, err
	}
	return Summary{
		Series: len(tr.Series), Rows: tr.Rows, Step: opt.Step.String(), Warmup: opt.Warmup.String(), Anchor: anchor,
		Policy: pol.score(opt.Policy.Name), Control: ctl.score(opt.Control.Name),
		PolicyJSON: opt.Policy, ControlName: opt.Control.Name,
		MemoryScored: tr.HasMemory, ScorePeaks: opt.ScorePeaks,
	}, nil
}

// replayEach replays every series on its own, workers taking whole series;
// rows, progress and the merge of the scores (while later series still
// run) come in series order.
func replayEach(rs []*seriesReplay, opt *ReplayOptions, pol, ctl *scoreAcc) error {
	workers := max(opt.Workers, 1)
	done := make([]chan struct{}, len(rs))
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
				if i >= len(rs) {
					return
				}
				sr := rs[i]
				if len(sr.s.TS) > 0 {
					sr.feed(sr.firstT)
					for T := sr.firstT; T <= sr.last; T += sr.stepSec {
						if row, ok := sr.step(T, fleetViews{}, budgetViews{}); ok && opt.Rows != nil {
							sr.rows = append(sr.rows, row)
						}
					}
				}
				close(done[i])
			}
		}()
	}
	var sinkErr error
	for i, sr := range rs {
		<-done[i]
		for _, row := range sr.rows {
			if sinkErr == nil {
				sinkErr = opt.Rows(row)
			}
		}
		pol.merge(&sr.policy)
		ctl.merge(&sr.control)
		sr.rows, sr.pc, sr.cc = nil, nil, nil
		if opt.Progress != nil {
			opt.Progress(i+1, len(rs))
		}
	}
	return sinkErr
}

// replayTogether advances all series boundary by boundary, the fleet
// controllers ticking at each boundary before any series recommends;
// workers split each boundary's series, rows come in (ts, series) order.
func replayTogether(rs []*seriesReplay, fleets *replayFleet, firstT, lastT, step int64, opt *ReplayOptions) error {
	workers := max(opt.Workers, 1)
	par := func(f func(i int, sr *seriesReplay)) {
		if workers == 1 {
			for i, sr := range rs {
				f(i, sr)
			}
			return
		}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(rs); i += workers {
					f(i, rs[i])
				}
			}()
		}
		wg.Wait()
	}
	if firstT > lastT {
		return nil
	}
	steps := int((lastT-firstT)/step) + 1
	rows := make([]RecRow, len(rs))
	has := make([]bool, len(rs))
	par(func(_ int, sr *seriesReplay) { sr.feed(firstT) })
	var sinkErr error
	for k := range steps {
		T := firstT + int64(k)*step
		fv, bv := fleets.tick(time.Unix(T, 0), rs)
		stepAll := par
		if fleets.budgeted() {
			// The allocator grants in series order, as a node's decision
			// round asks its containers in order.
			stepAll = func(f func(i int, sr *seriesReplay)) {
				for i, sr := range rs {
					f(i, sr)
				}
			}
		}
		stepAll(func(i int, sr *seriesReplay) {
			if !sr.active(T) {
				if len(sr.s.TS) > 0 && T < sr.firstT {
					sr.feed(T + step) // history before its first boundary
				}
				return
			}
			rows[i], has[i] = sr.step(T, fv, bv)
		})
		for i := range rs {
			if has[i] && opt.Rows != nil && sinkErr == nil {
				sinkErr = opt.Rows(rows[i])
			}
			has[i] = false
		}
		if opt.Progress != nil {
			opt.Progress(k+1, steps)
		}
	}
	return sinkErr
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// seriesReplay is one series' state in a replay: its policy and control
// containers, how far it has been fed and scored, and its scores.
type seriesReplay struct {
	s               *Series
	opt             *ReplayOptions
	pc, cc          *container
	firstT, last    int64 // first boundary after the first sample; last sample
	stepSec         int64
	scoreFrom       int64
	fed, scored     int
	policy, control seriesScore
	rows            []RecRow // replayEach: this series' rows until emitted
}

func newSeriesReplay(s *Series, anchor, step, warmup int64, opt *ReplayOptions) *seriesReplay {
	sr := &seriesReplay{s: s, opt: opt, stepSec: step}
	if len(s.TS) == 0 {
		return sr
	}
	memo := new(decayMemo) // this series' containers only
	sr.pc, sr.cc = newContainer(&opt.Policy, memo), newContainer(&opt.Control, memo)
	first := s.TS[0]
	sr.last = s.TS[len(s.TS)-1]
	sr.scoreFrom = first + warmup
	sr.firstT = anchor + (floorDiv(first-anchor, step)+1)*step
	return sr
}

// feed adds the samples before T to both containers.
func (sr *seriesReplay) feed(T int64) {
	s := sr.s
	for ; sr.fed < len(s.TS) && s.TS[sr.fed] < T; sr.fed++ {
		smp := Sample{Time: time.Unix(s.TS[sr.fed], 0), CPUCores: s.CPU[sr.fed], MemoryBytes: at(s.Mem, sr.fed)}
		sr.pc.add(&sr.opt.Policy, smp)
		sr.cc.add(&sr.opt.Control, smp)
	}
}

// active reports whether the series has a recommendation at boundary T.
func (sr *seriesReplay) active(T int64) bool {
	return len(sr.s.TS) > 0 && T >= sr.firstT && T <= sr.last
}

// step recommends at boundary T (the series must be active), scores the
// samples in [T, T+step) and feeds them. It returns the row when the
// replay wants rows.
func (sr *seriesReplay) step(T int64, fv fleetViews, bv budgetViews) (RecRow, bool) {
	s, opt := sr.s, sr.opt
	now := time.Unix(T, 0)
	pr, pok := sr.pc.recommend(&opt.Policy, now, fv, bv)
	cr, cok := sr.cc.recommend(&opt.Control, now, fleetViews{}, budgetViews{})
	var row RecRow
	if opt.Rows != nil {
		row = RecRow{TS: T, Series: s.Name, OK: pok, Policy: pr, Control: cr}
	}
	for sr.scored = max(sr.scored, sr.fed); sr.scored < len(s.TS) && s.TS[sr.scored] < T+sr.stepSec; sr.scored++ {
		ts := s.TS[sr.scored]
		if ts < sr.scoreFrom {
			continue
		}
		u := usage{cpu: s.CPU[sr.scored], mem: at(s.Mem, sr.scored), memScored: s.Mem != nil}
		u.cpuPeak, u.memPeak = u.cpu, u.mem
		if opt.ScorePeaks {
			if v := at(s.CPUMax, sr.scored); v == v && s.CPUMax != nil {
				u.cpuPeak = max(v, u.cpu)
			}
			if v := at(s.MemMax, sr.scored); v == v && s.MemMax != nil {
				u.memPeak = max(v, u.mem)
			}
		}
		sr.policy.observe(pok, ts, &u, pr)
		sr.control.observe(cok, ts, &u, cr)
	}
	sr.feed(T + sr.stepSec)
	return row, opt.Rows != nil
}

// replayFleet is the policy's fleet controllers in a replay: the trace's
// series are one node's containers.
type replayFleet struct {
	p       *Policy
	fleet   [2]fleetState
	members []fleetMember
	budget  [2]budgetState
}

func newReplayFleet(p *Policy) *replayFleet { return &replayFleet{p: p} }

// active reports whether the policy has a fleet controller or a resize
// budget: node-level state.
func (f *replayFleet) active() bool {
	return f.p.Engine == EngineCgpilot && (f.p.CPU.FleetObjective > 0 || f.p.Memory.FleetObjective > 0) || f.budgeted()
}

// budgeted reports whether the policy's changes go through a resize
// allocator.
func (f *replayFleet) budgeted() bool {
	return budgetActive(f.p, &f.p.CPU) || budgetActive(f.p, &f.p.Memory)
}

// tick runs the controllers and allocators at now over the series active
// at now, in series order, and returns the views for the boundary.
func (f *replayFleet) tick(now time.Time, rs []*seriesReplay) (fleetViews, budgetViews) {
	var fv fleetViews
	var bv budgetViews
	if f.p.Engine != EngineCgpilot {
		return fv, bv
	}
	T := now.Unix()
	if f.budgeted() {
		for i := range f.budget {
			var rate float64
			for _, sr := range rs {
				if !sr.active(T) || sr.pc.samples == 0 || !established(f.p, sr.pc.last.Sub(sr.pc.first)) {
					continue
				}
				if i == 0 {
					rate += sr.pc.cpu.budget
				} else {
					rate += sr.pc.mem.budget
				}
			}
			f.budget[i].tick(now, rate)
			bv[i] = &f.budget[i]
		}
	}
	for i, rp := range []*ResourcePolicy{&f.p.CPU, &f.p.Memory} {
		if rp.FleetObjective <= 0 {
			continue
		}
		f.members = f.members[:0]
		for _, sr := range rs {
			if !sr.active(T) || sr.pc.samples == 0 || !established(f.p, sr.pc.last.Sub(sr.pc.first)) {
				continue
			}
			if i == 0 {
				f.members = append(f.members, fleetMember{hist: sr.pc.cpu.hist, t: &sr.pc.cpuT})
			} else {
				f.members = append(f.members, fleetMember{hist: sr.pc.mem.hist, t: &sr.pc.memT})
			}
		}
		fl := &f.fleet[i]
		fl.tick(rp, now, f.members)
		fv[i] = fleetView{lambda: fl.lambda, rate: fl.rate()}
		if fv[i].lambda == 0 {
			fv[i].lambda = rp.ViolationCost
		}
	}
	return fv, bv
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
