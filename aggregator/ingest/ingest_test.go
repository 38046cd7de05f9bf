package ingest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cgpilot/cgpilot/aggregator/auth"
	"github.com/cgpilot/cgpilot/aggregator/state"
	"github.com/cgpilot/cgpilot/api/report"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

var web = report.Key{Workload: report.Workload{Namespace: "shop", Kind: report.KindDeployment, Name: "web"}, Container: "app"}

func testReport(t *testing.T, node string, seq uint64) []byte { return windowReport(t, node, seq, 0) }

// windowReport is node's report of window w (0: the one ending at t0+1m).
func windowReport(t *testing.T, node string, seq uint64, w int) []byte {
	t.Helper()
	b, _ := report.NewBuilder(report.BuilderConfig{Node: node})
	start := t0.Add(time.Duration(w) * time.Minute)
	for i := range 6 {
		b.Sample(web, "web-1", start.Add(time.Duration(i)*10*time.Second), 0.3, 2e8)
	}
	r := b.Cut(start.Add(time.Minute))[0]
	r.APIVersion, r.Agent, r.Sequence = report.APIVersion, report.Agent{ID: "a", Started: t0}, seq
	body, err := report.Encode(r, false)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// staticAgents maps tok-<node> to node's agent.
func staticAgents(nodes ...string) auth.Static {
	s := auth.Static{}
	for _, n := range nodes {
		s.AddAgent("tok-"+n, n)
	}
	return s
}

type panicky struct{}

func (panicky) Observe(*report.Decoded, time.Time) { panic("observer bug") }

func TestIngestAnswers(t *testing.T) {
	reg := prometheus.NewRegistry()
	store := state.New(state.Config{Step: time.Minute})
	h := New(staticAgents("n1", "n2", "n3"), store, reg)
	h.Now = func() time.Time { return t0.Add(70 * time.Second) }
	leader := true
	h.Leader = func() bool { return leader }
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post := func(token string, body []byte, enc string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+report.PathReports, bytes.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if enc != "" {
			req.Header.Set("Content-Encoding", enc)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var a report.Answer
		json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted && a.Error == "" {
			t.Errorf("status %d without an error text", resp.StatusCode)
		}
		return resp.StatusCode
	}
	good := testReport(t, "n1", 1)
	cases := []struct {
		name   string
		token  string
		body   []byte
		enc    string
		status int
		result string
	}{
		{"no token", "", good, "", 401, "unauthenticated"},
		{"unknown token", "nope", good, "", 401, "unauthenticated"},
		{"another node's token", "tok-n2", good, "", 403, "forbidden"},
		{"garbage", "tok-n1", []byte("{not json"), "", 400, "malformed"},
		{"bad encoding", "tok-n1", good, "zstd", 400, "malformed"},
		{"oversized", "tok-n1", bytes.Repeat([]byte(" "), report.MaxWireBytes+100), "", 413, "oversized"},
		{"accepted", "tok-n1", good, "", 202, "accepted"},
		{"replayed", "tok-n1", good, "", 409, "replayed"},
	}
	for _, tc := range cases {
		before := testutil.ToFloat64(h.m.reports.WithLabelValues(tc.result))
		if got := post(tc.token, tc.body, tc.enc); got != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.status)
		}
		if after := testutil.ToFloat64(h.m.reports.WithLabelValues(tc.result)); after != before+1 {
			t.Errorf("%s: %s counter %v → %v", tc.name, tc.result, before, after)
		}
	}
	// Recommendations (after more than the preset's hour of history): only
	// for the token's own node.
	for w := 1; w <= 70; w++ {
		h.Now = func() time.Time { return t0.Add(time.Duration(w+1) * time.Minute) }
		if got := post("tok-n1", windowReport(t, "n1", uint64(10+w), w), ""); got != 202 {
			t.Fatalf("window %d: %d", w, got)
		}
	}
	store.Fold(t0.Add(2 * time.Hour))
	get := func(token, node string) (int, report.Recommendations) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+report.PathRecommendations+"?node="+node, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var rs report.Recommendations
		json.NewDecoder(resp.Body).Decode(&rs)
		return resp.StatusCode, rs
	}
	if st, rs := get("tok-n1", "n1"); st != 200 || len(rs.Items) != 1 || rs.Items[0].Key != web || rs.APIVersion != report.APIVersion {
		t.Errorf("own recommendations: %d %+v", st, rs)
	}
	if st, _ := get("tok-n2", "n1"); st != 403 {
		t.Errorf("another node's recommendations: %d", st)
	}
	// A follower refuses with 503 and Retry-After.
	h.Now = func() time.Time { return t0.Add(3 * time.Hour) }
	leader = false
	if got := post("tok-n1", windowReport(t, "n1", 100, 71), ""); got != 503 {
		t.Errorf("follower: %d", got)
	}
	leader = true
	// A panicking observer: 500, counted, and the server keeps serving.
	h.Observers = []Observer{panicky{}}
	if got := post("tok-n3", testReport(t, "n3", 1), ""); got != 500 {
		t.Errorf("panic: %d, want 500", got)
	}
	if testutil.ToFloat64(h.m.panics) != 1 {
		t.Error("panic not counted")
	}
	h.Observers = nil
	if got := post("tok-n1", windowReport(t, "n1", 101, 72), ""); got != 202 {
		t.Errorf("after a panic: %d", got)
	}
	if n, err := testutil.GatherAndCount(reg, "cgpilot_aggregator_ingest_seconds"); err != nil || n != 1 {
		t.Errorf("latency histogram: %d %v", n, err)
	}
}
