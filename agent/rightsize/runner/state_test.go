//go:build linux

package runner

import (
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/agent/collector"
	"github.com/cgpilot/cgpilot/agent/podspec"
)

// TestStateEntriesFollowThePods: cgpilot_state_entries counts what the
// agent keeps per pod, and forgotten pods leave nothing behind in the
// tables untrack owns (the pending annotations go with the status worker,
// the histograms after forgetAfter).
func TestStateEntriesFollowThePods(t *testing.T) {
	r, _ := unitRightsizer(t)
	a, b := r.addPod(t, "a"), r.addPod(t, "b")
	r.decideAll(time.Now(), time.Second)
	series := func() map[string]int {
		out := map[string]int{}
		r.Sizes(out)
		return out
	}
	s := series()
	if s["tracked-pods"] != 2 || len(s) < 11 {
		t.Fatalf("with two tracked pods: %v", s)
	}
	r.Untrack(string(a.UID))
	r.Untrack(string(b.UID))
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
	r, _ := unitRightsizer(t)
	lastSamples := func() int {
		out := map[string]int{}
		r.Sizes(out)
		return out["last-samples"]
	}
	p := r.addPod(t, "a")
	uid := string(p.UID)
	r.mu.Lock()
	r.pods[uid].containers = map[string]rsContainer{"app": {id: "c1"}}
	r.mu.Unlock()
	round := []collector.Sample{{Target: &collector.Target{PodUID: uid, Container: "app", ID: "c1"}, MemoryWorkingSet: 1 << 20}}
	r.Round(time.Now(), round)
	if n := lastSamples(); n != 1 {
		t.Fatalf("last-samples %d for one tracked container", n)
	}
	r.Untrack(uid)
	r.Round(time.Now(), round) // read before the untrack, handed over after it
	if n := lastSamples(); n != 0 {
		t.Fatalf("last-samples %d after the pod was forgotten and a late round", n)
	}

	r.addPod(t, "a")
	r.mu.Lock()
	r.pods[uid].containers = map[string]rsContainer{"app": {id: "c1"}}
	r.mu.Unlock()
	r.Round(time.Now(), round)
	r.Track(p, false, podspec.QoS(p)) // its container no longer runs
	if n := lastSamples(); n != 0 {
		t.Fatalf("last-samples %d after the container stopped", n)
	}
}

// TestCountDue: the policies' status walks every pod once per interval,
// at the tick after a policy change, and when a held-back or failed entry
// is owed, and not at the ticks between.
func TestCountDue(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	every := time.Minute
	for _, tc := range []struct {
		name          string
		now           time.Time
		again         time.Time
		asked, wanted bool
	}{
		{"a tick after the last count", t0.Add(10 * time.Second), time.Time{}, false, false},
		{"the interval passed", t0.Add(every), time.Time{}, false, true},
		{"a policy changed", t0.Add(10 * time.Second), time.Time{}, true, true},
		{"an entry owed later", t0.Add(10 * time.Second), t0.Add(30 * time.Second), false, false},
		{"an entry owed now", t0.Add(30 * time.Second), t0.Add(30 * time.Second), false, true},
		{"the first count", t0, time.Time{}, false, true},
	} {
		counted := t0
		if tc.name == "the first count" {
			counted = time.Time{}
		}
		if got := countDue(tc.now, counted, tc.again, tc.asked, every); got != tc.wanted {
			t.Errorf("%s: countDue = %v, want %v", tc.name, got, tc.wanted)
		}
	}
}
