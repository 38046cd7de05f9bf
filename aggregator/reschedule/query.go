package reschedule

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PathQuery is the Prometheus HTTP API's instant query under the prefix
// the descheduler's metricsProviders prometheus.url points at
// (http://<aggregator>/prometheus).
const PathQuery = "/prometheus/api/v1/query"

// Series is the one series Query answers.
const Series = "cgpilot_reschedule_pressure"

// maxQueryBytes bounds a query request's form.
const maxQueryBytes = 16 << 10

// ParseQuery accepts exactly Series, optionally followed by an empty
// label matcher ("{}"), with surrounding spaces: the descheduler's policy
// names it, nothing else is served (no PromQL engine lives here).
func ParseQuery(q string) bool {
	q = strings.TrimSpace(q)
	rest, ok := strings.CutPrefix(q, Series)
	if !ok {
		return false
	}
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return true
	}
	inner, ok := strings.CutPrefix(rest, "{")
	if !ok {
		return false
	}
	inner, ok = strings.CutSuffix(inner, "}")
	return ok && strings.TrimSpace(inner) == ""
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

type promAnswer struct {
	Status    string `json:"status"`
	Data      any    `json:"data,omitempty"`
	ErrorType string `json:"errorType,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Query is the handler of the descheduler's instant query (GET or POST
// PathQuery, on the HTTP server: the descheduler's Prometheus client
// trusts only the cluster's CA, which does not sign the aggregator's
// certificate). The wiring authenticates the caller first.
func (r *Rescheduler) Query() http.Handler { return http.HandlerFunc(r.serveQuery) }

func promError(w http.ResponseWriter, code int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(promAnswer{Status: "error", ErrorType: kind, Error: msg})
}

func (r *Rescheduler) serveQuery(w http.ResponseWriter, req *http.Request) {
	t0 := time.Now()
	defer func() { r.m.query.Observe(time.Since(t0).Seconds()) }()
	req.Body = http.MaxBytesReader(w, req.Body, maxQueryBytes)
	if err := req.ParseForm(); err != nil {
		promError(w, http.StatusBadRequest, "bad_data", "cannot parse the form: "+err.Error())
		return
	}
	if q := req.Form.Get("query"); !ParseQuery(q) {
		promError(w, http.StatusBadRequest, "bad_data", "cgpilot answers only the instant query "+Series+" (got "+strconv.Quote(truncate(q, 80))+")")
		return
	}
	now := r.now()
	ts := float64(now.UnixMilli()) / 1000
	res := []promSample{}
	for _, p := range r.Pressure(now) {
		res = append(res, promSample{Metric: map[string]string{"__name__": Series, "instance": p.Node},
			Value: [2]any{ts, strconv.FormatFloat(p.Value, 'f', 4, 64)}})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(promAnswer{Status: "success", Data: map[string]any{"resultType": "vector", "result": res}})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// PathStatus is the rescheduler's JSON API (the dashboard's card), a
// cluster view of package web.
const PathStatus = "/api/v1/reschedule"

// Status is PathStatus's answer.
type Status struct {
	// Enabled is false when the aggregator runs without --reschedule
	// (then nothing else is set).
	Enabled   bool        `json:"enabled"`
	Generated time.Time   `json:"generated"`
	Settings  Settings    `json:"settings"`
	Queue     []Entry     `json:"queue"`
	Hourly    []HourCount `json:"hourly"`
	// Last24h summarises the moves asked in the last 24 hours; Days are
	// the daily reports of the last 7 UTC days, today first.
	Last24h Report   `json:"last24h"`
	Days    []Report `json:"days"`
	Recent  []Move   `json:"recent"`
}

// Settings are the rules in force, for the page.
type Settings struct {
	CPUWatermark    float64 `json:"cpuWatermark"`
	MemoryWatermark float64 `json:"memoryWatermark"`
	HotWatermark    float64 `json:"hotWatermark"`
	Emergency       float64 `json:"emergencyWatermark"`
	PerNode         int     `json:"perNode"`
	PerWorkload     int     `json:"perWorkload"`
	PerHour         int     `json:"perHour"`
	Hours           string  `json:"hours"`
	QueueInterval   string  `json:"queueInterval"`
}

// StatusFor is Status now with the request's ?limit latest moves
// (default 50, at most 1,000).
func (r *Rescheduler) StatusFor(req *http.Request) Status {
	n := 50
	if v, err := strconv.Atoi(req.URL.Query().Get("limit")); err == nil && v > 0 {
		n = min(v, 1000)
	}
	return r.Status(r.now(), n)
}

// Status returns the page's data.
func (r *Rescheduler) Status(now time.Time, recent int) Status {
	c := r.cfg
	return Status{Enabled: true, Generated: now.UTC(), Queue: r.Queue(), Hourly: r.Hourly(now, 24), Last24h: r.ReportFor("last 24h", now.Add(-24*time.Hour), now.Add(time.Nanosecond)),
		Days: r.Days(now, 7), Recent: r.Moves(recent),
		Settings: Settings{CPUWatermark: c.Rule.CPU, MemoryWatermark: c.Rule.Memory, HotWatermark: c.HotWatermark, Emergency: c.Emergency,
			PerNode: c.PerNode, PerWorkload: c.PerWorkload, PerHour: c.PerHour, Hours: c.Hours.String(), QueueInterval: c.QueueInterval.String()}}
}

// OffQuery answers the descheduler's query when rescheduling is off
// (the descheduler may be deployed while the aggregator's --reschedule is
// not set): an error saying so, and nothing moves.
func OffQuery() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// 422, as Prometheus answers a query it cannot execute: its client
		// shows the message only for 400 and 422.
		promError(w, http.StatusUnprocessableEntity, "execution", offWhy)
	})
}

const offWhy = "cgpilot rescheduling is off: start the aggregator with --reschedule"

// OffEvictions is the eviction webhook when rescheduling is off: every
// eviction by deschedulerUser is refused, saying so; any other user's is
// allowed.
func OffEvictions(deschedulerUser string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(io.LimitReader(req.Body, maxReviewBytes)).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "want an AdmissionReview with a request", http.StatusBadRequest)
			return
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		if review.Request.UserInfo.Username == deschedulerUser {
			review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: false, Result: &metav1.Status{Status: metav1.StatusFailure,
				Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: offWhy}}
		}
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	})
}
