//go:build linux

package agent

import (
	"testing"
	"time"
)

// TestStateEntriesFollowThePods: cgpilot_state_entries counts what the
// agent keeps per pod, and forgotten pods leave nothing behind in the
// tables untrack owns (the pending annotations go with the status worker,
// the histograms after forgetAfter).
func TestStateEntriesFollowThePods(t *testing.T) {
	r := unitRightsizer(t)
	r.c.metrics.reg.MustRegister(stateCollector{r.c})
	a, b := r.addPod(t, "a"), r.addPod(t, "b")
	r.decideAll(time.Now())
	series := func() map[string]float64 {
		mfs, err := r.c.metrics.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "cgpilot_state_entries" {
				continue
			}
			for _, m := range mf.GetMetric() {
				out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
		return out
	}
	s := series()
	if s["tracked-pods"] != 2 || s["known-pods"] != 0 || len(s) < 15 {
		t.Fatalf("with two tracked pods: %v", s)
	}
	r.untrack(string(a.UID))
	r.untrack(string(b.UID))
	for table, n := range series() {
		if n != 0 && table != "pending-recommendations" {
			t.Errorf("%s: %v entries after both pods were forgotten", table, n)
		}
	}
}
