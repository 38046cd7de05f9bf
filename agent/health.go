package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"
)

// health.go: /healthz and /readyz say what the agent has really done, not
// that its process is up. Liveness fails (and the kubelet restarts the
// agent) when a restart could help: the pod informer never synced, the
// sweep stopped, a reconcile worker died or hangs. Readiness fails besides
// while the agent is starting or cannot reach the API server; the pools
// keep being enforced from the node meanwhile, so an API outage must not
// restart the agent.

// startupGrace is how long liveness waits for the first informer sync and
// sweep (the API server may be slow or away when the agent starts).
const startupGrace = 2 * time.Minute

// health records the agent's progress; its methods are safe for
// concurrent use.
type health struct {
	start      time.Time
	sweepEvery time.Duration
	synced     func() bool
	now        func() time.Time

	lastSweep atomic.Int64   // unix nanoseconds of the last finished sweep; 0: none yet
	workers   int            // reconcile workers started
	alive     atomic.Int32   // reconcile workers running
	busy      []atomic.Int64 // per worker: when its current reconcile began; 0: idle

	// A failure streak of requests to the API server: when it began and
	// its last failure (unix nanoseconds), reset by any answer.
	apiErrSince, apiErrLast atomic.Int64
	apiErr                  atomic.Pointer[string]

	// stopping: Run is shutting down (its workers end on purpose). Both
	// checks then pass: the kubelet probes readiness until the process
	// exits, and each failure would be an "Unhealthy" Warning Event about
	// an agent that is only doing what it was told.
	stopping atomic.Bool
}

// newHealth is the health of an agent with workers reconcile workers (at
// least one); its synced is set once the informer exists.
func newHealth(sweepEvery time.Duration, workers int) *health {
	workers = max(workers, 1)
	return &health{start: time.Now(), sweepEvery: sweepEvery, synced: func() bool { return false }, now: time.Now, workers: workers, busy: make([]atomic.Int64, workers)}
}

// sweepStale is how old the last sweep may be: a few missed intervals, and
// never less than 30 s (a long sweep on a busy node is not a dead agent).
func (h *health) sweepStale() time.Duration { return max(3*h.sweepEvery, 30*time.Second) }

// stuckAfter is how long one reconcile may run before its worker counts
// as hung.
func (h *health) stuckAfter() time.Duration { return max(2*time.Minute, 10*h.sweepEvery) }

func (h *health) swept()               { h.lastSweep.Store(h.now().UnixNano()) }
func (h *health) firstSweepDone() bool { return h.lastSweep.Load() != 0 }
func (h *health) workerStarted()       { h.alive.Add(1) }
func (h *health) workerStopped()       { h.alive.Add(-1) }
func (h *health) reconciling(i int)    { h.busy[i].Store(h.now().UnixNano()) }
func (h *health) reconciled(i int)     { h.busy[i].Store(0) }
func (h *health) apiStreakOpen() bool  { return h.apiErrSince.Load() != 0 }
func (h *health) apiAnswered()         { h.apiErrSince.Store(0) }
func (h *health) since(ns int64) string {
	return h.now().Sub(time.Unix(0, ns)).Round(time.Millisecond).String()
}

func (h *health) apiFailed(err string) {
	now := h.now().UnixNano()
	h.apiErr.Store(&err)
	h.apiErrLast.Store(now)
	h.apiErrSince.CompareAndSwap(0, now)
}

// live returns why the agent should be restarted, or nil.
func (h *health) live() error {
	if h.stopping.Load() {
		return nil
	}
	starting := h.now().Sub(h.start) < startupGrace
	if !h.synced() {
		if starting {
			return nil
		}
		return fmt.Errorf("the pod informer has not synced %v after start", h.since(h.start.UnixNano()))
	}
	last := h.lastSweep.Load()
	switch {
	case last == 0 && !starting:
		return fmt.Errorf("no sweep finished %v after start", h.since(h.start.UnixNano()))
	case last != 0 && h.now().Sub(time.Unix(0, last)) > h.sweepStale():
		return fmt.Errorf("the last sweep finished %v ago (interval %v, limit %v)", h.since(last), h.sweepEvery, h.sweepStale())
	case last != 0 && int(h.alive.Load()) < h.workers:
		return fmt.Errorf("%d of %d reconcile workers running", h.alive.Load(), h.workers)
	}
	for i := range h.busy {
		if b := h.busy[i].Load(); b != 0 && h.now().Sub(time.Unix(0, b)) > h.stuckAfter() {
			return fmt.Errorf("reconcile worker %d busy with one pod for %v (limit %v)", i, h.since(b), h.stuckAfter())
		}
	}
	return nil
}

// ready returns why the agent is not ready, or nil.
func (h *health) ready() error {
	if h.stopping.Load() {
		return nil
	}
	if !h.synced() {
		return fmt.Errorf("starting: the pod informer has not synced")
	}
	if !h.firstSweepDone() {
		return fmt.Errorf("starting: the first sweep has not finished")
	}
	if err := h.live(); err != nil {
		return err
	}
	// Two failures in a row without an answer between: one lost request
	// is not an outage (the sweep probes again while a streak is open).
	if since, last := h.apiErrSince.Load(), h.apiErrLast.Load(); since != 0 && last > since {
		msg := ""
		if p := h.apiErr.Load(); p != nil {
			msg = *p
		}
		return fmt.Errorf("the API server has not answered for %v (last error: %s); the pools are still enforced", h.since(since), msg)
	}
	return nil
}

// handler serves /healthz, /readyz (503 with the reason when failing),
// /metrics, and Go's pprof when profiling (loopback only: Config.HealthAddr).
func (h *health) handler(m *metrics, profiling bool) http.Handler {
	mux := http.NewServeMux()
	check := func(f func() error) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if err := f(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte("ok\n"))
		}
	}
	mux.HandleFunc("/healthz", check(h.live))
	mux.HandleFunc("/readyz", check(h.ready))
	mux.Handle("/metrics", m.handler())
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	}
	return mux
}

// apiTracker records, for readiness, whether the API server answers: any
// HTTP answer below 500 ends a failure streak; a transport error or a 5xx
// extends it. It adds no request of its own.
type apiTracker struct {
	rt http.RoundTripper
	h  *health
}

// WrappedRoundTripper lets client-go reach the transport under the
// tracker (to cancel a request that timed out).
func (t apiTracker) WrappedRoundTripper() http.RoundTripper { return t.rt }

func (t apiTracker) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(r)
	switch {
	case err != nil:
		if !errors.Is(r.Context().Err(), context.Canceled) { // not our own cancellation (shutdown)
			t.h.apiFailed(err.Error())
		}
	case resp.StatusCode >= 500:
		t.h.apiFailed(fmt.Sprintf("%s %s: %s", r.Method, r.URL.Path, resp.Status))
	default:
		t.h.apiAnswered()
	}
	return resp, err
}

// probeAPI asks the API server for its core resources while a failure
// streak is open, so that readiness comes back (or the outage is
// confirmed) within a sweep even when the agent has nothing else to ask.
// The answer itself is not needed: the apiTracker under the client sees it.
func (c *controller) probeAPI(ctx context.Context) {
	if !c.health.apiStreakOpen() {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, _ = c.kube.Resources(pctx, "v1")
}
