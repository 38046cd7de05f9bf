//go:build linux

package e2e

import (
	"testing"
	"time"
)

// TestFootprintSettle: the node footprint's window starts only once every
// pod has run for footprintPodAge and the agent has queued no pod
// reconcile for footprintQuiet, at least footprintSettle after every pod
// was sampled, or at the budget, saying it had not settled.
func TestFootprintSettle(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var q quietCounter
	// The last pod started 30 s before the settling; the counter moves at
	// every reading for 40 s (pods updated one after the other), then
	// stays.
	v := 0.0
	var end time.Duration
	for el := time.Duration(0); el <= 5*time.Minute; el += footprintPoll {
		if el <= 40*time.Second {
			v++
		}
		quiet := q.observe(t0.Add(el), v)
		if el <= 40*time.Second && quiet != 0 {
			t.Fatalf("at %v: quiet for %v while the counter moved", el, quiet)
		}
		if done, ok := settleDone(el, 30*time.Second+el, quiet); done {
			if !ok {
				t.Fatalf("at %v: ended unsettled, want settled", el)
			}
			end = el
			break
		}
	}
	if want := 40*time.Second + footprintQuiet; end < want || end > want+footprintPoll {
		t.Errorf("settled at %v, want %v: quiet for %v after the last change", end, want, footprintQuiet)
	}

	// Quiet from the start, the pods old enough: not before footprintSettle.
	if done, _ := settleDone(footprintSettle-time.Second, footprintPodAge, footprintQuiet); done {
		t.Errorf("settled before footprintSettle")
	}
	if done, ok := settleDone(footprintSettle, footprintPodAge, footprintQuiet); !done || !ok {
		t.Errorf("not settled at footprintSettle with the pods old enough and the queue quiet")
	}
	// Quiet, but a pod younger than footprintPodAge: its first resync by
	// the kubelet is still to come.
	if done, _ := settleDone(time.Minute, footprintPodAge-time.Second, time.Minute); done {
		t.Errorf("settled with a pod younger than footprintPodAge")
	}
	// Never quiet: the window starts at the budget, and says so.
	if done, _ := settleDone(footprintSettleBudget-time.Second, time.Hour, 0); done {
		t.Errorf("ended before the budget without the quiet")
	}
	if done, ok := settleDone(footprintSettleBudget, time.Hour, 0); !done || ok {
		t.Errorf("at the budget without the quiet: done %v settled %v, want done and not settled", done, ok)
	}
}
