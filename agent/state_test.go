//go:build linux

package agent

import (
	"context"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/agent/collector"
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

// TestLastSamplesOnlyOfTrackedContainers: a sampling round read before a
// pod was forgotten and handed to the sinks after it, and a container that
// stopped, leave no last sample behind (each would stay until the agent
// restarts).
func TestLastSamplesOnlyOfTrackedContainers(t *testing.T) {
	r := unitRightsizer(t)
	p := r.addPod(t, "a")
	uid := string(p.UID)
	r.mu.Lock()
	r.pods[uid].containers = map[string]rsContainer{"app": {id: "c1"}}
	r.mu.Unlock()
	round := []collector.Sample{{Target: &collector.Target{PodUID: uid, Container: "app", ID: "c1"}, MemoryWorkingSet: 1 << 20}}
	r.Round(time.Now(), round)
	if n := r.c.stateSizes()["last-samples"]; n != 1 {
		t.Fatalf("last-samples %d for one tracked container", n)
	}
	r.untrack(uid)
	r.Round(time.Now(), round) // read before the untrack, handed over after it
	if n := r.c.stateSizes()["last-samples"]; n != 0 {
		t.Fatalf("last-samples %d after the pod was forgotten and a late round", n)
	}

	r.addPod(t, "a")
	r.mu.Lock()
	r.pods[uid].containers = map[string]rsContainer{"app": {id: "c1"}}
	r.mu.Unlock()
	r.Round(time.Now(), round)
	r.track(context.Background(), p, r.c.podInfo(p)) // its container no longer runs
	if n := r.c.stateSizes()["last-samples"]; n != 0 {
		t.Fatalf("last-samples %d after the container stopped", n)
	}
}
