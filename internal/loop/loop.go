package loop

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"
)

// Default backoffs of Run after a panicking iteration.
const (
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
)

// Panic is one recovered panic: the loop it ended an iteration of, the
// value given to panic and the panicking goroutine's stack.
type Panic struct {
	Loop  string
	Value any
	Stack []byte
}

func (p *Panic) Error() string { return fmt.Sprintf("%s: recovered panic: %v", p.Loop, p.Value) }

// Guard recovers the panics of a process's loops. A nil *Guard recovers
// nothing: f runs as it is (a library used without one behaves as before).
type Guard struct {
	// OnPanic is told of each recovered panic, in the goroutine that
	// panicked, before the loop goes on; it counts and logs. It must not
	// panic itself.
	OnPanic func(*Panic)
	// MinBackoff and MaxBackoff bound Run's wait after a panicking
	// iteration: it starts at MinBackoff, doubles with each further one
	// and is reset by an iteration that returns. Defaults
	// DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Inject, when set, runs at the start of every iteration, inside the
	// recover, with the loop's name: tests make it panic to show that a
	// loop recovers and counts. Nil in production.
	Inject func(loop string)
}

// Do runs one iteration of loop: a panic in f is recovered, given to
// OnPanic and returned as a *Panic; otherwise Do returns nil.
func (g *Guard) Do(loop string, f func()) (err error) {
	if g == nil {
		f()
		return nil
	}
	defer func() {
		if v := recover(); v != nil {
			err = g.recovered(loop, v)
		}
	}()
	if g.Inject != nil {
		g.Inject(loop)
	}
	f()
	return nil
}

// DoErr is Do for an iteration that returns an error: f's error, or the
// *Panic it panicked with.
func (g *Guard) DoErr(loop string, f func() error) error {
	var err error
	if p := g.Do(loop, func() { err = f() }); p != nil {
		return p
	}
	return err
}

func (g *Guard) recovered(loop string, v any) *Panic {
	p := &Panic{Loop: loop, Value: v, Stack: debug.Stack()}
	if g.OnPanic != nil {
		g.OnPanic(p)
	}
	return p
}

// Run runs step as iterations of loop until step returns false or ctx
// ends. step waits for its own work (a ticker, a channel); after an
// iteration that panicked Run waits the backoff before the next.
func (g *Guard) Run(ctx context.Context, loop string, step func() bool) {
	var backoff time.Duration
	for ctx.Err() == nil {
		more := true
		if err := g.Do(loop, func() { more = step() }); err == nil {
			if !more {
				return
			}
			backoff = 0
			continue
		}
		backoff = g.next(backoff)
		if !Sleep(ctx, backoff) {
			return
		}
	}
}

// Sleep waits d, or less when ctx ends first; it says whether ctx is
// still live (false: the caller returns). The timer is stopped either
// way, so a loop that sleeps often leaks none.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Every is the package's Every (every.go) with each call of f an
// iteration of loop under g: a panicking f costs that call, and the next
// waits Run's backoff as well as the tick. The wait for the tick is part
// of the iteration, as in Run.
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

// Queue is what Work needs of a rate-limiting work queue: client-go's
// workqueue.TypedRateLimitingInterface has it (this package imports no
// client-go).
type Queue[K comparable] interface {
	Get() (key K, shutdown bool)
	Done(key K)
	Forget(key K)
	AddRateLimited(key K)
}

// Work is the one worker loop over a work queue: it takes keys from q
// until q is shut down and drained, and runs handle on each. A key handled
// without error has its backoff forgotten; one that failed is given to
// failed (to log it) and requeued with the queue's backoff. handle runs
// its own Guard iteration (a panic is its error), so that the caller
// decides what a panic costs beyond the retry.
func Work[K comparable](q Queue[K], handle func(K) error, failed func(K, error)) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		if err := handle(key); err != nil {
			failed(key, err)
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

// next is the backoff after one more panicking iteration.
func (g *Guard) next(cur time.Duration) time.Duration {
	lo, hi := DefaultMinBackoff, DefaultMaxBackoff
	if g != nil && g.MinBackoff > 0 {
		lo = g.MinBackoff
	}
	if g != nil && g.MaxBackoff > 0 {
		hi = g.MaxBackoff
	}
	if cur < lo {
		return lo
	}
	return min(2*cur, hi)
}

// Handler serves h with each request as an iteration of loop: a panic
// is recovered, reported, and answered 500 when nothing was written yet.
// net/http would recover it too, but silently for the agent's metrics,
// and it closes the connection; http.ErrAbortHandler, a deliberate abort,
// is passed on.
func (g *Guard) Handler(loop string, h http.Handler) http.Handler {
	if g == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			g.recovered(loop, v)
			http.Error(w, "internal error (recovered; see the agent's log)", http.StatusInternalServerError)
		}()
		if g.Inject != nil {
			g.Inject(loop)
		}
		h.ServeHTTP(w, r)
	})
}
