package recommend

import (
	"fmt"
	"math"
	"time"
)

// resourceState is the cgpilot estimator of one resource of one container.
type resourceState struct {
	hist, fast *Histogram
	// Peak aggregation (PeakInterval > 0): the current interval's end and peak.
	peakEnd time.Time
	peak    float64
	// held is the target in force (hysteresis and step limits apply to it).
	held float64
	// season is the time-of-day state (DailyPeriods > 0), budget the
	// resize budget per day this container brought to its node at its
	// last recommendation.
	season *season
	budget float64
}

func newResourceState(rp *ResourcePolicy, base HistogramOptions, memo *decayMemo) resourceState {
	o := base
	o.HalfLife = time.Duration(rp.HalfLife)
	s := resourceState{hist: mustHistogram(o, memo)}
	if rp.FastHalfLife > 0 {
		o.HalfLife = time.Duration(rp.FastHalfLife)
		s.fast = mustHistogram(o, memo)
	}
	if rp.DailyPeriods > 0 {
		s.season = newSeason(rp.DailyPeriods, base, memo)
	}
	return s
}

func (s *resourceState) add(rp *ResourcePolicy, t time.Time, v float64) {
	if s.season != nil {
		s.season.add(t, v)
	}
	iv := time.Duration(rp.PeakInterval)
	if iv <= 0 {
		s.hist.AddSample(v, 1, t)
		if s.fast != nil {
			s.fast.AddSample(v, 1, t)
		}
		return
	}
	// One peak per interval of a fixed grid, timestamped at the interval's
	// end; a larger sample replaces the interval's peak.
	if t.Before(s.peakEnd) {
		if v <= s.peak {
			return
		}
		s.hist.SubtractSample(s.peak, 1, s.peakEnd)
		if s.fast != nil {
			s.fast.SubtractSample(s.peak, 1, s.peakEnd)
		}
	} else {
		s.peakEnd = time.Unix(0, 0).Add(t.Sub(time.Unix(0, 0)).Truncate(iv) + iv)
	}
	s.peak = v
	s.hist.AddSample(v, 1, s.peakEnd)
	if s.fast != nil {
		s.fast.AddSample(v, 1, s.peakEnd)
	}
}

// raw is the unclamped estimate at percentile p: the percentile / saturation.
func (s *resourceState) raw(rp *ResourcePolicy, p float64) float64 {
	return s.hist.Percentile(p) / rp.Saturation
}

// target is the unclamped target estimate, with the percentile and the
// histogram value it rests on and the mode that chose it: the tracked
// percentile 1 − ε (objective), the policy's percentile, or the cost
// optimum when that is larger; the fast histogram can only raise it.
func (s *resourceState) target(rp *ResourcePolicy, t *tracker, lambda float64) (est, p, value, cost float64, mode string) {
	mode, p = "percentile", rp.Percentile
	if rp.Objective > 0 && t.eps > 0 {
		mode, p = "objective", 1-t.eps
	}
	value = s.hist.Percentile(p)
	cost = rp.ViolationCost
	costMode := "cost"
	switch {
	case rp.FleetObjective > 0 && lambda > 0:
		cost, costMode = lambda, "fleet"
	case rp.RelativeViolationCost > 0:
		cost = rp.RelativeViolationCost * s.hist.mean()
	}
	if cost > 0 {
		if c := s.hist.costOptimum(cost); c > value {
			value, mode = c, costMode
			p = s.hist.cdf(c)
		}
	}
	if s.fast != nil {
		value = max(value, s.fast.Percentile(rp.FastPercentile))
	}
	return value * (1 + t.margin) / rp.Saturation, p, value, cost, mode
}

func clampRound(rp *ResourcePolicy, v float64) float64 {
	v = max(v, rp.Min)
	if rp.Max > 0 {
		v = min(v, rp.Max)
	}
	if rp.Round > 0 {
		v = math.Ceil(v/rp.Round-1e-9) * rp.Round
		if rp.Max > 0 && v > rp.Max {
			v = rp.Max
		}
	}
	return v
}

// propose applies hysteresis and step limits to a new clamped estimate and
// returns the target it would put in force (the one in force: no change).
// A cyclic container follows its periods: a symmetric seasonBand, no step
// limit.
func (s *resourceState) propose(rp *ResourcePolicy, est float64, cyclic bool) float64 {
	h := s.held
	if h == 0 {
		return est
	}
	up, down := rp.UpBand, rp.DownBand
	if cyclic {
		up, down = seasonBand, seasonBand
	}
	switch {
	case est > h*(1+up):
		if rp.MaxStepUp > 0 && !cyclic {
			est = min(est, h*(1+rp.MaxStepUp))
		}
	case est < h*(1-down):
		if rp.MaxStepDown > 0 && !cyclic {
			est = max(est, h*(1-rp.MaxStepDown))
		}
	default:
		return h
	}
	return clampRound(rp, est)
}

// container is the state of one container under one policy.
type container struct {
	// detached: the container left its Recommender's map (Forget or a
	// loaded checkpoint); Recorders holding it look their id up again.
	detached bool

	vpa *vpaContainer // EngineVPA only

	cpu, mem    resourceState
	cpuT, memT  tracker // realised violations; objective mode (both engines report them)
	first, last time.Time
	samples     int64

	spec      Resources
	oomKills  []time.Time // within OOMWindow
	oomLimit  float64     // memory limit demanded by the OOM formula
	lastOOMAt time.Time
}

// newContainer returns an empty container whose histograms share memo
// (nil: none); memo's users must be serialised.
func newContainer(p *Policy, memo *decayMemo) *container {
	if p.Engine == EngineVPA {
		return &container{vpa: newVPAContainer(&p.VPA, memo)}
	}
	c := &container{
		cpu: newResourceState(&p.CPU, CPUHistogramOptions(), memo),
		mem: newResourceState(&p.Memory, MemoryHistogramOptions(), memo),
	}
	if budgetActive(p, &p.CPU) {
		c.cpu.budget = p.ResizeBudget
	}
	if budgetActive(p, &p.Memory) {
		c.mem.budget = p.ResizeBudget
	}
	return c
}

// established reports whether a container with this much history is past
// its young days under p: ConfidenceHistory (its target is no longer
// widened) and MinHistory. Only an established container is a member of
// the fleet (fleet.go) and has its changes priced by the node's resize
// budget (budget.go); a young one changes freely.
func established(p *Policy, life time.Duration) bool {
	return life >= time.Duration(max(p.ConfidenceHistory, p.MinHistory))
}

func (c *container) add(p *Policy, s Sample) {
	if c.first.IsZero() {
		c.first = s.Time
	}
	c.last = s.Time
	c.samples++
	c.cpuT.observe(s.CPUCores)
	c.memT.observe(s.MemoryBytes)
	if c.vpa != nil {
		c.vpa.addCPU(s.Time, s.CPUCores)
		c.vpa.addMemory(s.Time, s.MemoryBytes)
		return
	}
	c.cpu.add(&p.CPU, s.Time, s.CPUCores)
	c.mem.add(&p.Memory, s.Time, s.MemoryBytes)
}

// oomBump is VPA's histogram bump for an OOM kill: max(+100 MiB, ×1.2).
func oomBump(usage float64) float64 { return max(usage+100*mib, usage*1.2) }

// OOMLimit is the memory limit after an OOM kill:
//
//	max(currentLimit, usageAtKill) × (1 + factor)^kills, capped by maxAllowed
//
// where kills counts the kills within the policy's window, this one
// included. maxAllowed ≤ 0 means no cap.
func OOMLimit(currentLimit, usageAtKill, factor float64, kills int, maxAllowed float64) float64 {
	l := max(currentLimit, usageAtKill) * math.Pow(1+factor, float64(kills))
	if maxAllowed > 0 {
		l = min(l, maxAllowed)
	}
	return l
}

func (c *container) recordOOM(p *Policy, ev OOMEvent) {
	if c.vpa != nil {
		c.vpa.recordOOM(ev.Time, ev.RequestBytes)
		return
	}
	win := time.Duration(p.OOMWindow)
	kept := c.oomKills[:0]
	for _, k := range c.oomKills {
		if ev.Time.Sub(k) < win {
			kept = append(kept, k)
		}
	}
	c.oomKills = append(kept, ev.Time)
	limit := ev.LimitBytes
	if limit == 0 {
		limit = c.spec.MemoryLimit
	}
	c.oomLimit = OOMLimit(max(limit, c.oomLimit), ev.UsageBytes, p.OOMFactor, len(c.oomKills), p.Memory.Max)
	c.lastOOMAt = ev.Time
	// The histogram learns the bumped usage as a peak, as VPA's does.
	c.mem.add(&p.Memory, ev.Time, oomBump(ev.UsageBytes))
	if c.mem.held > 0 {
		c.mem.held = max(c.mem.held, clampRound(&p.Memory, oomBump(ev.UsageBytes)))
	}
}

// fleetView is what a fleet controller tells a container: the violation
// cost λ in force and the fleet's realised violation rate.
type fleetView struct{ lambda, rate float64 }

// fleetViews are the views for CPU and memory (zero: no fleet controller).
type fleetViews [2]fleetView

func (c *container) recommend(p *Policy, now time.Time, fv fleetViews, bv budgetViews) (Recommendation, bool) {
	if c.samples == 0 {
		return Recommendation{}, false
	}
	life := c.last.Sub(c.first)
	if c.vpa != nil {
		a := c.vpa.recommend(&p.VPA)
		r := Recommendation{Time: now,
			CPU:    Estimate{Target: float64(a.targetCPU) / 1000, Lower: float64(a.lowerCPU) / 1000, Upper: float64(a.upperCPU) / 1000},
			Memory: Estimate{Target: float64(a.targetMem), Lower: float64(a.lowerMem), Upper: float64(a.upperMem)},
		}
		cfg := &p.VPA
		for _, x := range []struct {
			t      *tracker
			e      *Estimate
			h      *Histogram
			p      float64
			factor float64
		}{{&c.cpuT, &r.CPU, c.vpa.cpu, cfg.TargetCPUPercentile, 1}, {&c.memT, &r.Memory, c.vpa.mem, cfg.TargetMemoryPercentile, 1}} {
			x.t.step(&ResourcePolicy{}, now)
			x.e.Explain = x.t.explain("vpa", 0, x.p, x.h.Percentile(x.p)*x.factor, x.e.Target, life)
			x.t.inForce = x.e.Target
		}
		return r, true
	}
	if life < time.Duration(p.MinHistory) {
		return Recommendation{}, false
	}
	widen := 1.0
	if ch := time.Duration(p.ConfidenceHistory); ch > 0 && life < ch {
		widen += p.ShortHistoryMargin * (1 - float64(life)/float64(ch))
	}
	est := func(rs *resourceState, t *tracker, rp *ResourcePolicy, fl fleetView, b *budgetState, req, lim float64) Estimate {
		t.step(rp, now)
		raw, pct, value, cost, mode := rs.target(rp, t, fl.lambda)
		// A cyclic container takes the coming period's target.
		hist, horizon, cyclic := rs.hist, 1.0, false
		if rs.season != nil && life >= seasonMinDays*24*time.Hour && rs.season.detect(now) {
			ph := rs.season.periods[rs.season.period(now)]
			if !ph.IsEmpty() && ph.total > 0 {
				cyclic, hist, horizon = true, ph, 1/float64(len(rs.season.periods))
				value, pct = ph.Percentile(rp.Percentile), rp.Percentile
				mode = fmt.Sprintf("daily period %d/%d", rs.season.period(now)+1, len(rs.season.periods))
				if cost > 0 {
					if c := ph.costOptimum(cost); c > value {
						value, pct = c, ph.cdf(c)
					}
				}
				raw = value * (1 + t.margin) / rp.Saturation
			}
		}
		target := rs.propose(rp, clampRound(rp, raw*widen), cyclic)
		rs.budget = 0
		if b != nil && budgetActive(p, rp) {
			rs.budget = p.ResizeBudget
			// A young container (still widened) changes freely, outside
			// the node's count.
			if target != rs.held && rs.held > 0 && established(p, life) &&
				!b.offer(rs, budgetValue(hist, rs.held, target, cost, c.samplesPerDay(), horizon), target > rs.held, now) {
				target = rs.held
			}
		}
		rs.held = target
		e := Estimate{
			Target: target,
			Lower:  clampRound(rp, rs.raw(rp, 0.5)),
			Upper:  clampRound(rp, rs.raw(rp, 1)*widen),
		}
		e.Explain = t.explain(mode, rp.Objective, pct, value, e.Target, life)
		e.Explain.ViolationCost = cost
		if rp.FleetObjective > 0 {
			e.Explain.FleetObjective, e.Explain.FleetRealisedViolationRate = rp.FleetObjective, fl.rate
		}
		t.noFleet = rp.FleetObjective == 0
		t.inForce = e.Target
		t.held = e.Target > clampRound(rp, raw*widen)*(1+1e-9)
		switch {
		case req > 0 && lim > 0:
			e.Limit = e.Target * lim / req
		case rp.LimitRatio > 0:
			e.Limit = e.Target * rp.LimitRatio
		}
		if rp.Max > 0 && e.Limit > rp.Max {
			e.Limit = max(rp.Max, e.Target)
		}
		return e
	}
	r := Recommendation{Time: now,
		CPU:    est(&c.cpu, &c.cpuT, &p.CPU, fv[0], bv[0], c.spec.CPURequest, c.spec.CPULimit),
		Memory: est(&c.mem, &c.memT, &p.Memory, fv[1], bv[1], c.spec.MemoryRequest, c.spec.MemoryLimit),
	}
	if c.oomLimit > 0 && now.Sub(c.lastOOMAt) < time.Duration(p.OOMWindow) {
		r.Memory.Limit = max(r.Memory.Limit, c.oomLimit)
	}
	return r, true
}
