package agent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	local "github.com/cgpilot/cgpilot/api/local"
)

// fakeClock is a settable now for health.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newTestHealth(c *fakeClock, workers int) *health {
	h := newHealth(10*time.Second, workers)
	h.now, h.start = c.now, c.t
	return h
}

func wantErr(t *testing.T, what string, err error, substr string) {
	t.Helper()
	switch {
	case substr == "" && err != nil:
		t.Errorf("%s: %v, want ok", what, err)
	case substr != "" && (err == nil || !strings.Contains(err.Error(), substr)):
		t.Errorf("%s: %v, want an error saying %q", what, err, substr)
	}
}

// TestHealthReflectsProgress walks an agent's life through the health
// checks: starting (not ready, alive during the grace), synced and swept
// (both ok), a sweep that stopped, a worker that died or hangs (both
// fail: a restart helps), and an API server that stopped answering (not
// ready, still alive: the pools are enforced from the node).
func TestHealthReflectsProgress(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	h := newTestHealth(clk, 2)
	synced := false
	h.synced = func() bool { return synced }

	wantErr(t, "live while starting", h.live(), "")
	wantErr(t, "ready while starting", h.ready(), "informer has not synced")
	clk.add(startupGrace + time.Second)
	wantErr(t, "live after the grace without sync", h.live(), "has not synced")
	synced = true
	wantErr(t, "ready before the first sweep", h.ready(), "first sweep")
	wantErr(t, "live without a sweep after the grace", h.live(), "no sweep finished")

	h.workerStarted()
	h.workerStarted()
	h.swept()
	wantErr(t, "live", h.live(), "")
	wantErr(t, "ready", h.ready(), "")

	clk.add(25 * time.Second) // within max(3 × 10 s, 30 s)
	wantErr(t, "live with a recent sweep", h.live(), "")
	clk.add(10 * time.Second)
	wantErr(t, "live with a stale sweep", h.live(), "last sweep finished 35s ago")
	wantErr(t, "ready with a stale sweep", h.ready(), "last sweep")
	h.swept()

	h.workerStopped()
	wantErr(t, "live with a dead worker", h.live(), "1 of 2 reconcile workers")
	h.workerStarted()

	h.reconciling(1)
	clk.add(time.Minute)
	h.swept()
	wantErr(t, "live with a worker busy for a minute", h.live(), "")
	clk.add(2 * time.Minute)
	h.swept()
	wantErr(t, "live with a hung worker", h.live(), "worker 1 busy with one pod for 3m0s")
	h.reconciled(1)
	wantErr(t, "live once the worker is back", h.live(), "")

	h.apiFailed("dial tcp: connection refused")
	wantErr(t, "ready after one failed request", h.ready(), "")
	clk.add(time.Second)
	h.apiFailed("dial tcp: connection refused")
	wantErr(t, "ready during an outage", h.ready(), "API server has not answered for 1s (last error: dial tcp: connection refused)")
	wantErr(t, "live during an outage", h.live(), "")
	h.apiAnswered()
	wantErr(t, "ready once the API server answers", h.ready(), "")

	// Shutting down, the workers end on purpose: no failed probe (each
	// would be a Warning Event about an agent told to stop).
	h.workerStopped()
	h.workerStopped()
	wantErr(t, "live with the workers gone", h.live(), "0 of 2 reconcile workers")
	h.stopping.Store(true)
	wantErr(t, "live while stopping", h.live(), "")
	wantErr(t, "ready while stopping", h.ready(), "")
}

// TestHealthEndpoints: the handlers answer 200 "ok" or 503 with the
// reason, and /metrics serves the registry.
func TestHealthEndpoints(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	h := newTestHealth(clk, 1)
	h.synced = func() bool { return true }
	srv := httptest.NewServer(h.handler(newMetrics(), false))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "first sweep") {
		t.Errorf("/readyz before the first sweep: %d %q", code, body)
	}
	h.workerStarted()
	h.swept()
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(p); code != 200 || body != "ok\n" {
			t.Errorf("%s: %d %q, want 200 ok", p, code, body)
		}
	}
	h.workerStopped()
	if code, body := get("/healthz"); code != 503 || !strings.Contains(body, "0 of 1 reconcile workers") {
		t.Errorf("/healthz with no worker: %d %q", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics: %d %q", code, body)
	}
	// A scraper offering gzip gets plain text: no compressor is kept
	// between scrapes (see metrics.handler).
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if enc := resp.Header.Get("Content-Encoding"); enc != "" || !strings.Contains(string(b), "go_goroutines") {
		t.Errorf("/metrics asked for gzip: Content-Encoding %q, body %.40q", enc, b)
	}
}

// TestAPITracker: answers below 500 close a failure streak; transport
// errors and 5xx extend it; the agent's own cancellation does not count.
func TestAPITracker(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	h := newTestHealth(clk, 1)
	code := 200
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }))
	c := &http.Client{Transport: apiTracker{rt: http.DefaultTransport, h: h}}
	do := func(ctx context.Context) {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/pods", nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
		clk.add(time.Second)
	}
	do(context.Background())
	if h.apiStreakOpen() {
		t.Fatal("streak open after a 200")
	}
	code = 503
	do(context.Background())
	if !h.apiStreakOpen() {
		t.Fatal("no streak after a 503")
	}
	code = 404 // an answer all the same
	do(context.Background())
	if h.apiStreakOpen() {
		t.Fatal("streak still open after a 404")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	do(ctx)
	if h.apiStreakOpen() {
		t.Fatal("the agent's own cancellation counted as a failure")
	}
	srv.Close()
	do(context.Background())
	do(context.Background())
	h.synced = func() bool { return true }
	h.workerStarted()
	h.swept()
	wantErr(t, "ready with the server gone", h.ready(), "connection refused")
}

// TestLocalAPIWaitsForTheFirstSweep: before the agent has restored its
// pool state and swept once, the pool views answer 503 with the reason,
// not an empty pool as if it were the node's (the cgroup v2 node tier's
// restarted agent answered within a second, with no assignment yet).
func TestLocalAPIWaitsForTheFirstSweep(t *testing.T) {
	c := &controller{health: newHealth(time.Minute, 1)}
	h := c.apiHandler()
	for _, path := range []string{local.PathPools, local.PathPods, local.PathExplain + "?pod=default/db"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var e local.ErrorView
		if err := json.Unmarshal(rec.Body.Bytes(), &e); rec.Code != http.StatusServiceUnavailable || err != nil || !strings.Contains(e.Error, "starting") {
			t.Errorf("%s before the first sweep: %d %q, want 503 saying it is starting", path, rec.Code, rec.Body.String())
		}
	}
}
