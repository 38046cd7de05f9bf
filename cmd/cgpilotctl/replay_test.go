package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cgpilot/cgpilot/recommend"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update once)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\ngot:\n%s", name, got)
	}
}

var elapsedRE = regexp.MustCompile(`replayed in [0-9.]+[µmn]?s`)

// TestReplayGolden runs the command end to end on a small fixture trace and
// compares the table, the recommendations CSV and the summary JSON with
// golden files.
func TestReplayGolden(t *testing.T) {
	dir := t.TempDir()
	recs, sum := filepath.Join(dir, "recs.csv"), filepath.Join(dir, "summary.json")
	var stdout, stderr bytes.Buffer
	code := run([]string{"replay", "--trace", "testdata/mini.csv", "--recs-out", recs, "--summary-out", sum, "--workers", "2"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), " (100%)") { // series, or boundaries when replayed together
		t.Errorf("no progress display on stderr: %q", stderr.String())
	}
	golden(t, "mini.table.golden", elapsedRE.ReplaceAll(stdout.Bytes(), []byte("replayed in X")))
	rb, err := os.ReadFile(recs)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "mini.recs.golden.csv", rb)
	sb, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	var doc replaySummary
	if err := json.Unmarshal(sb, &doc); err != nil {
		t.Fatal(err)
	}
	doc.ElapsedSec = 0
	norm, _ := json.MarshalIndent(doc, "", "  ")
	golden(t, "mini.summary.golden.json", append(norm, '\n'))
	if doc.Result.Policy.Policy != recommend.DefaultPreset || doc.Result.Control.Policy != "vpa" {
		t.Errorf("policy %q control %q", doc.Result.Policy.Policy, doc.Result.Control.Policy)
	}
	// Every recommendation row lies on the hourly grid and carries both targets.
	lines := strings.Split(strings.TrimSpace(string(rb)), "\n")
	if !strings.HasPrefix(lines[0], "ts,series,cpu_target,mem_target,") || len(lines) < 100 {
		t.Fatalf("recs header %q, %d lines", lines[0], len(lines))
	}
}

func TestReplayConfigFile(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"replay", "--quiet", "--trace", "testdata/mini.csv", "--config", "testdata/policy.json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "tight") || stderr.Len() != 0 {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
}

func TestReplayErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no trace", []string{}, 2, "usage: cgpilotctl replay"},
		{"unknown policy", []string{"--trace", "testdata/mini.csv", "--policy", "nope"}, 2, "unknown policy preset"},
		{"missing config", []string{"--trace", "testdata/mini.csv", "--config", "testdata/none.json"}, 2, "none.json"},
		{"unsorted trace", []string{"--trace", "testdata/unsorted.csv"}, 1, "testdata/unsorted.csv:4: series \"a\" unsorted"},
		{"missing trace", []string{"--trace", "testdata/none.csv"}, 1, "none.csv"},
		{"bad flag", []string{"--trace", "testdata/mini.csv", "--step", "soon"}, 2, "invalid value"},
		{"stray argument", []string{"--trace", "testdata/mini.csv", "extra"}, 2, "usage"},
		{"unwritable recs", []string{"--trace", "testdata/mini.csv", "--recs-out", "/nonexistent/dir/r.csv"}, 1, "/nonexistent/dir/r.csv"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"replay", "--quiet"}, tc.args...), &stdout, &stderr)
			if code != tc.wantCode || !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", code, stderr.String(), tc.wantCode, tc.wantErr)
			}
		})
	}
}

// TestReplaySweep runs the frontier sweep on the fixture trace: one CSV row
// per swept policy plus the control, and an SVG with both panels.
func TestReplaySweep(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"replay", "--trace", "testdata/mini.csv", "--sweep", "--sweep-out", dir, "--quiet"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "mini.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	want := len(sweepVPAPercentiles) + len(sweepObjectives) + len(sweepFleet) + 3 + len(sweepBoundBlocks) + 1 // + default and cyclic presets, control, bounds, budgeted bound
	if len(lines) != want+1 || !strings.HasPrefix(lines[0], "trace,family,policy,param,scored_samples,cpu_relative_slack") {
		t.Fatalf("sweep CSV has %d lines (want %d + header):\n%s", len(lines), want, b)
	}
	// The VPA sweep's p90 point is upstream VPA itself: it must equal the control.
	var p90, control []string
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		switch f[2] {
		case "vpa p90":
			p90 = f[4:]
		case "vpa (upstream default)":
			control = f[4:]
		}
	}
	if p90 == nil || strings.Join(p90, ",") != strings.Join(control, ",") {
		t.Errorf("vpa p90 %v differs from the control %v", p90, control)
	}
	// The hindsight bounds keep to VPA's violation rates (CSV columns 6
	// and 9), the finer blocks at no more slack than the coarser.
	var bounds [][]string
	for _, l := range lines[1:] {
		if f := strings.Split(l, ","); f[1] == "bound" {
			bounds = append(bounds, f)
		}
	}
	num := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	if len(bounds) != len(sweepBoundBlocks) {
		t.Fatalf("%d bound rows, want %d", len(bounds), len(sweepBoundBlocks))
	}
	for _, b := range bounds {
		if num(b[6]) > num(control[2]) || num(b[9]) > num(control[5]) {
			t.Errorf("bound %v above VPA's violation rates %v", b, control)
		}
	}
	if num(bounds[1][5]) > num(bounds[0][5]) {
		t.Errorf("half-day bound %v above the daily one %v", bounds[1], bounds[0])
	}
	// The budgeted bound keeps to VPA's violations and to one counted
	// change per series-day (CSV columns 7 and 10).
	var budgeted []string
	for _, l := range lines[1:] {
		if f := strings.Split(l, ","); f[1] == "budget-bound" {
			budgeted = f
		}
	}
	if budgeted == nil || num(budgeted[6]) > num(control[2]) || num(budgeted[9]) > num(control[5]) ||
		num(budgeted[7]) > sweepChangeBudget || num(budgeted[10]) > sweepChangeBudget {
		t.Errorf("budgeted bound %v over VPA's violations %v or the change budget", budgeted, control)
	}
	// The gap-closure table and its Markdown rows.
	if !strings.Contains(stdout.String(), "gap closure mini: G = ") {
		t.Errorf("no gap-closure table:\n%s", stdout.String())
	}
	md, err := os.ReadFile(filepath.Join(dir, "mini.gap.md"))
	if err != nil || !strings.Contains(string(md), "| mini | CPU | cgpilot-balanced (default) |") {
		t.Errorf("gap rows %q, %v", md, err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "mini.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"<svg", ">CPU<", ">memory<", "cgpilot-slo, per-container CPU objective swept", "cgpilot-fleet, node-wide", "hindsight bound", "</svg>"} {
		if !strings.Contains(string(svg), s) {
			t.Errorf("SVG lacks %q", s)
		}
	}
	if !strings.Contains(stdout.String(), "cgpilot-balanced") {
		t.Errorf("sweep table:\n%s", stdout.String())
	}
}

// TestReplaySweepZeroMemory: a trace whose mem_bytes column is all zero
// (a source without memory, converted with zeros) sweeps like any other:
// its memory bounds are zero, not an error ("no scored samples").
func TestReplaySweepZeroMemory(t *testing.T) {
	b, err := os.ReadFile("testdata/mini.csv")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for i, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if i > 0 {
			f := strings.Split(l, ",")
			f[3] = "0"
			l = strings.Join(f, ",")
		}
		out.WriteString(l + "\n")
	}
	dir := t.TempDir()
	trace := filepath.Join(dir, "zeromem.csv")
	if err := os.WriteFile(trace, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"replay", "--trace", trace, "--sweep", "--sweep-out", dir, "--quiet"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "budgeted hindsight bound") {
		t.Errorf("sweep table:\n%s", stdout.String())
	}
}
