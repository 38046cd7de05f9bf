package loop

import (
	"context"
	"testing"
	"time"
)

// TestEvery: f runs on ticks only (not at once), in the caller's
// goroutine one call at a time, and Every returns when ctx ends.
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls, running := 0, false
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, 5*time.Millisecond, func() {
			if running {
				t.Error("f overlapped itself")
			}
			running = true
			if calls == 0 && time.Since(start) < 5*time.Millisecond {
				t.Error("f ran before the first tick")
			}
			calls++
			if calls == 3 {
				cancel()
			}
			running = false
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after ctx ended")
	}
	if calls != 3 {
		t.Errorf("%d calls, want 3 (none after ctx ended)", calls)
	}
}

// TestGuardEvery: a panicking pass is recovered and counted, the loop
// goes on with the next tick, and it returns when ctx ends; a nil Guard
// runs the passes as they are.
func TestGuardEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	panics, calls := 0, 0
	g := &Guard{OnPanic: func(p *Panic) {
		if p.Loop != "tick" {
			t.Errorf("panic of loop %q, want tick", p.Loop)
		}
		panics++
	}, MinBackoff: time.Millisecond}
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Every(ctx, "tick", time.Millisecond, func() {
			calls++
			switch calls {
			case 1:
				panic("first pass")
			case 3:
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Guard.Every did not return after ctx ended")
	}
	if calls != 3 || panics != 1 {
		t.Errorf("%d calls, %d panics; want 3 and 1", calls, panics)
	}
	var nilGuard *Guard
	ctx2, cancel2 := context.WithCancel(context.Background())
	n := 0
	nilGuard.Every(ctx2, "tick", time.Millisecond, func() {
		if n++; n == 2 {
			cancel2()
		}
	})
	if n != 2 {
		t.Errorf("nil Guard: %d calls, want 2", n)
	}
}
