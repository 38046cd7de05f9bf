//go:build linux

// Command aggload is the aggregator's scale test: it builds
// cgpilot-aggregator, starts it as a child process in standalone mode on
// 127.0.0.1 (static tokens; no API server), and has a synthetic fleet of
// nodes (test/aggtest.Fleet: real report.Builder, real report.Client over
// HTTPS, one connection per node like real agents) report every period
// for a bounded time. It measures what each POST takes at the client, the
// aggregator's own ingest histogram, its RSS (peak and last) and its CPU
// (cores used over the steady part of the run), and prints them.
//
//	go run ./test/cmd/aggload --nodes 5000 --pods 100 --duration 10m
//
// Bounds: loopback only, at most 20,000 nodes and 30 minutes; it stops the
// aggregator it started (by its PID) on the way out, also on Ctrl-C.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/test/aggtest"
)

func main() {
	nodes := flag.Int("nodes", 5000, "nodes (at most 20000)")
	pods := flag.Int("pods", 100, "pods per node")
	period := flag.Duration("period", time.Minute, "report period")
	duration := flag.Duration("duration", 10*time.Minute, "how long to report (at most 30m)")
	warmup := flag.Int("warmup", 1, "windows left out of the CPU figure (the first window creates every container's state)")
	spread := flag.Float64("spread", 1, "fraction of the period over which a window's reports are spread (agents' jitter); 0 sends them all at once")
	out := flag.String("out", "", "write the summary JSON here too")
	cpuprof := flag.String("cpuprofile", "", "save a 60 s CPU profile of the aggregator, taken during the last windows, here (runs it with --pprof)")
	heap := flag.String("heap", "", "save the aggregator's heap profile (after a GC) at the end here (runs it with --pprof)")
	extra := flag.String("aggregator-args", "", "more flags for the aggregator, space-separated (e.g. --idle-timeout=10s)")
	flag.Parse()
	if *nodes < 1 || *nodes > 20000 || *pods < 1 || *pods > 250 || *duration > 30*time.Minute || *duration < *period {
		fmt.Fprintln(os.Stderr, "aggload: want 1..20000 nodes, 1..250 pods, a duration of one period to 30m")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s, err := run(ctx, *nodes, *pods, *period, *duration, *warmup, *spread, *heap, *cpuprof, strings.Fields(*extra))
	if err != nil {
		fmt.Fprintln(os.Stderr, "aggload:", err)
		os.Exit(1)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		fmt.Fprintf(os.Stderr, "aggload: %v: %+v\n", err, *s)
		os.Exit(1)
	}
	fmt.Println(string(b))
	if *out != "" {
		_ = os.WriteFile(*out, b, 0o644)
	}
}

// Summary is what a run measured.
type Summary struct {
	Nodes, PodsPerNode, Workloads, Containers int
	Period, Duration                          string
	Reports, Failures                         int
	ReportBytesMean                           int
	ClientP50ms, ClientP99ms, ClientMaxms     float64
	ServerP50ms, ServerP99ms                  float64 // from the aggregator's histogram (bucket upper bounds)
	ProcessP50ms, ProcessP99ms                float64 // the same once the body has arrived
	RSSPeakMiB, RSSLastMiB                    float64
	CPUCores                                  float64 // aggregator, steady state
	GeneratorCPUCores                         float64
	MachineCPUs                               int
	LoadAverage                               string
	FailureReasons                            map[string]int
}

func fetch(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

func run(ctx context.Context, nodes, pods int, period, duration time.Duration, warmup int, spread float64, heap, cpuprof string, extra []string) (*Summary, error) {
	dir, err := os.MkdirTemp("", "cgpilot-aggload-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "cgpilot-aggregator")
	fmt.Fprintln(os.Stderr, "aggload: building cgpilot-aggregator")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/cgpilot/cgpilot/cmd/cgpilot-aggregator").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build: %v\n%s", err, out)
	}
	certs, err := aggtest.Certs(dir)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "aggload: building a fleet of %d nodes × %d pods\n", nodes, pods)
	fleet := aggtest.NewFleet(aggtest.FleetConfig{Nodes: nodes, PodsPerNode: pods, Seed: 1, Period: period, Start: time.Now().Add(-time.Hour)})
	wl, cs := fleet.Workloads()
	var tokens strings.Builder
	for i := range nodes {
		fmt.Fprintf(&tokens, "t%d,%s\n", i, fleet.NodeName(i))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("tok-%d", i)), []byte(fmt.Sprintf("t%d", i)), 0o600); err != nil {
			return nil, err
		}
	}
	tokFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokFile, []byte(tokens.String()), 0o600); err != nil {
		return nil, err
	}
	secure, plain, err := freePorts()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--standalone", "--insecure-static-tokens="+tokFile,
		"--secure-addr=127.0.0.1:"+strconv.Itoa(secure), "--http-addr=127.0.0.1:"+strconv.Itoa(plain),
		"--tls-cert-file="+certs.CertFile, "--tls-private-key-file="+certs.KeyFile, "--report-period="+period.String(), "--identity=aggload")
	if heap != "" || cpuprof != "" {
		cmd.Args = append(cmd.Args, "--pprof")
	}
	cmd.Args = append(cmd.Args, extra...)
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=750MiB")
	logf, _ := os.Create(filepath.Join(dir, "aggregator.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	httpURL := "http://127.0.0.1:" + strconv.Itoa(plain)
	if err := waitReady(ctx, httpURL+"/readyz"); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certs.CAPEM)
	url := "https://127.0.0.1:" + strconv.Itoa(secure)
	clients := make([]*report.Client, nodes)
	for i := range nodes {
		// One connection per node, as each agent has its own.
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConns: 1, IdleConnTimeout: 3 * time.Minute}
		c, err := report.NewClient(report.ClientConfig{URL: url, TokenFile: filepath.Join(dir, fmt.Sprintf("tok-%d", i)), Transport: tr,
			AgentID: fleet.Agent(i).ID, Started: fleet.Agent(i).Started})
		if err != nil {
			return nil, err
		}
		clients[i] = c
	}

	// The run: each window's reports leave at the window's end plus each
	// node's fixed jitter, like agents.
	first := time.Now().Truncate(period).Add(period)
	windows := int(duration / period)
	var mu sync.Mutex
	var lat []time.Duration
	var bytesSum, failures int
	reasons := map[string]int{}
	var rss []float64
	sem := make(chan struct{}, 256) // reports in flight at once
	var wg sync.WaitGroup
	genStart := cpuSelf()
	var cpuMark, cpuEnd procCPU
	var markAt, endAt time.Time
	sampler := time.NewTicker(2 * time.Second)
	defer sampler.Stop()
	go func() {
		for range sampler.C {
			if v, err := rssMiB(pid); err == nil {
				mu.Lock()
				rss = append(rss, v)
				mu.Unlock()
			}
		}
	}()
	for w := 0; w < windows && ctx.Err() == nil; w++ {
		end := first.Add(time.Duration(w) * period)
		if w == warmup {
			cpuMark, _ = cpuOf(pid)
			markAt = time.Now()
		}
		if cpuprof != "" && w == windows-2 {
			go func() {
				if err := fetch(httpURL+"/debug/pprof/profile?seconds=60", cpuprof); err != nil {
					fmt.Fprintln(os.Stderr, "aggload: CPU profile:", err)
				}
			}()
		}
		for i := range nodes {
			at := end.Add(time.Duration(spread * float64(period) * float64(i) / float64(nodes)))
			if d := time.Until(at); d > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
			}
			if ctx.Err() != nil {
				break
			}
			sem <- struct{}{}
			wg.Add(1)
			go func(i int) {
				defer func() { <-sem; wg.Done() }()
				r := fleet.Report(i, end)
				body, _ := report.Encode(r, false)
				c := clients[i]
				_ = c.Enqueue(r)
				t0 := time.Now()
				err := c.Flush(ctx)
				d := time.Since(t0)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failures++
					msg := err.Error()
					if i := strings.LastIndex(msg, ": "); i >= 0 && len(msg)-i < 80 {
						msg = msg[i+2:]
					}
					reasons[msg]++
					return
				}
				lat = append(lat, d)
				bytesSum += len(body)
			}(i)
		}
		fmt.Fprintf(os.Stderr, "aggload: window %d/%d sent (%d reports so far, %d failures)\n", w+1, windows, len(lat), failures)
	}
	wg.Wait()
	cpuEnd, _ = cpuOf(pid)
	endAt = time.Now()
	genCPU := cpuSelf() - genStart

	s := &Summary{Nodes: nodes, PodsPerNode: pods, Workloads: wl, Containers: cs, Period: period.String(), Duration: duration.String(),
		Reports: len(lat), Failures: failures, MachineCPUs: numCPU(), LoadAverage: loadavg()}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		s.ClientP50ms, s.ClientP99ms, s.ClientMaxms = ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]), ms(lat[len(lat)-1])
		s.ReportBytesMean = bytesSum / len(lat)
	}
	for _, v := range rss {
		s.RSSPeakMiB = max(s.RSSPeakMiB, v)
	}
	if len(rss) > 0 {
		s.RSSLastMiB = rss[len(rss)-1]
	}
	if hwm, err := hwmMiB(pid); err == nil {
		s.RSSPeakMiB = max(s.RSSPeakMiB, hwm)
	}
	if !markAt.IsZero() && cpuEnd >= cpuMark {
		s.CPUCores = float64(cpuEnd-cpuMark) / clockTicks / endAt.Sub(markAt).Seconds()
	}
	s.GeneratorCPUCores = genCPU.Seconds() / endAt.Sub(first).Seconds()
	s.ServerP50ms, s.ServerP99ms = serverQuantiles(httpURL+"/metrics", "cgpilot_aggregator_ingest_seconds")
	s.ProcessP50ms, s.ProcessP99ms = serverQuantiles(httpURL+"/metrics", "cgpilot_aggregator_ingest_process_seconds")
	s.FailureReasons = reasons
	if heap != "" {
		if err := fetch(httpURL+"/debug/pprof/heap?gc=1", heap); err != nil {
			fmt.Fprintln(os.Stderr, "aggload: heap profile:", err)
		}
	}
	return s, nil
}

func freePorts() (int, int, error) {
	var ports []int
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, 0, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports[0], ports[1], nil
}

func waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("aggregator not ready at %s", url)
}

// clockTicks is USER_HZ, 100 on Linux.
const clockTicks = 100

type procCPU uint64

// cpuOf returns utime+stime of pid in clock ticks (/proc/PID/stat).
func cpuOf(pid int) (procCPU, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return procCPU(u + s), nil
}

func cpuSelf() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func statusMiB(pid int, key string) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), key+":") {
			kb, _ := strconv.ParseFloat(strings.Fields(sc.Text())[1], 64)
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("%s not in /proc/%d/status", key, pid)
}

func rssMiB(pid int) (float64, error) { return statusMiB(pid, "VmRSS") }
func hwmMiB(pid int) (float64, error) { return statusMiB(pid, "VmHWM") }

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// serverQuantiles reads the aggregator's ingest histogram and returns the
// upper bounds of the buckets holding the median and the 99th percentile.
func serverQuantiles(url, metric string) (p50, p99 float64) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	type bucket struct{ le, n float64 }
	var bs []bucket
	total := 0.0
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, metric+"_bucket{") {
			continue
		}
		le := l[strings.Index(l, `le="`)+4:]
		le = le[:strings.IndexByte(le, '"')]
		v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		f, err := strconv.ParseFloat(le, 64)
		if err != nil || math.IsInf(f, 0) {
			total = v // +Inf: every observation
			continue
		}
		bs = append(bs, bucket{f, v})
	}
	if len(bs) == 0 {
		return 0, 0
	}
	q := func(p float64) float64 {
		for _, x := range bs {
			if x.n >= p*total {
				return x.le * 1000
			}
		}
		return math.MaxFloat64 // above the last bound: reported as such
	}
	clamp := func(v float64) float64 {
		if v == math.MaxFloat64 {
			return -1
		}
		return v
	}
	return clamp(q(0.5)), clamp(q(0.99))
}
