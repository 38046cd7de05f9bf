//go:build linux

package main

import "testing"

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
