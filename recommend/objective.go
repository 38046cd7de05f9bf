package recommend

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// tracker follows one resource of one container: how often usage exceeded
// the target in force, and (objective mode) the tail share ε whose
// percentile 1 − ε the target is built from.
//
// Only the past is used: a sample is compared with the target in force
// when it arrives (the one the previous Recommend returned), and ε moves
// at Recommend from the counts so far. Counting costs two additions per
// sample; the decay is applied once per Recommend, so samples since the
// previous call count with full weight.
type tracker struct {
	inForce float64 // target the samples are compared with; 0: none yet
	viol, n float64 // decayed counts of samples above inForce and of all
	last    time.Time
	eps     float64 // objective mode: 1 − percentile in use; 0: not started
	// margin is the objective's extra headroom once ε is at its floor
	// (usage that keeps growing past its own history): target ×(1+margin).
	margin float64
	// held: the target in force is above the estimate, kept by hysteresis.
	// Too few violations then say nothing about ε (anti-windup: ε would
	// otherwise creep up while the dead band hides it, then overshoot).
	held bool
	// tickViol and tickN count violations and samples since the fleet
	// controller's last tick (FleetObjective); noFleet marks a container
	// whose last recommendation did not use the fleet's λ (an override
	// turned the cost off), which the controller then leaves out.
	tickViol, tickN float64
	noFleet         bool
}

// The controller moves log ε by the log of objective/realised rate per
// objectiveResponse of elapsed time: a rate twice the objective for a day
// halves ε. ε stays within [objective/objectiveRange, objective·
// objectiveRange] (and ≤ 0.5) so that a quiet or a wild stretch cannot
// push the percentile to an extreme it would take days to leave.
const (
	// defaultTrackHalfLife is the memory of the realised rate reported
	// without an objective (and for the vpa engine).
	defaultTrackHalfLife = 72 * time.Hour
	objectiveResponse    = 24 * time.Hour
	objectiveRange       = 20.0
	// marginPace converts the remaining log correction into log margin: a
	// rate 20× the objective for a day adds about 16 % headroom.
	marginPace         = 0.05
	maxObjectiveMargin = 1.0
)

func (t *tracker) observe(v float64) {
	if t.inForce > 0 {
		t.n++
		t.tickN++
		if v > t.inForce {
			t.viol++
			t.tickViol++
		}
	}
}

// rate is the realised violation rate, shrunk toward prior by the weight of
// 1/prior samples (one expected violation) so that a short history does
// not read as 0 % or 100 %. Without prior (0) it is the raw rate, or 0.
func (t *tracker) rate(prior float64) float64 {
	if prior > 0 {
		return (t.viol + 1) / (t.n + 1/prior)
	}
	if t.n == 0 {
		return 0
	}
	return t.viol / t.n
}

// step decays the counts to now and, with an objective, moves ε. It is
// called once per Recommend, before the new target is computed.
func (t *tracker) step(rp *ResourcePolicy, now time.Time) {
	if t.last.IsZero() || !now.After(t.last) {
		if t.last.IsZero() {
			t.last = now
		}
		if rp.Objective > 0 && t.eps == 0 {
			t.eps = rp.Objective
		}
		return
	}
	dt := now.Sub(t.last)
	t.last = now
	hl := time.Duration(rp.ObjectiveHalfLife)
	if hl <= 0 {
		hl = defaultTrackHalfLife
	}
	d := math.Exp2(-float64(dt) / float64(hl))
	t.viol *= d
	t.n *= d
	if rp.Objective <= 0 {
		return
	}
	if t.eps == 0 {
		t.eps = rp.Objective
	}
	r := t.rate(rp.Objective)
	f := math.Pow(rp.Objective/r, float64(dt)/float64(objectiveResponse))
	lo, hi := rp.Objective/objectiveRange, min(rp.Objective*objectiveRange, 0.5)
	switch {
	case f < 1 && t.eps*f < lo:
		// Too many violations even at the top percentile: the rest of the
		// correction becomes a margin, at a fraction of the ratio's pace.
		t.margin = (1+t.margin)*math.Pow(lo/(t.eps*f), marginPace) - 1
		t.eps = lo
	case f > 1 && t.held:
		// keep ε: the estimate is not what is in force
	case f > 1 && t.margin > 0:
		// Fewer violations than allowed: give the margin back first.
		t.margin = max((1+t.margin)*math.Pow(1/f, marginPace)-1, 0)
	default:
		t.eps = min(max(t.eps*f, lo), hi)
	}
	t.margin = min(t.margin, maxObjectiveMargin)
}

// Explanation says where one resource's target came from, for an
// annotation or `cgpilotctl explain`.
type Explanation struct {
	// Mode is how the target was chosen: "objective" (percentile tracked
	// to a stated violation rate), "cost" (newsvendor optimum),
	// "percentile" (fixed percentile) or "vpa" (upstream VPA's estimator).
	Mode string `json:"mode"`
	// Objective is the stated violation rate (0: none stated).
	Objective float64 `json:"objective,omitempty"`
	// Percentile is the percentile of the decayed usage histogram the
	// target was built from, and Margin the target's excess over that
	// percentile's value (target / value − 1), which includes saturation,
	// the short-history widening, floors, rounding and the hysteresis that
	// held an older, higher target.
	Percentile float64 `json:"percentile"`
	Margin     float64 `json:"margin"`
	// RealisedViolationRate is the decayed share of samples above the
	// target in force, over SampleWeight samples (decayed count).
	RealisedViolationRate float64 `json:"realisedViolationRate"`
	SampleWeight          float64 `json:"sampleWeight"`
	// History is the span of samples the recommendation rests on.
	History Duration `json:"history"`
	// ViolationCost is the cost of one violation (cores or bytes of idle
	// reservation) the target was optimised with, when it was: the
	// policy's, or the fleet controller's λ (mode "fleet").
	ViolationCost float64 `json:"violationCost,omitempty"`
	// FleetObjective is the stated violation rate of all the node's
	// containers together, and FleetRealisedViolationRate theirs, decayed.
	FleetObjective             float64 `json:"fleetObjective,omitempty"`
	FleetRealisedViolationRate float64 `json:"fleetRealisedViolationRate,omitempty"`
}

// String is the explanation in one line, for an annotation or a table:
// "objective 1% → p99.2 +12%, realised 0.8% over 3d (850 samples)".
func (e Explanation) String() string {
	var b strings.Builder
	switch {
	case e.Objective > 0:
		fmt.Fprintf(&b, "objective %s → ", pct(e.Objective))
	case e.FleetObjective > 0:
		fmt.Fprintf(&b, "node objective %s (node realised %s) → %s cost %.3g → ", pct(e.FleetObjective), pct(e.FleetRealisedViolationRate), e.Mode, e.ViolationCost)
	default:
		fmt.Fprintf(&b, "%s → ", e.Mode)
	}
	fmt.Fprintf(&b, "p%s %+.0f%%, realised %s over %s (%.0f samples)", strconv.FormatFloat(100*e.Percentile, 'f', -1, 64)[:min(len(strconv.FormatFloat(100*e.Percentile, 'f', -1, 64)), 5)],
		100*e.Margin, pct(e.RealisedViolationRate), time.Duration(e.History).Round(time.Hour), e.SampleWeight)
	return b.String()
}

func pct(v float64) string { return strconv.FormatFloat(100*v, 'g', 3, 64) + "%" }

// explain fills an Explanation for a target built from value, the
// histogram's value at percentile p.
func (t *tracker) explain(mode string, objective, p, value, target float64, history time.Duration) Explanation {
	e := Explanation{Mode: mode, Objective: objective, Percentile: p, RealisedViolationRate: t.rate(0), SampleWeight: t.n, History: Duration(history)}
	if value > 0 {
		e.Margin = target/value - 1
	}
	return e
}
