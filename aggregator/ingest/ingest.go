// Package ingest serves the aggregator's agent API (api/report): POST
// PathReports takes a node's report, GET PathRecommendations returns the
// merged recommendations of the containers that node reported.
//
// A report is authenticated first (bearer token, auth.Authenticator),
// then read within report.MaxWireBytes and decoded, then the token's node
// must be the report's, then the state store applies it (replay guard,
// grid check) and the observers (analysis, profiles) see it. Every
// refusal is a 4xx with a JSON report.Answer and counts in
// cgpilot_aggregator_reports_total{result}: unauthenticated 401,
// forbidden 403 (node mismatch), malformed 400, oversized 413, replayed
// 409; not_leader and unavailable are 503 with Retry-After. A panic in a
// handler is recovered, answered 500 and counted; it never takes the
// process down.
//
// It imports api/report, aggregator/auth and aggregator/state, and
// Prometheus; no client-go.
package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgpilot/cgpilot/aggregator/auth"
	"github.com/cgpilot/cgpilot/aggregator/state"
	"github.com/cgpilot/cgpilot/api/report"
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
	}
	for _, r := range []string{report.ResultAccepted, report.ResultUnauthenticated, report.ResultForbidden, report.ResultMalformed,
		report.ResultOversized, report.ResultReplayed, report.ResultNotLeader, report.ResultUnavailable} {
		h.m.reports.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(h.m.reports, h.m.latency, h.m.process, h.m.bytes, h.m.fetches, h.m.panics, h.m.inFlight)
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
	a := report.Answer{Result: result}
	if err != nil {
		a.Error = err.Error()
	}
	if status == http.StatusServiceUnavailable {
		a.RetryAfterSeconds = 5
	}
	answer(w, status, a)
}

func bearer(r *http.Request) string {
	v := r.Header.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// authenticate returns the caller's identity or answers the refusal.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request, count func(status int, result string, err error)) (auth.Identity, bool) {
	if h.Leader != nil && !h.Leader() {
		count(http.StatusServiceUnavailable, report.ResultNotLeader, errors.New("this replica is not the leader"))
		return auth.Identity{}, false
	}
	id, err := h.Auth.Authenticate(r.Context(), bearer(r))
	switch {
	case errors.Is(err, auth.ErrUnavailable):
		count(http.StatusServiceUnavailable, report.ResultUnavailable, err)
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
		a := report.Answer{Result: result}
		if err != nil {
			a.Error = err.Error()
		}
		if status == http.StatusServiceUnavailable {
			a.RetryAfterSeconds = 5
		}
		answer(w, status, a)
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
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := now()
		s.Fold(n)
		for _, f := range also {
			f(n)
		}
	}
}
