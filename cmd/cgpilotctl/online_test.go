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
			Decision: "exclusive cpus 2-3", Cgroups: []local.CgroupView{{Path: "/kubepods/podu", CPUs: "2-3"}}})
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
		{[]string{"explain", "-socket", sock, "default/db"}, 0, []string{"DECISION", "exclusive cpus 2-3", "/kubepods/podu"}},
		{[]string{"explain", "-socket", sock, "default/x"}, 1, []string{"not found"}},
		{[]string{"explain", "-socket", sock, "nodash"}, 2, []string{"NAMESPACE/NAME"}},
		{[]string{"events", "-socket", sock}, 0, []string{"CPUsAllocated", "default/db"}},
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
