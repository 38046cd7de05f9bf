//go:build linux

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestParseBench: the result line is found on the benchmark's own line
// and after log lines that split it from its name; another benchmark's
// line is not taken.
func TestParseBench(t *testing.T) {
	out := `BenchmarkOther-2   	      5	  100 ns/op	 9.0 p50-ms
BenchmarkAnnotationToCgroup-2   	E1126 04:36:47.305190   15980 event.go:467] "Unable to record event"
      40	  46811128 ns/op	        37.45 p50-ms	         1.880 p50/watch	       130.2 p99-ms
--- BENCH: BenchmarkAnnotationToCgroup-2
`
	m := map[string]float64{}
	if !parseBench([]byte(out), "BenchmarkAnnotationToCgroup", m) {
		t.Fatal("result line not found")
	}
	if m["p50-ms"] != 37.45 || m["p99-ms"] != 130.2 || m["p50/watch"] != 1.88 || m["ns/op"] != 46811128 {
		t.Fatalf("metrics %v", m)
	}
	if parseBench([]byte("BenchmarkX-2 \t--- SKIP: no root\n"), "BenchmarkX", map[string]float64{}) {
		t.Fatal("a skipped benchmark gave a result")
	}
}

// TestMarkdown: a path with a floor gives its figures, ratios and verdict;
// a footprint its own figures; a failed path its error.
func TestMarkdown(t *testing.T) {
	pass := false
	rs := []result{
		{path: path{Name: "annotation", oursP50: "p50-ms", Floor: "the watch", Goal: 1.2}, P50: 12, P99: 30, FloorP50: 10, FloorP99: 20, RatioP50: 1.2, RatioP99: 1.5, Pass: &pass},
		{path: path{Name: "footprint", Floor: "goals"}, Metrics: map[string]float64{"agent-cpu-%": 0.633, "rss-MiB": 64.33}},
		{path: path{Name: "nodefootprint", Floor: "node goals"}, Metrics: map[string]float64{"agent-cpu-%": 0.378, "agent-rss-MiB": 38.54, "kubelet-cpu-%": 7.46,
			"settle-s": 101.2, "settle-agent-cpu-%": 0.512, "settle-kubelet-cpu-%": 8.31}},
		{path: path{Name: "resize"}, Error: "go test: exit status 1"},
	}
	var b bytes.Buffer
	markdown(&b, rs, time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
	out := b.String()
	for _, want := range []string{
		"`make bench`, 2026-11-28",
		"| annotation | 12.0 ms | 30.0 ms | the watch | 10.0 / 20.0 ms | 1.20× / 1.50× | ≤ 1.2×: not met |",
		"| footprint | agent-cpu-% 0.633, rss-MiB 64.3 | | goals | | | |",
		"| nodefootprint | agent-cpu-% 0.378, agent-rss-MiB 38.5, kubelet-cpu-% 7.46, settle-s 101, settle-agent-cpu-% 0.512, settle-kubelet-cpu-% 8.31 | | node goals | | | |",
		"| resize | go test: exit status 1 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
