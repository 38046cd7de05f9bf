// Package web serves the aggregator's effect analysis: a JSON API under
// /api/v1/ and a dashboard page (/) with charts of coverage, released
// capacity, the saturation trend, hot nodes and anomalies, drawn in the
// browser from that API.
//
// The page is one HTML file, a stylesheet and a script, embedded; the
// charts are plain SVG built by the script. We write them rather than
// vendor a chart library: four chart shapes are a few hundred lines, and
// nothing third-party is served from the aggregator or fetched from the
// network (clusters are often offline). It is tested in headless Chromium
// (test/e2e/aggregator_dashboard_test.go).
//
// It imports the aggregator's state, analysis and profile; no client-go.
package web

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/cgpilot/cgpilot/aggregator/analysis"
	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/aggregator/state"
	"github.com/cgpilot/cgpilot/api/report"
)

//go:embed static
var static embed.FS

// Server serves the API and the dashboard.
type Server struct {
	Store    *state.Store
	Analysis *analysis.Analysis
	Profiles *profile.Profiles
	// Leader reports whether this replica holds the state (nil: always).
	Leader func() bool
	Now    func() time.Time
	// Identity names the replica on the page.
	Identity string
}

// Register adds the routes to mux.
func (s *Server) Register(mux *http.ServeMux) {
	sub, _ := fs.Sub(static, "static")
	files := http.FileServerFS(sub)
	mux.Handle("GET /{$}", files)
	mux.Handle("GET /static/", http.StripPrefix("/static/", files))
	for path, fn := range map[string]func(*http.Request) any{
		"/api/v1/summary":    s.summary,
		"/api/v1/coverage":   func(*http.Request) any { return s.Analysis.Coverage() },
		"/api/v1/capacity":   s.capacity,
		"/api/v1/saturation": s.saturation,
		"/api/v1/history":    func(r *http.Request) any { return s.Analysis.History(limit(r, 200)) },
		"/api/v1/anomalies":  func(r *http.Request) any { return s.Analysis.Anomalies(s.now(), limit(r, 100)) },
		"/api/v1/nodes":      func(*http.Request) any { return s.Profiles.Nodes(s.now()) },
		"/api/v1/hotnodes":   s.hot,
		"/api/v1/workloads":  s.workloads,
	} {
		mux.Handle("GET "+path, jsonHandler(fn))
	}
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func jsonHandler(fn func(*http.Request) any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(fn(r))
	})
}

func limit(r *http.Request, def int) int {
	if n, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && n > 0 {
		return min(n, 10000)
	}
	return def
}

// Summary is the dashboard's headline.
type Summary struct {
	Generated  time.Time         `json:"generated"`
	Replica    string            `json:"replica"`
	Leader     bool              `json:"leader"`
	Nodes      int               `json:"nodes"`
	Stale      int               `json:"staleNodes"`
	Hot        int               `json:"hotNodes"`
	Watermark  float64           `json:"hotWatermark"`
	Coverage   analysis.Coverage `json:"coverage"`
	Cluster    analysis.Capacity `json:"cluster"`
	Totals     analysis.Totals   `json:"totals"`
	Anomalies  map[string]int    `json:"anomalies"`
	Recommend  int               `json:"recommendations"`
	Reports    uint64            `json:"reportsAccepted"`
	LateWindow uint64            `json:"lateReports"`
}

func (s *Server) summary(*http.Request) any {
	now := s.now()
	sum := Summary{Generated: now.UTC(), Replica: s.Identity, Leader: s.Leader == nil || s.Leader(), Watermark: s.Profiles.Watermark()}
	for _, n := range s.Profiles.Nodes(now) {
		sum.Nodes++
		if n.Stale {
			sum.Stale++
		}
		if n.Hot {
			sum.Hot++
		}
	}
	sum.Coverage = s.Analysis.Coverage()
	sum.Cluster, _ = s.Analysis.Capacity(now)
	sum.Totals = s.Analysis.Totals()
	an := s.Analysis.Anomalies(now, 0)
	sum.Anomalies = map[string]int{"failedWrites": len(an.FailedWrites), "multiplePolicies": len(an.MultiplePolicies),
		"nodesNotReporting": len(an.NodesNotReport), "samplingGaps": len(an.SamplingGaps), "unadmitted": len(an.Unadmitted)}
	st := s.Store.Stats()
	sum.Recommend, sum.Reports, sum.LateWindow = st.Recommendations, st.Accepted, st.LateReports
	return sum
}

func (s *Server) capacity(*http.Request) any {
	cluster, ns := s.Analysis.Capacity(s.now())
	return map[string]any{"cluster": cluster, "namespaces": ns}
}

func (s *Server) saturation(r *http.Request) any {
	ns := r.URL.Query().Get("namespace")
	return map[string]any{"namespace": ns, "namespaces": s.Analysis.Namespaces(), "points": s.Analysis.Saturation(ns)}
}

func (s *Server) hot(*http.Request) any {
	return map[string]any{"watermark": s.Profiles.Watermark(), "nodes": s.Profiles.Hot(s.now())}
}

// Workload is one row of /api/v1/workloads.
type Workload struct {
	Key          report.Key                     `json:"key"`
	Policy       string                         `json:"policy,omitempty"`
	Preset       string                         `json:"preset"`
	Adjustable   bool                           `json:"adjustable"`
	Reason       string                         `json:"reason,omitempty"`
	Current      report.Resources               `json:"current"`
	Original     report.Resources               `json:"original"`
	Samples      int64                          `json:"samples"`
	Nodes        int                            `json:"nodes"`
	Rec          *report.WorkloadRecommendation `json:"recommendation,omitempty"`
	NotMergeable string                         `json:"notMergeable,omitempty"`
}

func (s *Server) workloads(r *http.Request) any {
	ns := r.URL.Query().Get("namespace")
	out := []Workload{}
	s.Store.Entries(func(e state.Entry) {
		if ns != "" && e.Key.Namespace != ns {
			return
		}
		out = append(out, Workload{Key: e.Key, Policy: e.Policy, Preset: e.Preset, Adjustable: e.Adjustable, Reason: e.Reason,
			Current: e.Current, Original: e.Original, Samples: e.Samples, Nodes: e.Nodes, Rec: e.Rec, NotMergeable: e.NotMergeable})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	if n := limit(r, 1000); len(out) > n {
		out = out[:n]
	}
	return out
}
