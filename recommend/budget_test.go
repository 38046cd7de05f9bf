package recommend

import (
	"testing"
	"time"
)

// TestBudgetLetsALoneContainerCut: a node whose only established container
// runs under the default budget (1 change a day) may cut it. The bucket
// held half a day of the rate, half a token, and a cut needs a whole one,
// so the target of a lone container never came down; and the bucket
// started at the first decision round, before the container was
// established, with nothing in it. A raise spends a token too (in debt):
// the cut after it waits for the next day's.
func TestBudgetLetsALoneContainerCut(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	p := mustPreset(t, DefaultPreset)
	if p.ResizeBudget != DefaultResizeBudget {
		t.Fatalf("%s: resize budget %v, want %v", DefaultPreset, p.ResizeBudget, DefaultResizeBudget)
	}
	p.MinHistory, p.ConfidenceHistory = Duration(2*time.Second), Duration(2*time.Second)
	r, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_790_000_000, 0)
	// The floor as an operator sets it, a minute each: the first target
	// (free) and a cut (the token in hand); usage stays far below it.
	floors := []float64{0.6, 0.3}
	var got []float64
	for phase, floor := range floors {
		var target float64
		for s := range 60 {
			now := t0.Add(time.Duration(phase*60+s) * time.Second)
			r.Add("c", Sample{Time: now, CPUCores: 0.001, MemoryBytes: 1e7})
			rec, ok, err := r.RecommendWith("c", now, Overrides{CPU: ResourceOverrides{MinAllowed: f(floor)}})
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				target = rec.CPU.Target
			}
		}
		got = append(got, target)
	}
	for i, want := range floors {
		if got[i] != want {
			t.Fatalf("the CPU target at the end of each minute: %v, want the floors %v", got, floors)
		}
	}
	// The next cut waits for the next token: one a day.
	var target float64
	for s := range 60 {
		now := t0.Add(time.Duration(120+s) * time.Second)
		r.Add("c", Sample{Time: now, CPUCores: 0.001, MemoryBytes: 1e7})
		if rec, ok, _ := r.RecommendWith("c", now, Overrides{CPU: ResourceOverrides{MinAllowed: f(0.15)}}); ok {
			target = rec.CPU.Target
		}
	}
	if target != 0.3 {
		t.Errorf("a second cut within the day: target %v, want it held at 0.3 (the budget is one change a day)", target)
	}
}
