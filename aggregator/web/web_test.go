package web

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/aggregator/analysis"
	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/aggregator/state"
)

// The page itself is tested in headless Chromium (test/e2e); this checks
// that every route answers with what the page reads.
func TestRoutes(t *testing.T) {
	s := &Server{Store: state.New(state.Config{}), Analysis: analysis.New(analysis.Config{}), Profiles: profile.New(profile.Config{}),
		Now: func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }, Identity: "r1"}
	mux := http.NewServeMux()
	s.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for path, want := range map[string]string{
		"/":                  "<title>cgpilot aggregator</title>",
		"/static/app.js":     "data-ready",
		"/static/style.css":  ".tiles",
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
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d %q, want it to contain %q", path, resp.StatusCode, truncate(string(body)), want)
		}
		if strings.HasPrefix(path, "/api/") && !json.Valid(body) {
			t.Errorf("%s: not JSON", path)
		}
	}
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200]
	}
	return s
}
