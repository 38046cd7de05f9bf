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
