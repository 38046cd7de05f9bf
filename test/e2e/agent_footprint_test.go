//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgpilot/cgpilot/agent"
	"github.com/cgpilot/cgpilot/aggregator"
	"github.com/cgpilot/cgpilot/test/aggtest"
)

// BenchmarkAgentFootprint measures the whole agent process (the real
// binary, against the real API server) with 1,000 pods of one container
// each on its node, every container a real cgroup in every hierarchy: CPU
// as a share of one core and RSS, over a window of steady state
// (CGPILOT_FOOTPRINT_WINDOW, default 60s; CGPILOT_FOOTPRINT_PODS, default
// 1000). The baseline in the same run is the same agent with right-sizing
// off (pools only); the collector's own share is the time its rounds took
// (cgpilot_collector_round_seconds), as the difference of two whole-agent
// figures drowns in the sweep's variance on a shared machine. Goals
// (issue 12): the collector ≤ 0.5 % of one core, the whole agent ≤ 64 MiB
// RSS. A third run adds reports to an aggregator replica in this process
// (standalone, static token) at the agent's default period, one a minute
// (CGPILOT_FOOTPRINT_REPORT_PERIOD; its window is at least one period, so
// it holds a report and its merged fetch): what reporting costs the agent.
// CGPILOT_FOOTPRINT_PROFILE=DIR saves heap and goroutine profiles;
// CGPILOT_FOOTPRINT_SWEEP sets the agents' sweepInterval (default: the
// agent's own).
func BenchmarkAgentFootprint(b *testing.B) {
	n := envInt(b, "CGPILOT_FOOTPRINT_PODS", 1000)
	window := 60 * time.Second
	if v := os.Getenv("CGPILOT_FOOTPRINT_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("CGPILOT_FOOTPRINT_WINDOW: %v", err)
		}
		window = d
	}
	bd := newBed(b)
	bd.manyPods(b, n)
	procRoot := bd.k.SB.ProcRoot()
	bin := buildAgent(b)
	type result struct {
		cpu       float64 // share of one core
		rss, peak float64 // MiB
		targets   float64
		collector float64 // share of one core in collection rounds (wall time of the single-threaded rounds)
		fds       float64 // open descriptors at the window's end: the RLIMIT_NOFILE the agent needs
	}
	// The aggregator of the third run.
	aggDir := b.TempDir()
	certs, err := aggtest.Certs(aggDir)
	if err != nil {
		b.Fatal(err)
	}
	tokens, tokFile := filepath.Join(aggDir, "tokens"), filepath.Join(aggDir, "token")
	if err := os.WriteFile(tokens, []byte("footprint-token,"+testNode+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(tokFile, []byte("footprint-token"), 0o600); err != nil {
		b.Fatal(err)
	}
	reportPeriod := agent.DefaultConfig().Aggregator.ReportPeriod.Duration
	if v := os.Getenv("CGPILOT_FOOTPRINT_REPORT_PERIOD"); v != "" {
		if reportPeriod, err = time.ParseDuration(v); err != nil || reportPeriod < time.Second {
			b.Fatalf("CGPILOT_FOOTPRINT_REPORT_PERIOD=%q: want a duration of at least 1s", v)
		}
	}
	agg := aggtest.Start(b, aggregator.Config{Standalone: true, StaticTokens: tokens, CertFile: certs.CertFile, KeyFile: certs.KeyFile,
		Period: reportPeriod, Grace: 5 * time.Second, FoldInterval: time.Second})
	run := func(name string, rightsizing, reports bool) result {
		dir := b.TempDir()
		cfgFile := filepath.Join(dir, "config.yaml")
		yaml := fmt.Sprintf("cpus: %q\ncgroupParent: /%s\ncheckpointPath: %s\nkubeletCPUManagerState: \"\"\nrightsizing: {enabled: %v, stateDir: %s, sampleInterval: 10s}\n",
			bd.cfg.CPUs, bd.k.KubepodsName, filepath.Join(dir, "cpu_pools.checkpoint"), rightsizing, dir)
		if reports {
			yaml += fmt.Sprintf("aggregator: {url: %q, caFile: %s, tokenFile: %s, reportPeriod: %s}\n", agg.URL(), certs.CAFile, tokFile, reportPeriod)
		}
		if v := os.Getenv("CGPILOT_FOOTPRINT_SWEEP"); v != "" {
			yaml += fmt.Sprintf("sweepInterval: %s\n", v) // e.g. 10s, the default before the sweep became a safety net
		}
		if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
			b.Fatal(err)
		}
		health := freeAddr(b)
		a := &agentProc{t: b, bin: bin, log: filepath.Join(dir, "agent.log"), args: []string{
			"--config", cfgFile, "--kubeconfig", bd.cp.Kubeconfig(), "--node-name", testNode,
			"--health-addr", health, "--socket", filepath.Join(dir, "agent.sock"), "--path.procfs", procRoot,
		}}
		prof := os.Getenv("CGPILOT_FOOTPRINT_PROFILE")
		if prof != "" {
			a.args = append(a.args, "--profiling")
		}
		b.Cleanup(a.kill)
		a.start()
		a.waitReady(filepath.Join(dir, "agent.sock"))
		if rightsizing {
			deadline := time.Now().Add(2 * time.Minute)
			for metric(b, health, "cgpilot_collector_targets") < float64(n) {
				if time.Now().After(deadline) {
					b.Fatalf("%s: %v of %d containers sampled after 2m", name, metric(b, health, "cgpilot_collector_targets"), n)
				}
				time.Sleep(time.Second)
			}
		}
		time.Sleep(30 * time.Second) // past the start's listing, status writes and first rounds
		pid := a.cmd.Process.Pid
		c0, t0 := cpuSeconds(b, pid), time.Now()
		// The collector runs only with right-sizing on.
		roundSum := func() float64 {
			if !rightsizing {
				return 0
			}
			return metric(b, health, "cgpilot_collector_round_seconds_sum")
		}
		r0 := roundSum()
		w := window
		if reports {
			w = max(window, reportPeriod) // at least one report in the window
		}
		time.Sleep(w)
		c1, t1 := cpuSeconds(b, pid), time.Now()
		rounds := roundSum() - r0
		rss, peak := statusMiB(b, pid, "VmRSS"), statusMiB(b, pid, "VmHWM")
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: RssAnon %.1f MiB, RssFile %.1f MiB", name, statusMiB(b, pid, "RssAnon"), statusMiB(b, pid, "RssFile"))
		if prof != "" {
			base := filepath.Join(prof, strings.ReplaceAll(name, " ", "-"))
			saveURL(b, "http://"+health+"/debug/pprof/heap", base+".heap")
			saveURL(b, "http://"+health+"/debug/pprof/heap?debug=1", base+".heap.txt")
			saveURL(b, "http://"+health+"/debug/pprof/goroutine?debug=1", base+".goroutines.txt")
		}
		r := result{cpu: (c1 - c0) / t1.Sub(t0).Seconds(), rss: rss, peak: peak, collector: rounds / t1.Sub(t0).Seconds(), fds: float64(len(fds))}
		if reports {
			accepted := metric(b, health, `cgpilot_aggregator_reports_total{result="accepted"}`)
			failed := metric(b, health, `cgpilot_aggregator_reports_total{result="failed"}`)
			if accepted < 1 || metric(b, health, `cgpilot_aggregator_reports_total{result="rejected"}`) > 0 {
				b.Errorf("%s: %v reports accepted, %v failed attempts", name, accepted, failed)
			}
			b.Logf("%s: %v reports accepted, %v failed attempts", name, accepted, failed)
		}
		if rightsizing {
			r.targets = metric(b, health, "cgpilot_collector_targets")
			if e := metric(b, health, "cgpilot_collector_read_errors_total"); e > 0 {
				b.Errorf("%s: %v read errors: the containers' cgroups were not all read", name, e)
			}
			if rounds := metric(b, health, "cgpilot_collector_round_seconds_count"); rounds < 2 {
				b.Errorf("%s: %v collection rounds", name, rounds)
			}
		}
		a.kill()
		b.Logf("%s: %.3f %% of a core over %v (collection rounds %.3f %%), RSS %.1f MiB (peak %.1f MiB), %v containers sampled, %v descriptors open", name, 100*r.cpu, t1.Sub(t0).Round(time.Second), 100*r.collector, rss, peak, r.targets, r.fds)
		return r
	}
	b.ResetTimer()
	var base, on, rep result
	for i := 0; i < b.N; i++ {
		base = run("pools only", false, false)
		on = run("right-sizing", true, false)
		rep = run("right-sizing and reports", true, true)
	}
	b.StopTimer()
	b.ReportMetric(100*base.cpu, "pools-cpu-%")
	b.ReportMetric(100*on.cpu, "agent-cpu-%")
	b.ReportMetric(100*(on.cpu-base.cpu), "agent-minus-pools-cpu-%")
	b.ReportMetric(100*on.collector, "collector-cpu-%")
	b.ReportMetric(on.rss, "rss-MiB")
	b.ReportMetric(on.peak, "peak-rss-MiB")
	b.ReportMetric(on.rss/max(base.rss, 1), "rss/pools-rss")
	b.ReportMetric(base.fds, "pools-fds")
	b.ReportMetric(on.fds, "fds")
	b.ReportMetric(100*rep.cpu, "reporting-agent-cpu-%")
	b.ReportMetric(rep.rss, "reporting-rss-MiB")
	b.ReportMetric(rep.rss/max(on.rss, 1), "reporting-rss/rss")
	b.ReportMetric(rep.cpu/max(on.cpu, 1e-9), "reporting-cpu/cpu")
	if on.targets != float64(n) {
		b.Errorf("%v containers sampled, want %d", on.targets, n)
	}
}

func envInt(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// manyPods creates n running Burstable pods of one container on the test
// node, in the API (status included, as the kubelet reports it) and as
// cgroups.
func (b *bed) manyPods(t testing.TB, n int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			id := fmt.Sprintf("%064x", i+1)
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w%04d", i), Namespace: "default"},
				Spec: corev1.PodSpec{NodeName: testNode, Containers: []corev1.Container{{Name: "app", Image: "busybox",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}}},
			}
			created, err := b.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				errs <- err
				return
			}
			created.Status = corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBurstable,
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: "containerd://" + id, Ready: true,
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
			if _, err := b.cs.CoreV1().Pods("default").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				errs <- err
				return
			}
			b.k.SB.MkdirPod("cgroupfs", "Burstable", string(created.UID), id)
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// metric is the value of a series on the agent's /metrics: 0 for a
// labelled one not yet counted, a failure for a missing unlabelled one.
func metric(t testing.TB, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	if strings.Contains(name, "{") {
		return 0 // a labelled series exists once first counted
	}
	t.Fatalf("no %s in %s/metrics", name, addr)
	return 0
}

// saveURL writes what url answers to file.
func saveURL(t testing.TB, url, file string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, body, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s", file)
}

// cpuSeconds is the user+system CPU time of process pid, all threads.
func cpuSeconds(t testing.TB, pid int) float64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command (which may hold spaces) in parentheses.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	return (ut + st) / 100 // USER_HZ
}

// statusMiB is a kB field of /proc/pid/status in MiB.
func statusMiB(t testing.TB, pid int, field string) float64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb / 1024
		}
	}
	t.Fatalf("/proc/%d/status: no %s", pid, field)
	return 0
}
