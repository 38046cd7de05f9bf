package report

import (
	"math/rand"
	"testing"
	"time"
)

// TestFreshForCoversTheFetchCadence: the aggregator recomputes a workload's
// recommendation every step (a fold late by up to a grace), an agent
// fetches once a report period (a fetch late by up to a grace) and keeps
// the last answer; at every moment after its first fetch of a computed
// recommendation, the copy it holds must be fresh (Prefer), whatever the
// step, the period and their phases. The old rule, step+2×grace, fails
// here whenever the step is shorter than a period plus two graces (the
// e2e TestNodeAgentReportsToAggregator, step 20 s and period 10 s, saw the
// agent decide on its own for minutes).
func TestFreshForCoversTheFetchCadence(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	rec := Recommendation{CPU: Estimate{Target: 1}, Memory: Estimate{Target: 1}}
	for trial := 0; trial < 2000; trial++ {
		period := time.Duration(1+rng.Intn(120)) * time.Second
		step := time.Duration(rng.Int63n(int64(20 * period)))
		grace := time.Duration(rng.Int63n(int64(period/2) + 1))
		late := func() time.Duration { return time.Duration(rng.Int63n(int64(grace) + 1)) }
		// The aggregator's computations, over about 30 steps or periods.
		horizon := 30 * max(step, period)
		var computed []time.Time
		t0 := time.Unix(0, 0).Add(time.Duration(rng.Int63n(int64(period))))
		for c := t0; c.Before(t0.Add(horizon)); c = c.Add(max(step, time.Millisecond) + late()) {
			computed = append(computed, c)
		}
		// The agent's fetches: each takes the latest computed by then.
		var held *WorkloadRecommendation
		phase := time.Duration(rng.Int63n(int64(period)))
		for f := t0.Add(phase); f.Before(t0.Add(horizon)); f = f.Add(period) {
			at := f.Add(late())
			// Before this fetch lands, the copy held must still be fresh.
			if held != nil {
				if _, fresh := Prefer(held, Recommendation{}, at.Add(-time.Nanosecond)); !fresh {
					t.Fatalf("trial %d: step %v, period %v, grace %v: the copy computed at %v went stale at %v, before the fetch at %v replaced it",
						trial, step, period, grace, held.Updated.Sub(t0), held.FreshUntil.Sub(t0), at.Sub(t0))
				}
			}
			var latest time.Time
			for _, c := range computed {
				if !c.After(at) {
					latest = c
				}
			}
			if latest.IsZero() {
				continue
			}
			held = &WorkloadRecommendation{Updated: latest, FreshUntil: latest.Add(FreshFor(step, period, grace)), Recommendation: rec}
		}
	}
}

// TestFreshForEndsAfterTheAggregatorGoes: once the aggregator stops, an
// agent's copy goes stale within a step, a period and two graces of its
// computation: the agent falls back to its own recommendation.
func TestFreshForEndsAfterTheAggregatorGoes(t *testing.T) {
	c := time.Unix(1000, 0)
	step, period, grace := 20*time.Second, 10*time.Second, 2*time.Second
	w := &WorkloadRecommendation{Updated: c, FreshUntil: c.Add(FreshFor(step, period, grace)), Recommendation: Recommendation{CPU: Estimate{Target: 1}, Memory: Estimate{Target: 1}}}
	if _, fresh := Prefer(w, Recommendation{}, c.Add(33*time.Second)); !fresh {
		t.Fatal("stale before step+period+2×grace")
	}
	if _, fresh := Prefer(w, Recommendation{}, c.Add(34*time.Second)); fresh {
		t.Fatal("fresh at step+period+2×grace")
	}
}
