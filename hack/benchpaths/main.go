//go:build linux

// Command benchpaths runs the benchmarks of cgpilot's control paths and its
// footprint, one after the other in one run, and prints each path beside
// its floor (the same effect reached without the agent, measured in the
// same benchmark on the same machine) with their ratio; with -out it also
// writes the figures as JSON. It is `make bench`.
//
//	go run ./hack/benchpaths [-paths annotation,refresh,resize,footprint,nodefootprint] [-out bench.json]
//
// Each path is one `go test -bench` of an existing benchmark; this command
// only runs them with the tiers' environment (kernel, e2e, node) and reads
// the metrics they report, so a reader can repeat any one by hand. Paths
// whose tier cannot run here (not root, no Kubernetes binaries) fail with
// the benchmark's own skip message. A node benchmark waits for the host's
// one kubelet node like the node tests do.
//
// It uses the standard library only: it parses go test's benchmark lines
// ("BenchmarkX  1  123 ns/op  4.5 p50-ms ..."), which are stable.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// path is one measured path: the benchmark that measures it, and which of
// its metrics are ours and which the floor's.
type path struct {
	Name      string `json:"name"`
	Benchmark string `json:"benchmark"`
	Package   string `json:"package"`
	Runs      int    `json:"runs"` // -benchtime Nx
	// Ours and Floor name the p50 and p99 metrics (milliseconds, or the
	// unit the benchmark reports); an empty floor is a path with goals
	// of its own (the footprint).
	oursP50, oursP99, floorP50, floorP99 string
	Floor                                string  `json:"floor"` // what the floor is, for the table
	Goal                                 float64 `json:"goal,omitempty"`
}

// result is one path's figures.
type result struct {
	path
	Metrics  map[string]float64 `json:"metrics"`
	P50      float64            `json:"p50,omitempty"`
	P99      float64            `json:"p99,omitempty"`
	FloorP50 float64            `json:"floorP50,omitempty"`
	FloorP99 float64            `json:"floorP99,omitempty"`
	RatioP50 float64            `json:"ratioP50,omitempty"`
	RatioP99 float64            `json:"ratioP99,omitempty"`
	Pass     *bool              `json:"pass,omitempty"`
	Error    string             `json:"error,omitempty"`
	Seconds  float64            `json:"seconds"`
}

var paths = []path{
	{Name: "annotation", Benchmark: "BenchmarkAnnotationToCgroup", Package: "./test/e2e/", Runs: 40,
		oursP50: "p50-ms", oursP99: "p99-ms", floorP50: "watch-p50-ms", floorP99: "watch-p99-ms",
		Floor: "the pod watch seeing the same patch", Goal: 1.2},
	{Name: "refresh", Benchmark: "BenchmarkSharedPoolRefresh200", Package: "./agent/pools/", Runs: 40,
		oursP50: "refresh-p50-ms", oursP99: "refresh-p99-ms", floorP50: "bare400-p50-ms", floorP99: "bare400-p99-ms",
		Floor: "bare writes of the same 400 files", Goal: 1.2},
	{Name: "resize", Benchmark: "BenchmarkNodeResizeToCgroup", Package: "./test/e2e/", Runs: 10,
		// From the agent's decision, the start the baseline has; the time
		// from the policy write (agent-cgroup-*) is in the metrics too.
		oursP50: "decided-cgroup-p50-ms", oursP99: "decided-cgroup-p99-ms", floorP50: "direct-cgroup-p50-ms", floorP99: "direct-cgroup-p99-ms",
		Floor: "the same pods/resize sent directly", Goal: 1.2},
	{Name: "footprint", Benchmark: "BenchmarkAgentFootprint", Package: "./test/e2e/", Runs: 1,
		Floor: "goals: ≤ 1 % of a core and ≤ 64 MiB at 1,000 pods"},
	{Name: "nodefootprint", Benchmark: "BenchmarkNodeFootprint", Package: "./test/e2e/", Runs: 1,
		Floor: "the real node at maxPods (110); goals: ≤ 0.3 % of a core, ≤ 48 MiB, below the kubelet's CPU"},
}

func main() {
	only := flag.String("paths", "annotation,refresh,resize,footprint,nodefootprint", "comma-separated paths to run")
	out := flag.String("out", "", "write the results as JSON to this file")
	md := flag.String("md", "", "write the results as a Markdown table (the README's) to this file")
	flag.Parse()
	want := map[string]bool{}
	for _, p := range strings.Split(*only, ",") {
		want[strings.TrimSpace(p)] = true
	}
	env, err := tierEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchpaths:", err)
		os.Exit(1)
	}
	var results []result
	for _, p := range paths {
		if !want[p.Name] {
			continue
		}
		fmt.Fprintf(os.Stderr, "==> %s: %s in %s (-benchtime %dx)\n", p.Name, p.Benchmark, p.Package, p.Runs)
		results = append(results, run(p, env))
	}
	printTable(os.Stdout, results)
	if *out != "" {
		doc := map[string]any{"date": time.Now().UTC().Format(time.RFC3339), "cpus": runtime.NumCPU(), "kernel": kernel(), "paths": results}
		b, _ := json.MarshalIndent(doc, "", "  ")
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "benchpaths:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "wrote", *out)
	}
	if *md != "" {
		var b bytes.Buffer
		markdown(&b, results, time.Now())
		if err := os.WriteFile(*md, b.Bytes(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "benchpaths:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "wrote", *md)
	}
	for _, r := range results {
		if r.Error != "" {
			os.Exit(1)
		}
	}
}

// tierEnv is the environment of the kernel, e2e and node tiers, with the
// Kubernetes and runtime binaries make test builds.
func tierEnv() ([]string, error) {
	env := append(os.Environ(), "CGPILOT_TEST_KERNEL=1", "CGPILOT_TEST_E2E=1", "CGPILOT_TEST_NODE=1")
	for _, b := range []struct{ script, name string }{{"test/k8sbins/build.sh", "CGPILOT_K8S_BINS"}, {"test/runtimebins/build.sh", "CGPILOT_RUNTIME_BINS"}} {
		if os.Getenv(b.name) != "" {
			continue
		}
		dir, err := exec.Command(b.script, "--check").Output()
		if err != nil {
			return nil, fmt.Errorf("%s --check: %v (run make deps, or set %s)", b.script, err, b.name)
		}
		env = append(env, b.name+"="+strings.TrimSpace(string(dir)))
	}
	return env, nil
}

func run(p path, env []string) result {
	r := result{path: p, Metrics: map[string]float64{}}
	t0 := time.Now()
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^"+p.Benchmark+"$", "-benchtime", fmt.Sprintf("%dx", p.Runs),
		"-count", "1", "-timeout", "90m", p.Package)
	cmd.Env = env
	var buf bytes.Buffer
	cmd.Stdout = io.MultiWriter(os.Stderr, &buf)
	cmd.Stderr = os.Stderr
	err := cmd.Run()
	r.Seconds = time.Since(t0).Round(time.Second).Seconds()
	found := parseBench(buf.Bytes(), p.Benchmark, r.Metrics)
	switch {
	case err != nil:
		r.Error = fmt.Sprintf("go test: %v", err)
		return r
	case !found:
		r.Error = "no benchmark line (skipped? see the output above)"
		return r
	}
	if p.oursP50 == "" {
		return r
	}
	r.P50, r.P99 = r.Metrics[p.oursP50], r.Metrics[p.oursP99]
	r.FloorP50, r.FloorP99 = r.Metrics[p.floorP50], r.Metrics[p.floorP99]
	if r.FloorP50 > 0 {
		r.RatioP50 = r.P50 / r.FloorP50
	}
	if r.FloorP99 > 0 {
		r.RatioP99 = r.P99 / r.FloorP99
	}
	if p.Goal > 0 && r.RatioP50 > 0 && r.RatioP99 > 0 {
		pass := r.RatioP50 <= p.Goal && r.RatioP99 <= p.Goal
		r.Pass = &pass
	}
	return r
}

func printTable(w io.Writer, results []result) {
	fmt.Fprintf(w, "\ncgpilot paths, %s, %d CPUs, kernel %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), kernel())
	fmt.Fprintf(w, "%-13s %10s %10s %12s %12s %8s %8s  %-6s %s\n", "path", "p50", "p99", "floor p50", "floor p99", "×p50", "×p99", "goal", "floor")
	for _, r := range results {
		switch {
		case r.Error != "":
			fmt.Fprintf(w, "%-13s %s\n", r.Name, r.Error)
		case r.oursP50 == "":
			fmt.Fprintf(w, "%-13s %s (%s)\n", r.Name, footprint(r), r.Floor)
		default:
			verdict := "-"
			if r.Pass != nil {
				verdict = map[bool]string{true: "PASS", false: "FAIL"}[*r.Pass]
			}
			fmt.Fprintf(w, "%-13s %8.1fms %8.1fms %10.1fms %10.1fms %7.2f× %7.2f×  %-6s %s (≤ %.1f×)\n", r.Name, r.P50, r.P99, r.FloorP50, r.FloorP99,
				r.RatioP50, r.RatioP99, verdict, r.Floor, r.Goal)
		}
	}
}

// footprint lists a footprint path's figures, those either benchmark
// reports, in one order.
func footprint(r result) string {
	var figs []string
	for _, k := range []string{"agent-cpu-%", "rss-MiB", "agent-rss-MiB", "kubelet-cpu-%", "kubelet-rss-MiB", "agent/kubelet-cpu", "containerd-cpu-%", "pods",
		"pools-cpu-%", "collector-cpu-%", "reporting-agent-cpu-%", "reporting-rss-MiB",
		// The node footprint's settling before its window, apart.
		"settle-s", "settle-agent-cpu-%", "settle-kubelet-cpu-%"} {
		if v, ok := r.Metrics[k]; ok {
			figs = append(figs, fmt.Sprintf("%s %.3g", k, v))
		}
	}
	return strings.Join(figs, ", ")
}

// markdown writes the results as the README's performance table: one row
// a path, its figures beside its floor's, the ratios and the verdict.
func markdown(w io.Writer, results []result, at time.Time) {
	fmt.Fprintf(w, "`make bench`, %s, %d CPUs, kernel %s:\n\n", at.UTC().Format("2006-01-02"), runtime.NumCPU(), kernel())
	fmt.Fprintln(w, "| path | p50 | p99 | floor | floor p50 / p99 | ratio p50 / p99 | goal |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range results {
		switch {
		case r.Error != "":
			fmt.Fprintf(w, "| %s | %s | | | | | |\n", r.Name, r.Error)
		case r.oursP50 == "":
			fmt.Fprintf(w, "| %s | %s | | %s | | | |\n", r.Name, footprint(r), r.Floor)
		default:
			verdict := "-"
			if r.Pass != nil {
				verdict = map[bool]string{true: "met", false: "not met"}[*r.Pass]
			}
			fmt.Fprintf(w, "| %s | %.1f ms | %.1f ms | %s | %.1f / %.1f ms | %.2f× / %.2f× | ≤ %.1f×: %s |\n", r.Name, r.P50, r.P99, r.Floor,
				r.FloorP50, r.FloorP99, r.RatioP50, r.RatioP99, r.Goal, verdict)
		}
	}
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// parseBench reads the metrics of benchmark name from go test's output
// into m and reports whether it found its result line. The result may
// follow the benchmark's name on a later line: the benchmarked code's own
// logging can land between the two.
func parseBench(out []byte, name string, m map[string]float64) bool {
	named := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && strings.HasPrefix(f[0], name) {
			named = true
		}
		if !named {
			continue
		}
		for j := 1; j+1 < len(f); j++ {
			if f[j+1] != "ns/op" {
				continue
			}
			if _, err := strconv.Atoi(f[j-1]); err != nil {
				continue
			}
			for i := j; i+1 < len(f); i += 2 {
				if v, err := strconv.ParseFloat(f[i], 64); err == nil {
					m[f[i+1]] = v
				}
			}
			return true
		}
	}
	return false
}
