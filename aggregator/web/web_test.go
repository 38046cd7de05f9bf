package web

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/aggregator/analysis"
	"github.com/cgpilot/cgpilot/aggregator/auth"
	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/aggregator/state"
	"github.com/cgpilot/cgpilot/api/report"
)

func staticGuard(t *testing.T) *auth.Guard {
	t.Helper()
	f := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(f, []byte("cluster-tok,@ops,*\nshop-tok,@shop-dev,shop\nagent-tok,node-1\n"), 0o600)
	s, err := auth.LoadStatic(f)
	if err != nil {
		t.Fatal(err)
	}
	return &auth.Guard{Authn: s, Authz: s}
}

func fetch(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// The page itself is tested in headless Chromium (test/e2e); this checks
// that every route answers with what the page reads, to whom.
func TestRoutes(t *testing.T) {
	s := &Server{Store: state.New(state.Config{}), Analysis: analysis.New(analysis.Config{}), Profiles: profile.New(profile.Config{}),
		Now: func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }, Identity: "r1", Guard: staticGuard(t)}
	mux := http.NewServeMux()
	s.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for path, want := range map[string]string{
		"/":                  "<title>cgpilot aggregator</title>",
		"/static/app.js":     "data-ready",
		"/static/style.css":  ".tiles",
		"/api/v1/access":     `"cluster":true`,
		"/api/v1/summary":    `"replica":"r1"`,
		"/api/v1/coverage":   `"workloads":0`,
		"/api/v1/capacity":   `"cluster"`,
		"/api/v1/saturation": `"points"`,
		"/api/v1/history":    `[]`,
		"/api/v1/anomalies":  `"failedWrites"`,
		"/api/v1/nodes":      `[]`,
		"/api/v1/hotnodes":   `"watermark":0.8`,
		"/api/v1/workloads":  `[]`,
	} {
		status, body := fetch(t, srv.URL+path, "cluster-tok")
		if status != 200 || !strings.Contains(body, want) {
			t.Errorf("%s: %d %q, want it to contain %q", path, status, truncate(body), want)
		}
		if strings.HasPrefix(path, "/api/") && !json.Valid([]byte(body)) {
			t.Errorf("%s: not JSON", path)
		}
	}
}

// TestAPIRefusesWithoutAccess (issue 19: port 80 served every namespace's
// workloads, recommendations, pod names and OOM kills to anyone): an
// anonymous request, a bad token and an agent's token are refused on
// every API path; a user who may read only namespace shop reads shop,
// and is refused every other namespace and the cluster's views.
func TestAPIRefusesWithoutAccess(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 5, 0, 0, time.UTC)
	an := analysis.New(analysis.Config{})
	st := state.New(state.Config{})
	for _, ns := range []string{"shop", "bank"} {
		k := report.Key{Workload: report.Workload{Namespace: ns, Kind: "Deployment", Name: "web"}, Container: "app"}
		d := &report.Decoded{Report: report.Report{Node: "node-1", WindowEnd: now.Add(-time.Minute), Windows: 1, PeriodSeconds: 60,
			Containers: []report.Container{{Key: k, Pods: 1, Policy: ns + "-policy", Mode: "InPlace", Adjustable: true}},
			OOMKills:   []report.OOMKill{{Key: k, Pod: "web-" + ns + "-secret-pod", Time: now.Add(-90 * time.Second), UsageBytes: 1 << 30}}}}
		an.Observe(d, now)
	}
	s := &Server{Store: st, Analysis: an, Profiles: profile.New(profile.Config{}), Now: func() time.Time { return now }, Guard: staticGuard(t),
		// A view the wiring adds (the rescheduler's): a cluster view.
		Views: map[string]func(*http.Request) any{"/api/v1/extra": func(*http.Request) any { return map[string]string{"extra": "secret-pod"} }}}
	mux := http.NewServeMux()
	s.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	paths := []string{"/api/v1/access", "/api/v1/summary", "/api/v1/coverage", "/api/v1/capacity", "/api/v1/saturation", "/api/v1/history",
		"/api/v1/anomalies", "/api/v1/nodes", "/api/v1/hotnodes", "/api/v1/workloads", "/api/v1/extra"}
	for _, p := range paths {
		for _, tok := range []string{"", "junk", "agent-tok"} {
			status, body := fetch(t, srv.URL+p+"?namespace=shop", tok)
			want := http.StatusUnauthorized
			if tok == "agent-tok" && p != "/api/v1/access" {
				want = http.StatusForbidden // a known identity without the right
			}
			if tok == "agent-tok" && p == "/api/v1/access" {
				want = http.StatusOK
			}
			if status != want || strings.Contains(body, "secret-pod") {
				t.Errorf("%s token %q: %d %s, want %d and no data", p, tok, status, truncate(body), want)
			}
		}
		// The shop user: shop yes, bank no, the cluster no.
		if status, body := fetch(t, srv.URL+p+"?namespace=bank", "shop-tok"); p != "/api/v1/access" && (status != http.StatusForbidden || strings.Contains(body, "secret-pod")) {
			t.Errorf("%s?namespace=bank as the shop user: %d %s", p, status, truncate(body))
		}
		status, body := fetch(t, srv.URL+p, "shop-tok")
		if p == "/api/v1/access" {
			if status != 200 || !strings.Contains(body, `"cluster":false`) {
				t.Errorf("access of the shop user: %d %s", status, body)
			}
			continue
		}
		if status != http.StatusForbidden {
			t.Errorf("%s (the cluster's view) as the shop user: %d %s", p, status, truncate(body))
		}
		status, body = fetch(t, srv.URL+p+"?namespace=shop", "shop-tok")
		clusterOnly := p == "/api/v1/nodes" || p == "/api/v1/hotnodes" || p == "/api/v1/extra"
		if clusterOnly && status != http.StatusForbidden || !clusterOnly && (status != 200 || strings.Contains(body, "bank")) {
			t.Errorf("%s?namespace=shop as the shop user: %d %s", p, status, truncate(body))
		}
	}
	if status, body := fetch(t, srv.URL+"/api/v1/extra", "cluster-tok"); status != 200 || !strings.Contains(body, `"extra"`) {
		t.Errorf("the added view as the cluster's reader: %d %s", status, truncate(body))
	}
	if _, body := fetch(t, srv.URL+"/api/v1/history?namespace=shop", "shop-tok"); !strings.Contains(body, "web-shop-secret-pod") {
		t.Errorf("the shop user does not see its own OOM kill: %s", body)
	}
	if _, body := fetch(t, srv.URL+"/api/v1/history", "cluster-tok"); !strings.Contains(body, "web-bank-secret-pod") || !strings.Contains(body, "web-shop-secret-pod") {
		t.Errorf("the cluster viewer does not see every namespace: %s", body)
	}
	// Without a guard nothing is served.
	open := &Server{Store: st, Analysis: an, Profiles: profile.New(profile.Config{}), Now: func() time.Time { return now }}
	m2 := http.NewServeMux()
	open.Register(m2)
	srv2 := httptest.NewServer(m2)
	defer srv2.Close()
	if status, _ := fetch(t, srv2.URL+"/api/v1/history", "cluster-tok"); status != http.StatusUnauthorized {
		t.Errorf("a server without a guard answered %d", status)
	}
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200]
	}
	return s
}
