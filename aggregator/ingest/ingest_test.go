package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cgpilot/cgpilot/aggregator/auth"
	"github.com/cgpilot/cgpilot/aggregator/state"
	"github.com/cgpilot/cgpilot/aggregator/trust"
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

// podsOn is a trust.Pods of fixed workloads per node.
type podsOn map[string][]report.Workload

func (p podsOn) Bound(_ context.Context, node string, w report.Workload, _ time.Time) int {
	n := 0
	for _, x := range p[node] {
		if x == w {
			n++
		}
	}
	return n
}

func (p podsOn) PodOn(ctx context.Context, node, _, _ string, w report.Workload, from time.Time) bool {
	return p.Bound(ctx, node, w, from) > 0
}

func (p podsOn) OnNode(string) map[report.Workload]int { return nil }

// TestForgedReportLeavesTheMergeAlone (issue 19: one forged report of
// shop/Deployment/web/app from node "evil" moved an honest 0.6 core /
// 404 MiB recommendation to 0.1 core / 100 MiB): evil's reports of a
// workload with no pod on evil are dropped before the merge, and the
// merged recommendation is bit for bit the honest node's alone; reports
// of 4,096 fake containers leave no state behind.
func TestForgedReportLeavesTheMergeAlone(t *testing.T) {
	run := func(forge bool) (*state.Store, *Handler) {
		store := state.New(state.Config{Step: time.Minute})
		h := New(staticAgents("good", "evil"), store, prometheus.NewRegistry())
		h.Trust = trust.New(trust.Config{Pods: podsOn{"good": {web.Workload}}})
		mux := http.NewServeMux()
		h.Register(mux)
		srv := httptest.NewServer(mux)
		defer srv.Close()
		for w := 0; w < 70; w++ {
			h.Now = func() time.Time { return t0.Add(time.Duration(w+2) * time.Minute) }
			bodies := map[string][]byte{"good": windowReport(t, "good", uint64(w+1), w)}
			if forge {
				b, _ := report.NewBuilder(report.BuilderConfig{Node: "evil"})
				start := t0.Add(time.Duration(w) * time.Minute)
				for i := range 6 {
					b.Sample(web, "web-evil", start.Add(time.Duration(i)*10*time.Second), 0.1, 100<<20)
				}
				r := b.Cut(start.Add(time.Minute))[0]
				r.APIVersion, r.Agent, r.Sequence = report.APIVersion, report.Agent{ID: "e", Started: t0}, uint64(w+1)
				bodies["evil"], _ = report.Encode(r, false)
			}
			for node, body := range bodies {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+report.PathReports, bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer tok-"+node)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					t.Fatalf("%s window %d: %d", node, w, resp.StatusCode)
				}
			}
		}
		store.Fold(t0.Add(3 * time.Hour))
		return store, h
	}
	honest, _ := run(false)
	forged, h := run(true)
	a, b := honest.Recommendation(web), forged.Recommendation(web)
	if a == nil || b == nil || a.Recommendation != b.Recommendation || a.Samples != b.Samples || b.Nodes != 1 {
		t.Fatalf("with evil's forged reports the merge is %+v, the honest one %+v", b, a)
	}
	if n := testutil.ToFloat64(h.m.dropped.WithLabelValues(trust.ReasonNotOnNode)); n != 70 {
		t.Errorf("dropped %v forged containers, want 70", n)
	}
	t.Logf("web/app merged from the good node alone: %.3f cores, %.0f MiB (evil's 70 forged windows dropped)", b.CPU.Target, b.Memory.Target/(1<<20))

	// Reports of 4,096 fake containers each (issue 19: 40 of them cost +666 MiB): nothing is kept.
	store := state.New(state.Config{})
	h = New(staticAgents("evil"), store, prometheus.NewRegistry())
	h.Trust = trust.New(trust.Config{Pods: podsOn{}})
	h.Now = func() time.Time { return t0.Add(time.Hour) }
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	// One report of 4,096 fake containers, renamed and re-stamped 8 times
	// (the finding's 40 only repeat what the first 8 show: with today's
	// 4,096 × 8 entries kept, without the check none).
	fb, _ := report.NewBuilder(report.BuilderConfig{Node: "evil"})
	for c := range report.MaxContainers {
		k := report.Key{Workload: report.Workload{Namespace: fmt.Sprintf("ns-%d", c%100), Kind: report.KindDeployment, Name: fmt.Sprintf("fake-%d", c)}, Container: "c"}
		fb.Sample(k, "p", t0.Add(time.Second), 0.1, 1<<20)
	}
	fake := fb.Cut(t0.Add(time.Minute))[0]
	for i := range 8 {
		r := *fake
		r.Containers = append([]report.Container(nil), fake.Containers...)
		for c := range r.Containers {
			r.Containers[c].Name = fmt.Sprintf("fake-%d-%d", i, c)
		}
		r.WindowEnd = t0.Add(time.Duration(i+1) * time.Minute)
		r.APIVersion, r.Agent, r.Sequence = report.APIVersion, report.Agent{ID: "e", Started: t0}, uint64(i+1)
		body, _ := report.Encode(&r, true)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+report.PathReports, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok-evil")
		req.Header.Set("Content-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("fake report %d: %d", i, resp.StatusCode)
		}
	}
	if st := store.Stats(); st.Containers != 0 || st.Workloads != 0 || st.PendingEntries != 0 {
		t.Errorf("8 reports of 4,096 fake containers left %+v", st)
	}
}

// TestNodeRate: a node's reports beyond its rate are refused with 429 and
// Retry-After, another node's are not.
func TestNodeRate(t *testing.T) {
	h := New(staticAgents("n1", "n2"), state.New(state.Config{}), prometheus.NewRegistry())
	h.Rate = &NodeRate{Every: time.Hour, Burst: 3}
	h.Now = func() time.Time { return t0.Add(time.Hour) }
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	post := func(node string, w int) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+report.PathReports, bytes.NewReader(windowReport(t, node, uint64(w+1), w)))
		req.Header.Set("Authorization", "Bearer tok-"+node)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for w := range 3 {
		if r := post("n1", w); r.StatusCode != 202 {
			t.Fatalf("report %d: %d", w, r.StatusCode)
		}
	}
	if r := post("n1", 3); r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Errorf("past the burst: %d, Retry-After %q", r.StatusCode, r.Header.Get("Retry-After"))
	}
	if r := post("n2", 0); r.StatusCode != 202 {
		t.Errorf("another node: %d", r.StatusCode)
	}
}
