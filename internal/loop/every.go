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
