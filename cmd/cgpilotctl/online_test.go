package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/recommend"
)

// serveAPI serves canned agent API answers on a unix socket; the agent's
// own handler is tested against the real API server in agent/e2e_test.go.
func serveAPI(t *testing.T) string {
	sock := filepath.Join(t.TempDir(), "local.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	js := func(v any) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { json.NewEncoder(w).Encode(v) }
	}
	mux.Handle("/v1/pods", js([]local.PodView{
		{Namespace: "default", Name: "db", QoS: "Guaranteed", Pool: local.PoolExclusive, State: "Allocated", CPUs: "2-3"},
		{Namespace: "default", Name: "web", QoS: "Burstable", Pool: local.PoolShared, State: "Shared", CPUs: "0-1,4-7"},
	}))
	mux.Handle("/v1/pools", js(local.PoolsView{NodeSummary: local.NodeSummary{CPUs: "0-7", SharedPool: "0-1,4-7", Exclusive: "2-3", ExclusiveCap: 5, ExclusivePods: 1, SharedPods: 1},
		Assignments: []local.AssignmentView{{Namespace: "default", Name: "db", CPUs: "2-3"}}}))
	mux.HandleFunc("/v1/explain", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("pod") != "default/db" {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]string{"error": `pod "x" not found`})
			return
		}
		json.NewEncoder(w).Encode(local.ExplainView{PodView: local.PodView{Namespace: "default", Name: "db", State: "Allocated", CPUs: "2-3"},
			Decision: "exclusive cpus 2-3", Cgroups: []local.CgroupView{{Path: "/kubepods/podu", CPUs: "2-3"}},
			Containers: []local.ContainerView{{Name: "app", ID: "containerd://abc", State: "running", Sampled: true}, {Name: "side", State: "waiting"}},
			Rightsizing: &local.Recommendation{Policy: "web", Preset: "cgpilot-balanced", Mode: "InPlace", State: "Applied", Reason: "the kubelet applied the resize",
				Containers: []local.ContainerRecommendation{{Name: "app", CPU: &local.ResourceRecommendation{Target: "250m", Lower: "200m", Upper: "400m", Request: "2", Note: "StepBounded", Explain: "cost p97"}}}}})
	})
	mux.Handle("/v1/recs", js([]local.RecView{{Namespace: "shop", Pod: "web-1", Container: "app", CPUP50: 0.12, CPUP95: 0.31, CPUMax: 0.5,
		MemP50: 100 << 20, MemP95: 120 << 20, MemMax: 130 << 20, Request: "2/2Gi", Limit: "4/4Gi", Recommendation: "250m/160Mi", Policy: "web", Mode: "InPlace", State: "Resized"}}))
	mux.HandleFunc("/v1/history", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("since") != "2d" {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]string{"error": "since=" + r.URL.Query().Get("since")})
			return
		}
		w.Write([]byte("ts,series,cpu_cores,mem_bytes,cpu_cores_max\n300,shop/Deployment/web/app,0.1,1000,0.2\n"))
	})
	mux.Handle("/v1/events", js([]local.EventRecord{{Type: "Normal", Reason: "CPUsAllocated", Namespace: "default", Pod: "db", Message: "exclusive cpus 2-3"}}))
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func TestOnlineCommands(t *testing.T) {
	sock := serveAPI(t)
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"pods", "-socket", sock}, 0, []string{"NAMESPACE", "db", "Allocated", "2-3", "0-1,4-7"}},
		{[]string{"pods", "-socket", sock, "-o", "json"}, 0, []string{`"name":"db"`}},
		{[]string{"pools", "-socket", sock}, 0, []string{"SHARED POOL", "0-1,4-7", "cap 5 cpus", "db"}},
		{[]string{"explain", "-socket", sock, "default/db"}, 0, []string{"DECISION", "exclusive cpus 2-3", "/kubepods/podu",
			"running containerd://abc, sampled", "waiting -, not sampled"}},
		{[]string{"explain", "-socket", sock, "default/x"}, 1, []string{"not found"}},
		{[]string{"explain", "-socket", sock, "nodash"}, 2, []string{"NAMESPACE/NAME"}},
		{[]string{"events", "-socket", sock}, 0, []string{"CPUsAllocated", "default/db"}},
		{[]string{"recs", "-socket", sock}, 0, []string{"CPU P50/P95/MAX", "web-1", "120m/310m/500m", "100Mi/120Mi/130Mi", "250m/160Mi", "InPlace", "Resized"}},
		{[]string{"explain", "-socket", sock, "default/db"}, 0, []string{"RIGHTSIZING", "mode InPlace: Applied", "app cpu: request 2, target 250m (200m..400m) [StepBounded]", "cost p97"}},
		{[]string{"history", "-socket", sock, "-since", "2d"}, 0, []string{"ts,series,cpu_cores", "shop/Deployment/web/app"}},
		{[]string{"history", "-socket", sock, "-since", "1d"}, 1, []string{"since=1d"}},
		{[]string{"pods", "-socket", sock, "-o", "yaml"}, 2, []string{"table or json"}},
		{[]string{"pods", "-socket", filepath.Join(t.TempDir(), "none")}, 1, []string{"is cgpilot-agent running"}},
	} {
		var out, errOut bytes.Buffer
		code := run(tc.args, &out, &errOut)
		got := out.String() + errOut.String()
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d\n%s", tc.args, code, tc.code, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, got)
			}
		}
	}
}

// TestHistoryToGzipFile: history -o FILE.csv.gz writes a gzip file that
// replay reads as it is.
func TestHistoryToGzipFile(t *testing.T) {
	sock := serveAPI(t)
	out := filepath.Join(t.TempDir(), "h.csv.gz")
	var o, e bytes.Buffer
	if code := run([]string{"history", "-socket", sock, "-since", "2d", "-o", out}, &o, &e); code != 0 {
		t.Fatalf("exit %d: %s", code, e.String())
	}
	tr, err := recommend.ReadTraceFile(out)
	if err != nil || len(tr.Series) != 1 || tr.Series[0].Name != "shop/Deployment/web/app" {
		t.Fatalf("trace from history: %+v, %v", tr, err)
	}
	if !strings.Contains(e.String(), "1 rows") {
		t.Fatalf("stderr %q", e.String())
	}
}
