package aggregator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/aggregator"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/test/aggtest"
	"github.com/cgpilot/cgpilot/test/tier"
)

// standalone starts a replica without an API server (static tokens) and
// a client per node of a small fleet.
func standalone(t *testing.T, nodes int) (*aggtest.Replica, *aggtest.Fleet, *aggtest.TLS, []*report.Client) {
	t.Helper()
	dir := t.TempDir()
	certs, err := aggtest.Certs(dir)
	if err != nil {
		t.Fatal(err)
	}
	fleet := aggtest.NewFleet(aggtest.FleetConfig{Nodes: nodes, PodsPerNode: 30, Seed: 7})
	var tokens strings.Builder
	for i := range nodes {
		fmt.Fprintf(&tokens, "token-%d,%s\n", i, fleet.NodeName(i))
	}
	tokens.WriteString(viewerToken + ",@viewer,*\n")
	tokFile := filepath.Join(dir, "tokens")
	os.WriteFile(tokFile, []byte(tokens.String()), 0o600)
	r := aggtest.Start(t, aggregator.Config{Standalone: true, StaticTokens: tokFile, CertFile: certs.CertFile, KeyFile: certs.KeyFile,
		Identity: "solo", FoldInterval: 100 * time.Millisecond, Step: time.Nanosecond})
	var clients []*report.Client
	for i := range nodes {
		tf := filepath.Join(dir, fmt.Sprintf("token-%d", i))
		os.WriteFile(tf, []byte(fmt.Sprintf("token-%d", i)), 0o600)
		c, err := report.NewClient(report.ClientConfig{URL: r.URL(), TokenFile: tf, CAFile: certs.CAFile, AgentID: fleet.Agent(i).ID, Started: fleet.Agent(i).Started})
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	return r, fleet, certs, clients
}

// TestStandaloneEndToEnd: agents' clients send a fleet's reports over
// HTTPS to a replica; once the windows close, every node fetches merged
// recommendations for its containers, and the dashboard's API and the
// metrics reflect what was sent.
func TestStandaloneEndToEnd(t *testing.T) {
	r, fleet, _, clients := standalone(t, 4)
	ctx := context.Background()
	// 70 windows ending just before now (more than the presets' hour of
	// history), so they close at once.
	end := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Minute)
	for w := 69; w >= 0; w-- {
		for i, c := range clients {
			if err := c.Enqueue(fleet.Report(i, end.Add(-time.Duration(w)*time.Minute))); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, c := range clients {
		if err := c.Flush(ctx); err != nil {
			t.Fatalf("node %d: %v (%+v)", i, err, c.Stats())
		}
		if s := c.Stats(); s.Accepted != 70 || s.Rejected != 0 {
			t.Fatalf("node %d: %+v", i, s)
		}
	}
	aggtest.Wait(t, "recommendations", 30*time.Second, func() bool {
		recs, err := clients[0].Fetch(ctx, fleet.NodeName(0))
		return err == nil && len(recs.Items) == len(fleet.Keys(0))
	})
	recs, _ := clients[1].Fetch(ctx, fleet.NodeName(1))
	for _, it := range recs.Items {
		if it.CPU.Target <= 0 || it.Memory.Target <= 0 || it.Samples <= 0 || !it.FreshUntil.After(time.Now()) {
			t.Errorf("recommendation %+v", it)
		}
	}
	if _, err := clients[1].Fetch(ctx, fleet.NodeName(0)); err == nil {
		t.Error("node 1's token fetched node 0's recommendations")
	}
	var sum struct {
		Nodes    int  `json:"nodes"`
		Leader   bool `json:"leader"`
		Coverage struct {
			Workloads int `json:"workloads"`
		} `json:"coverage"`
		Cluster struct {
			ReleasedCPU float64 `json:"releasedCPU"`
		} `json:"cluster"`
		Recs int `json:"recommendations"`
	}
	getJSON(t, r.HTTPURL()+"/api/v1/summary", &sum)
	if sum.Nodes != 4 || !sum.Leader || sum.Coverage.Workloads == 0 || sum.Cluster.ReleasedCPU <= 0 || sum.Recs == 0 {
		t.Errorf("summary %+v", sum)
	}
	metrics := get(t, r.HTTPURL()+"/metrics")
	for _, want := range []string{`cgpilot_aggregator_reports_total{result="accepted"} 280`, "cgpilot_aggregator_leader 1", `cgpilot_aggregator_nodes{state="reporting"} 4`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// viewerToken is a static user who may read everything (standalone).
const viewerToken = "viewer-token"

func get(t *testing.T, url string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(get(t, url)), v); err != nil {
		t.Fatal(err)
	}
}

// TestGrafanaDashboardMetrics: every metric the Grafana dashboard queries
// is one the aggregator exports.
func TestGrafanaDashboardMetrics(t *testing.T) {
	r, fleet, _, clients := standalone(t, 1)
	c := clients[0]
	c.Enqueue(fleet.Report(0, time.Now().UTC().Truncate(time.Minute)))
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, line := range strings.Split(get(t, r.HTTPURL()+"/metrics"), "\n") {
		if strings.HasPrefix(line, "# TYPE ") {
			f := strings.Fields(line)
			exported[f[2]] = true
		}
	}
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "cgpilot-aggregator.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	// Exported only with an API server (the e2e tests see them).
	for _, m := range []string{"cgpilot_aggregator_checkpoint_writes_total"} {
		exported[m] = true
	}
	name := regexp.MustCompile(`\b(cgpilot_aggregator_[a-z_]+|process_[a-z_]+)`)
	var missing []string
	queried := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				queried++
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
				if !exported[base] {
					missing = append(missing, p.Title+": "+m)
				}
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 || queried < 20 {
		t.Errorf("%d metric references; not exported:\n%s", queried, strings.Join(missing, "\n"))
	}
}
