// Package web serves the aggregator's effect analysis: a JSON API under
// /api/v1/ and a dashboard page (/) with charts of coverage, released
// capacity, the saturation trend, hot nodes and anomalies, drawn in the
// browser from that API.
//
// # Who sees what
//
// Every API request carries a bearer token (auth.Guard: TokenReview, then
// SubjectAccessReview). What a user may read follows what RBAC lets it
// read of the WorkloadRecommendations the aggregator writes: a user who
// may list workloadrecommendations.cgpilot.io in namespace N may read N's
// views (?namespace=N: its workloads, coverage, capacity, saturation,
// history, anomalies); one who may list them in every namespace may read
// the cluster's views too (no namespace: every namespace, the nodes, the
// hot nodes). GET /api/v1/access says which the caller has. The page and
// its script hold no data and are served to anyone; the page asks for a
// token (or takes one from its URL's #token=, which never reaches a
// server) and keeps it in the tab's sessionStorage. deploy/ ships the
// roles (cgpilot-dashboard-viewer for the cluster, and read access to
// WorkloadRecommendations aggregated into the built-in view role for a
// namespace).
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
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/cgpilot/cgpilot/aggregator/analysis"
	"github.com/cgpilot/cgpilot/aggregator/auth"
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
	// Guard authenticates and authorizes every API request; nil refuses
	// them all.
	Guard *auth.Guard
	// Views are more cluster views by path (GET, guarded as the others):
	// what the wiring adds from rooms web does not import (the
	// rescheduler's status).
	Views map[string]func(*http.Request) any
}

// Access is the permission that guards the views: listing
// WorkloadRecommendations, in a namespace for its views and in every
// namespace (Namespace "") for the cluster's.
func Access(namespace string) auth.Attributes {
	return auth.Attributes{Verb: "list", Group: "cgpilot.io", Resource: "workloadrecommendations", Namespace: namespace}
}

// Register adds the routes to mux.
func (s *Server) Register(mux *http.ServeMux) {
	sub, _ := fs.Sub(static, "static")
	files := http.FileServerFS(sub)
	mux.Handle("GET /{$}", files)
	mux.Handle("GET /static/", http.StripPrefix("/static/", files))
	for path, v := range map[string]struct {
		cluster bool // only the cluster's view
		fn      func(*http.Request, string) any
	}{
		"/api/v1/summary":    {false, s.summary},
		"/api/v1/coverage":   {false, func(_ *http.Request, ns string) any { return s.Analysis.CoverageIn(ns) }},
		"/api/v1/capacity":   {false, s.capacity},
		"/api/v1/saturation": {false, s.saturation},
		"/api/v1/history":    {false, func(r *http.Request, ns string) any { return s.Analysis.HistoryIn(ns, limit(r, 200)) }},
		"/api/v1/anomalies":  {false, func(r *http.Request, ns string) any { return s.Analysis.AnomaliesIn(s.now(), ns, limit(r, 100)) }},
		"/api/v1/nodes":      {true, func(*http.Request, string) any { return s.Profiles.Nodes(s.now()) }},
		"/api/v1/hotnodes":   {true, s.hot},
		"/api/v1/workloads":  {false, s.workloads},
	} {
		mux.Handle("GET "+path, s.api(v.cluster, v.fn))
	}
	for path, fn := range s.Views {
		mux.Handle("GET "+path, s.api(true, func(r *http.Request, _ string) any { return fn(r) }))
	}
	mux.HandleFunc("GET /api/v1/access", s.access)
}

// guard is s.Guard, or one that refuses everyone.
func (s *Server) guard() *auth.Guard {
	if s.Guard != nil {
		return s.Guard
	}
	return &auth.Guard{Authn: refuseAll{}, Authz: refuseAll{}}
}

type refuseAll struct{}

func (refuseAll) Authenticate(context.Context, string) (auth.Identity, error) {
	return auth.Identity{}, errors.New("auth: unauthenticated: the dashboard has no authenticator")
}

func (refuseAll) Authorize(context.Context, auth.Identity, auth.Attributes) (bool, error) {
	return false, nil
}

// api serves fn's JSON to callers allowed its scope: ?namespace=N needs
// N's access, none (or a cluster-only view) the cluster's.
func (s *Server) api(clusterOnly bool, fn func(*http.Request, string) any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := s.guard()
		id, ok := g.Identify(w, r)
		if !ok {
			return
		}
		ns := r.URL.Query().Get("namespace")
		if clusterOnly {
			ns = ""
		}
		if !g.Allow(w, r, id, Access(ns)) {
			return
		}
		writeJSON(w, fn(r, ns))
	})
}

// AccessView is GET /api/v1/access: who the caller is and whether it may
// read the cluster's views (else only namespaces it names).
type AccessView struct {
	User    string `json:"user"`
	Cluster bool   `json:"cluster"`
}

func (s *Server) access(w http.ResponseWriter, r *http.Request) {
	g := s.guard()
	id, ok := g.Identify(w, r)
	if !ok {
		return
	}
	cluster, err := g.Allowed(r, id, Access(""))
	if err != nil {
		auth.Refuse(w, err)
		return
	}
	writeJSON(w, AccessView{User: id.User, Cluster: cluster})
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

func limit(r *http.Request, def int) int {
	if n, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && n > 0 {
		return min(n, 10000)
	}
	return def
}

// Summary is the dashboard's headline; a namespace's (Namespace set)
// has no node counts and no report counters, which are the cluster's.
type Summary struct {
	Generated  time.Time         `json:"generated"`
	Namespace  string            `json:"namespace,omitempty"`
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

func (s *Server) summary(_ *http.Request, ns string) any {
	now := s.now()
	sum := Summary{Generated: now.UTC(), Namespace: ns, Replica: s.Identity, Leader: s.Leader == nil || s.Leader(), Watermark: s.Profiles.Watermark()}
	if ns != "" {
		sum.Coverage = s.Analysis.CoverageIn(ns)
		sum.Cluster = s.capacityIn(ns)
		an := s.Analysis.AnomaliesIn(now, ns, 0)
		sum.Anomalies = map[string]int{"failedWrites": len(an.FailedWrites), "multiplePolicies": len(an.MultiplePolicies), "unadmitted": len(an.Unadmitted)}
		s.Store.Entries(func(e state.Entry) {
			if e.Key.Namespace == ns && e.Rec != nil {
				sum.Recommend++
			}
		})
		return sum
	}
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

func (s *Server) capacity(_ *http.Request, ns string) any {
	if ns != "" {
		c := s.capacityIn(ns)
		return map[string]any{"cluster": c, "namespaces": []analysis.Capacity{c}}
	}
	cluster, byNS := s.Analysis.Capacity(s.now())
	return map[string]any{"cluster": cluster, "namespaces": byNS}
}

// capacityIn is one namespace's capacity (zero when it has none).
func (s *Server) capacityIn(ns string) analysis.Capacity {
	_, byNS := s.Analysis.Capacity(s.now())
	for _, c := range byNS {
		if c.Namespace == ns {
			return c
		}
	}
	return analysis.Capacity{Namespace: ns}
}

func (s *Server) saturation(_ *http.Request, ns string) any {
	names := []string{ns}
	if ns == "" {
		names = s.Analysis.Namespaces()
	}
	return map[string]any{"namespace": ns, "namespaces": names, "points": s.Analysis.Saturation(ns)}
}

func (s *Server) hot(*http.Request, string) any {
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

func (s *Server) workloads(r *http.Request, ns string) any {
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
