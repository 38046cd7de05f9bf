// Package ingest serves the aggregator's agent API (api/report): POST
// PathReports takes a node's report, GET PathRecommendations returns the
// merged recommendations of the containers that node reported.
//
// A report is authenticated first (bearer token, auth.Authenticator, with
// the caller's address for its limiter), then its node's report rate is
// checked (Rate: an agent sends one report a period, and a backlog after
// an outage at a bounded pace), then the body is read within
// report.MaxWireBytes and decoded, then the token's node must be the
// report's, then trust.Checker removes what the node may not report (other
// nodes' workloads, samples past its pods × rounds, the policy it names)
// and the state store applies the rest (replay guard, grid check) and the
// observers (analysis, profiles) see it. Every refusal is a 4xx with a
// JSON report.Answer and counts in cgpilot_aggregator_reports_total{result}:
// unauthenticated 401, forbidden 403 (node mismatch), malformed 400,
// oversized 413, replayed 409, throttled 429 (too many token reviews from
// the caller) and rate_limited 429 (the node's reports), both with
// Retry-After; not_leader and unavailable are 503 with Retry-After. A
// panic in a handler is recovered, answered 500 and counted; it never
// takes the process down.
//
// It imports api/report, aggregator/auth, aggregator/trust and
// aggregator/state, and Prometheus; no client-go.
package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/cgpilot/cgpilot/aggregator/auth"
	"github.com/cgpilot/cgpilot/aggregator/state"
	"github.com/cgpilot/cgpilot/aggregator/trust"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/internal/loop"
)

// Results of a report besides report.Result*: the caller's token reviews
// are over their rate, or the node's reports are.
const (
	ResultThrottled   = "throttled"
	ResultRateLimited = "rate_limited"
)

// Observer sees every accepted report.
type Observer interface {
	Observe(d *report.Decoded, now time.Time)
}

// Handler serves the agent API.
type Handler struct {
	Auth      auth.Authenticator
	Store     *state.Store
	Observers []Observer
	// Trust, when set, removes what a node may not report before the
	// store sees it.
	Trust *trust.Checker
	// Rate, when set, bounds each node's reports.
	Rate *NodeRate
	// Leader reports whether this replica serves (nil: always).
	Leader func() bool
	Now    func() time.Time

	m metrics
}

type metrics struct {
	reports  *prometheus.CounterVec
	latency  prometheus.Histogram
	process  prometheus.Histogram
	bytes    prometheus.Histogram
	fetches  *prometheus.CounterVec
	panics   prometheus.Counter
	inFlight prometheus.Gauge
	dropped  *prometheus.CounterVec
}

// New returns a Handler whose metrics are registered with reg.
func New(a auth.Authenticator, s *state.Store, reg prometheus.Registerer, observers ...Observer) *Handler {
	h := &Handler{Auth: a, Store: s, Observers: observers, Now: time.Now}
	h.m = metrics{
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_reports_total",
			Help: "Reports received, by result: accepted, unauthenticated, forbidden, malformed, oversized, replayed, not_leader, unavailable."}, []string{"result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cgpilot_aggregator_ingest_seconds",
			Help:    "Time to take one report, from its request to the answer (authentication, decoding, merge).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .015, .02, .05, .1, .2, .5, 1, 2.5, 5, 10}}),
		process: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cgpilot_aggregator_ingest_process_seconds",
			Help:    "Time to take one report once its body has arrived (decoding, merge): the ingest time without the client's sending.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .015, .02, .05, .1, .2, .5, 1, 2.5, 5, 10}}),
		bytes: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cgpilot_aggregator_report_bytes",
			Help: "Size of accepted report bodies as sent.", Buckets: prometheus.ExponentialBuckets(1024, 4, 8)}),
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_recommendation_fetches_total",
			Help: "Agents' fetches of merged recommendations, by result."}, []string{"result"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{Name: "cgpilot_aggregator_handler_panics_total",
			Help: "Agent API requests whose handler panicked (answered 500; the process keeps serving)."}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cgpilot_aggregator_ingest_in_flight", Help: "Reports being taken now."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_report_items_dropped_total",
			Help: "Parts of accepted reports removed or bounded because the node may not report them, by reason (package trust): " +
				"not_on_node, over_samples, over_keys, oom_not_on_node, adjustment_not_on_node, policy, node_size, node_unknown, usage_raised, usage_capped, oom_amount_capped, pods_capped, rounds_capped."},
			[]string{"reason"}),
	}
	for _, r := range []string{report.ResultAccepted, report.ResultUnauthenticated, report.ResultForbidden, report.ResultMalformed,
		report.ResultOversized, report.ResultReplayed, report.ResultNotLeader, report.ResultUnavailable, ResultThrottled, ResultRateLimited} {
		h.m.reports.WithLabelValues(r)
	}
	for _, r := range []string{trust.ReasonNotOnNode, trust.ReasonOverSamples, trust.ReasonOverKeys, trust.ReasonPolicy} {
		h.m.dropped.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(h.m.reports, h.m.latency, h.m.process, h.m.bytes, h.m.fetches, h.m.panics, h.m.inFlight, h.m.dropped)
	}
	return h
}

// Register adds the handlers to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.Handle("POST "+report.PathReports, h.recovering(h.postReport))
	mux.Handle("GET "+report.PathRecommendations, h.recovering(h.getRecommendations))
}

func (h *Handler) recovering(fn http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				h.m.panics.Inc()
				answer(w, http.StatusInternalServerError, report.Answer{Result: "error", Error: "internal error"})
			}
		}()
		fn(w, r)
	})
}

func answer(w http.ResponseWriter, status int, a report.Answer) {
	w.Header().Set("Content-Type", "application/json")
	if a.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(a.RetryAfterSeconds))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(a)
}

func (h *Handler) refuse(w http.ResponseWriter, status int, result string, err error) {
	h.m.reports.WithLabelValues(result).Inc()
	answer(w, status, refusal(status, result, err))
}

// refusal is the answer to a refused report or fetch: its result, the
// error, and when to retry (5 s when unavailable, 1 s when throttled, 10 s
// when the node is over its rate).
func refusal(status int, result string, err error) report.Answer {
	a := report.Answer{Result: result}
	if err != nil {
		a.Error = err.Error()
	}
	switch status {
	case http.StatusServiceUnavailable:
		a.RetryAfterSeconds = 5
	case http.StatusTooManyRequests:
		a.RetryAfterSeconds = 1
		if result == ResultRateLimited {
			a.RetryAfterSeconds = 10
		}
	}
	return a
}

// authenticate returns the caller's identity or answers the refusal.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request, count func(status int, result string, err error)) (auth.Identity, bool) {
	if h.Leader != nil && !h.Leader() {
		count(http.StatusServiceUnavailable, report.ResultNotLeader, errors.New("this replica is not the leader"))
		return auth.Identity{}, false
	}
	ctx := r.Context()
	if auth.SourceOf(ctx) == "" {
		ctx = auth.WithSource(ctx, auth.Source(r))
	}
	id, err := h.Auth.Authenticate(ctx, auth.Bearer(r))
	switch {
	case errors.Is(err, auth.ErrUnavailable):
		count(http.StatusServiceUnavailable, report.ResultUnavailable, err)
		return id, false
	case errors.Is(err, auth.ErrThrottled):
		count(http.StatusTooManyRequests, ResultThrottled, err)
		return id, false
	case err != nil:
		count(http.StatusUnauthorized, report.ResultUnauthenticated, err)
		return id, false
	}
	return id, true
}

func (h *Handler) postReport(w http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	h.m.inFlight.Inc()
	defer func() {
		h.m.inFlight.Dec()
		h.m.latency.Observe(time.Since(t0).Seconds())
	}()
	refuse := func(status int, result string, err error) { h.refuse(w, status, result, err) }
	id, ok := h.authenticate(w, r, refuse)
	if !ok {
		return
	}
	if h.Rate != nil && !h.Rate.Allow(id.Node) {
		refuse(http.StatusTooManyRequests, ResultRateLimited, errors.New("node "+id.Node+" sends reports faster than its rate"))
		return
	}
	if r.ContentLength > report.MaxWireBytes {
		refuse(http.StatusRequestEntityTooLarge, report.ResultOversized, errors.New("body over the report bound"))
		return
	}
	body := &countingReader{r: http.MaxBytesReader(w, r.Body, report.MaxWireBytes+1)}
	var read time.Time
	defer func() {
		if !read.IsZero() {
			h.m.process.Observe(time.Since(read).Seconds())
		}
	}()
	d, err := report.DecodeRead(body, r.Header.Get("Content-Encoding"), func() { read = time.Now() })
	switch {
	case errors.Is(err, report.ErrOversized):
		refuse(http.StatusRequestEntityTooLarge, report.ResultOversized, err)
		return
	case err != nil:
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			refuse(http.StatusRequestEntityTooLarge, report.ResultOversized, err)
			return
		}
		refuse(http.StatusBadRequest, report.ResultMalformed, err)
		return
	}
	if d.Node != id.Node {
		refuse(http.StatusForbidden, report.ResultForbidden, errors.New("the token was issued for node "+id.Node+", the report is of node "+d.Node))
		return
	}
	if h.Trust != nil {
		for reason, n := range h.Trust.Check(r.Context(), d) {
			h.m.dropped.WithLabelValues(reason).Add(float64(n))
		}
	}
	now := h.Now()
	switch err := h.Store.Apply(d, now); {
	case errors.Is(err, state.ErrReplayed):
		refuse(http.StatusConflict, report.ResultReplayed, err)
		return
	case err != nil:
		refuse(http.StatusBadRequest, report.ResultMalformed, err)
		return
	}
	for _, o := range h.Observers {
		o.Observe(d, now)
	}
	h.m.reports.WithLabelValues(report.ResultAccepted).Inc()
	h.m.bytes.Observe(float64(body.n))
	answer(w, http.StatusAccepted, report.Answer{Result: report.ResultAccepted})
}

type countingReader struct {
	r interface{ Read([]byte) (int, error) }
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func (h *Handler) getRecommendations(w http.ResponseWriter, r *http.Request) {
	count := func(status int, result string, err error) {
		h.m.fetches.WithLabelValues(result).Inc()
		answer(w, status, refusal(status, result, err))
	}
	id, ok := h.authenticate(w, r, count)
	if !ok {
		return
	}
	node := r.URL.Query().Get("node")
	if node != id.Node {
		count(http.StatusForbidden, report.ResultForbidden, errors.New("the token was issued for node "+id.Node))
		return
	}
	items, _ := h.Store.ForNode(node)
	h.m.fetches.WithLabelValues("ok").Inc()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(report.Recommendations{APIVersion: report.APIVersion, Generated: h.Now().UTC(), Items: items})
}

// FoldLoop folds the store's due windows and closes the observers'
// windows every interval until ctx ends.
func FoldLoop(ctx context.Context, s *state.Store, interval time.Duration, now func() time.Time, also ...func(time.Time)) {
	loop.Every(ctx, interval, func() {
		n := now()
		s.Fold(n)
		for _, f := range also {
			f(n)
		}
	})
}

// NodeRate bounds each node's reports: one per Every on average (default
// 1 s), with Burst at once (default 100: the backlog an agent buffered
// while the aggregator was away). An honest agent sends one a period; the
// bound caps what a node's token can make the aggregator decode (each
// window of a node is merged once: package state). The nodes remembered
// are bounded by the ones reporting.
type NodeRate struct {
	Every time.Duration
	Burst int
	// Now is the clock of the report grid (nil: time.Now).
	Now func() time.Time

	mu    sync.Mutex
	nodes map[string]*rate.Limiter
}

// Allow says whether node may send a report now.
func (n *NodeRate) Allow(node string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nodes == nil {
		n.nodes = map[string]*rate.Limiter{}
	}
	l := n.nodes[node]
	if l == nil {
		every, burst := n.Every, n.Burst
		if every <= 0 {
			every = time.Second
		}
		if burst <= 0 {
			burst = 100
		}
		if len(n.nodes) >= 100000 {
			clear(n.nodes) // more nodes than any cluster: start over rather than grow
		}
		l = rate.NewLimiter(rate.Every(every), burst)
		n.nodes[node] = l
	}
	now := time.Now()
	if n.Now != nil {
		now = n.Now()
	}
	return l.AllowN(now, 1)
}
