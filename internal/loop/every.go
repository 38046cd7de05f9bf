package loop

import (
	"context"
	"time"
)

// Every calls f every d until ctx ends, the first time d after the call.
// f runs in the caller's goroutine: a slow f delays the next call rather
// than overlapping it (the ticker drops the ticks it missed). It is the
// one ticker loop of the aggregator's periodic passes; wrap f in a
// Guard's Do where a panic must not end the loop.
func Every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}

// Every is the package's Every with each call of f an iteration of loop
// under g: a panicking f costs that call, and the next waits Run's
// backoff as well as the tick. The wait for the tick is part of the
// iteration, as in Run.
func (g *Guard) Every(ctx context.Context, loop string, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	g.Run(ctx, loop, func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		f()
		return true
	})
}
