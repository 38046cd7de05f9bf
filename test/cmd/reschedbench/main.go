//go:build linux

package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cgpilot/cgpilot/aggregator/reschedule"
	"github.com/cgpilot/cgpilot/test/aggtest"
	"github.com/cgpilot/cgpilot/test/deploy"
	"github.com/cgpilot/cgpilot/test/descheduler"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/simcluster"
	"github.com/cgpilot/cgpilot/test/tier"
)

type options struct {
	nodes, workloads, replicas int
	hotShare, idle, peakMean   float64
	watermark, hotWatermark    float64
	period, interval           time.Duration
	timeout                    time.Duration
	perNode, perWorkload       int
	perHour, perCycle          int
	seed                       uint64
	out                        string
}

const (
	nodeCores = 8
	nodeMem   = 32 << 30
	baseCPU   = 0.2
	baseMem   = 2 << 30
	podMem    = 512 << 20
	// The test bed's API server issues tokens for its issuer.
	audience = "https://kubernetes.default.svc.cluster.local"
)

// Summary is what a run measured.
type Summary struct {
	Nodes, Workloads, Pods, NodeCores int
	Period, DeschedulingInterval      string
	Watermark, HotWatermark           float64
	Caps                              string
	// Breaking*: nodes whose pods' 7-day peaks break the placement rule;
	// Hot*: nodes whose real use is above the hot watermark; HotShare*:
	// the nodes either (what the rescheduler acts on) over all nodes.
	BreakingBefore, BreakingAfter int
	HotBefore, HotAfter           int
	HotShareBefore, HotShareAfter float64
	// MaxRatio*: the highest placement ratio (peaks over watermark).
	MaxRatioBefore, MaxRatioAfter float64
	// Moves by outcome over the run (the aggregator's records).
	Asked, Moved, Failed, Unresolved, Refused, Pending int
	RefusedBy, FailedBy                                map[string]int
	QueuedAtEnd                                        int
	// ConvergeSeconds: from the descheduler's start to the last admitted
	// move, finished move or change of the breaking/hot nodes; Converged:
	// nothing pending and quiet since, for a queue pass and two cycles
	// (nodes a cap holds stay queued: QueuedAtEnd, RefusedBy).
	ConvergeSeconds float64
	Converged       bool
	// Cost. Aggregator*: CPU seconds and cores while rescheduling, cores
	// while only taking reports (the baseline, before the descheduler),
	// peak RSS. Descheduler*: its CPU seconds and peak RSS over the run.
	AggregatorCPUSeconds, AggregatorCores float64
	AggregatorBaselineCores               float64
	AggregatorCostRatio                   float64
	AggregatorRSSPeakMiB                  float64
	DeschedulerCPUSeconds                 float64
	DeschedulerCores                      float64
	DeschedulerRSSPeakMiB                 float64
	DeschedulerEvictions                  int
	QueryP99ms, FilterP99ms               float64
	SetupSeconds                          float64
	LeaseRenewals, LeaseErrors            uint64
	NotReadyNodesAtEnd                    int
	MachineCPUs                           int
	LoadAverage                           string
	Timeline                              []Point
}

// Point is one sample of the run.
type Point struct {
	Seconds  float64 `json:"s"`
	Breaking int     `json:"breaking"`
	Hot      int     `json:"hot"`
	Queued   int     `json:"queued"`
	Moved    int     `json:"moved"`
	Pending  int     `json:"pending"`
	Refused  int     `json:"refused"`
}

func main() {
	var o options
	flag.IntVar(&o.nodes, "nodes", 500, "simulated nodes (10 to 2000)")
	flag.IntVar(&o.workloads, "workloads", 150, "Deployments")
	flag.IntVar(&o.replicas, "replicas", 10, "pods per Deployment")
	flag.Float64Var(&o.hotShare, "hot-share", 0.15, "share of the nodes every pod is first placed on")
	flag.Float64Var(&o.idle, "idle", 0.6, "pods' use now as a share of their 7-day peak")
	flag.Float64Var(&o.peakMean, "peak-mean", 0.5, "mean 7-day peak per pod (cores; log-normal, sigma 0.6, at most 3)")
	flag.Float64Var(&o.watermark, "watermark", 0.8, "the placement rule's watermark (CPU and memory)")
	flag.Float64Var(&o.hotWatermark, "hot-watermark", 0.8, "real use over allocatable above which a node is hot")
	flag.DurationVar(&o.period, "period", 10*time.Second, "report period")
	flag.DurationVar(&o.interval, "interval", 10*time.Second, "descheduling interval")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up converging after this long (at most 40m)")
	flag.IntVar(&o.perNode, "max-per-node", 20, "cap: moves from one node per hour")
	flag.IntVar(&o.perWorkload, "max-per-workload", 50, "cap: moves of one workload per hour")
	flag.IntVar(&o.perHour, "max-per-hour", 5000, "cap: moves per hour")
	flag.IntVar(&o.perCycle, "max-per-cycle", 100, "the descheduler's maxNoOfPodsToEvictTotal per cycle")
	flag.Uint64Var(&o.seed, "seed", 1, "random seed")
	flag.StringVar(&o.out, "out", "", "write the summary JSON here too")
	flag.Parse()
	if o.nodes < 10 || o.nodes > 2000 || o.timeout > 40*time.Minute || o.hotShare <= 0 || o.hotShare >= 1 || o.workloads < 1 || o.replicas < 1 {
		fmt.Fprintln(os.Stderr, "reschedbench: want 10..2000 nodes, a hot share in (0, 1), workloads and replicas, a timeout of at most 40m")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reschedbench:", err)
		os.Exit(1)
	}
	b, _ := json.MarshalIndent(s, "", "  ")
	fmt.Println(string(b))
	if o.out != "" {
		if err := os.WriteFile(o.out, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "reschedbench:", err)
			os.Exit(1)
		}
	}
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "reschedbench %s: "+format+"\n", append([]any{time.Now().Format(time.TimeOnly)}, a...)...)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func binaries(ctx context.Context, root string) (k8s, desched string, err error) {
	k8s, desched = os.Getenv("CGPILOT_K8S_BINS"), os.Getenv("CGPILOT_DESCHEDULER")
	for _, x := range []struct {
		v      *string
		script string
	}{{&k8s, "test/k8sbins/build.sh"}, {&desched, "test/deschedbin/build.sh"}} {
		if *x.v != "" {
			continue
		}
		cmd := exec.CommandContext(ctx, filepath.Join(root, x.script))
		cmd.Stderr = os.Stderr
		b, err := cmd.Output()
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", x.script, err)
		}
		*x.v = strings.TrimSpace(string(b))
	}
	return k8s, desched, nil
}

// clientWith is a clientset of cfg with its own rate limit.
func clientWith(cfg *rest.Config, qps float32, burst int) (*kubernetes.Clientset, error) {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = qps, burst
	return kubernetes.NewForConfig(c)
}

func run(ctx context.Context, o options) (*Summary, error) {
	t0 := time.Now()
	if os.Geteuid() != 0 {
		return nil, descheduler.ErrNotRoot
	}
	root, err := tier.RepoRoot()
	if err != nil {
		return nil, err
	}
	bins, deschedBin, err := binaries(ctx, root)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "cgpilot-reschedbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	aggBin := filepath.Join(dir, "cgpilot-aggregator")
	logf("building cgpilot-aggregator")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", aggBin, "github.com/cgpilot/cgpilot/cmd/cgpilot-aggregator").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build: %v\n%s", err, out)
	}
	certs, err := aggtest.Certs(dir)
	if err != nil {
		return nil, err
	}
	// The API server presents a client certificate to the eviction
	// webhook, the scheduler to the extender: the only callers those answer.
	callers, err := aggtest.ClientCerts(dir, "kube-apiserver", "system:kube-scheduler")
	if err != nil {
		return nil, err
	}
	admission, err := aggtest.WebhookAuth(dir, callers.Certs["kube-apiserver"])
	if err != nil {
		return nil, err
	}
	nodes := make([]string, o.nodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("sim-%04d", i)
	}
	tokens, err := simcluster.Tokens(dir, nodes)
	if err != nil {
		return nil, err
	}
	// With static tokens (the simulated agents') the aggregator takes its
	// users from the same file: the bench's reader of the cluster views
	// and /metrics. The descheduler's token is still reviewed by the API
	// server (TokenReview and SubjectAccessReview).
	if err := appendLine(tokens, readerToken+",@reschedbench,*"); err != nil {
		return nil, err
	}
	securePort, err := freePort()
	if err != nil {
		return nil, err
	}
	httpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	aggSecure, aggHTTP := "127.0.0.1:"+strconv.Itoa(securePort), "http://127.0.0.1:"+strconv.Itoa(httpPort)
	sched := callers.Certs["system:kube-scheduler"]
	schedCfg := fmt.Sprintf("extenders:\n  - urlPrefix: \"https://%s/scheduler\"\n    filterVerb: filter\n    prioritizeVerb: prioritize\n    weight: 5\n"+
		"    enableHTTPS: true\n    tlsConfig:\n      caData: %s\n      certFile: %s\n      keyFile: %s\n    nodeCacheCapable: true\n    ignorable: true\n",
		aggSecure, base64.StdEncoding.EncodeToString(certs.CAPEM), sched.CertFile, sched.KeyFile)
	logf("starting the control plane")
	cp, err := harness.StartControlPlane(ctx, harness.Options{BinDir: bins, Controllers: true, SchedulerConfig: schedCfg,
		ExtraFlags: map[string][]string{
			"kube-apiserver": {admission, "--max-requests-inflight=1000", "--max-mutating-requests-inflight=500"},
			"kube-controller-manager": {"--node-monitor-grace-period=" + nodeGrace.String(),
				"--kube-api-qps=100", "--kube-api-burst=200"},
		}})
	if err != nil {
		return nil, err
	}
	defer cp.Stop()
	cs := cp.Client
	for _, ns := range []string{"cgpilot-system", "bench"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	if err := applyCRDs(ctx, cp, root); err != nil {
		return nil, err
	}
	policy, err := descheduler.Install(ctx, cp.Config, root, descheduler.Endpoints{WebhookURL: "https://" + aggSecure + reschedule.PathEvictions,
		CABundle: certs.CAPEM, QueryURL: aggHTTP + "/prometheus"})
	if err != nil {
		return nil, err
	}
	const evictTotal = "maxNoOfPodsToEvictTotal: 10"
	if !strings.Contains(string(policy), evictTotal) {
		return nil, fmt.Errorf("the component's policy has no %q to raise:\n%s", evictTotal, policy)
	}
	policy = []byte(strings.Replace(string(policy), evictTotal, "maxNoOfPodsToEvictTotal: "+strconv.Itoa(o.perCycle), 1))
	api := &aggAPI{base: aggHTTP, token: readerToken}

	// The aggregator, as a child process, as the component runs it but
	// with a short report grid and passes.
	wm := strconv.FormatFloat(o.watermark, 'f', -1, 64)
	agg := exec.Command(aggBin, "--kubeconfig="+cp.Kubeconfig(), "--namespace=cgpilot-system", "--identity=bench",
		"--secure-addr="+aggSecure, "--http-addr=127.0.0.1:"+strconv.Itoa(httpPort), "--tls-cert-file="+certs.CertFile,
		"--tls-private-key-file="+certs.KeyFile, "--insecure-static-tokens="+tokens, "--report-period="+o.period.String(),
		"--webhook-client-ca-file="+callers.CAFile, "--extender-client-ca-file="+callers.CAFile,
		"--descheduler-token-audiences="+audience,
		"--placement-watermark-cpu="+wm, "--placement-watermark-memory="+wm, "--hot-watermark="+strconv.FormatFloat(o.hotWatermark, 'f', -1, 64),
		"--profile-interval="+o.period.String(), "--reschedule=true", "--reschedule-queue-interval="+(3*o.period).String(),
		"--reschedule-check-interval="+o.period.String(), fmt.Sprintf("--reschedule-max-per-node=%d", o.perNode),
		fmt.Sprintf("--reschedule-max-per-workload=%d", o.perWorkload), fmt.Sprintf("--reschedule-max-per-hour=%d", o.perHour),
		"--annotate-interval=1h")
	aggLog, err := os.Create(filepath.Join(dir, "aggregator.log"))
	if err != nil {
		return nil, err
	}
	defer aggLog.Close()
	agg.Stdout, agg.Stderr = aggLog, aggLog
	agg.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := agg.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = agg.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = agg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = agg.Process.Kill()
			<-done
		}
	}()
	if err := waitFor(ctx, 2*time.Minute, func() bool { return api.ok("/readyz") }); err != nil {
		return nil, fmt.Errorf("the aggregator: %w\n%s", err, tail(aggLog.Name(), 20))
	}

	logf("registering %d nodes", o.nodes)
	if err := createNodes(ctx, cp, nodes, strconv.Itoa(nodeCores), fmt.Sprintf("%dGi", nodeMem>>30)); err != nil {
		return nil, err
	}
	leaseCS, err := clientWith(cp.Config, 20, 40)
	if err != nil {
		return nil, err
	}
	lk, err := keepLeases(ctx, leaseCS, nodes, leasePeriod)
	if err != nil {
		return nil, err
	}
	hot := max(1, int(math.Round(o.hotShare*float64(o.nodes))))
	if err := cordon(ctx, cs, nodes[hot:], true); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 2*time.Minute, func() bool {
		_, err := cs.CoreV1().ServiceAccounts("bench").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}); err != nil {
		return nil, fmt.Errorf("the default ServiceAccount of bench: %w", err)
	}
	// Workloads: log-normal peaks per pod (mean peakMean), every pod
	// first on the hot nodes.
	rng := rand.New(rand.NewPCG(o.seed, 0xbe7c4))
	const sigma = 0.6
	mu := math.Log(o.peakMean) - sigma*sigma/2
	peaks := map[string]float64{}
	for w := range o.workloads {
		name := fmt.Sprintf("svc-%03d", w)
		peaks[name] = math.Min(3, math.Exp(mu+sigma*rng.NormFloat64()))
		if err := createDeployment(ctx, cs, name, int32(o.replicas)); err != nil {
			return nil, err
		}
	}
	peakUse := func(p *corev1.Pod, _ time.Time) (float64, float64) { return peaks[p.Labels["app"]], podMem }
	nowUse := func(p *corev1.Pod, _ time.Time) (float64, float64) { return o.idle * peaks[p.Labels["app"]], podMem }
	simCS, err := clientWith(cp.Config, 100, 200)
	if err != nil {
		return nil, err
	}
	sim, err := simcluster.Start(ctx, simcluster.Config{Client: simCS, Nodes: nodes, NodeCPU: nodeCores, NodeMemory: nodeMem, BaseCPU: baseCPU,
		BaseMemory: baseMem, Usage: nowUse, Period: o.period, URL: "https://" + aggSecure, CAFile: certs.CAFile, TokenDir: dir, Workers: 64})
	if err != nil {
		return nil, err
	}
	total := o.workloads * o.replicas
	logf("waiting for %d pods to be placed and Ready on %d nodes", total, hot)
	last := -1
	if err := waitFor(ctx, 15*time.Minute, func() bool {
		n := running(sim)
		if n/100 != last/100 {
			logf("pods: %d of %d Running", n, total)
		}
		last = n
		return n == total
	}); err != nil {
		return nil, fmt.Errorf("pods: %w", err)
	}
	if err := cordon(ctx, cs, nodes[hot:], false); err != nil {
		return nil, err
	}
	// Yesterday the pods peaked; from now on every window reports them idle.
	if err := sim.SendWindow(ctx, time.Now().Truncate(o.period).Add(-24*time.Hour), peakUse); err != nil {
		return nil, err
	}
	runCtx, stopReports := context.WithCancel(ctx)
	defer stopReports()
	go sim.Run(runCtx, func(end time.Time, err error) {
		if err != nil {
			logf("reports of %s: %v", end.Format(time.TimeOnly), err)
		}
	})
	truth := func() nodeState { return measure(sim, nodes, peaks, o) }

	tries := 0
	// Before: once the aggregator has every node's load (two load passes
	// after a window reported by all).
	if err := waitFor(ctx, 5*time.Minute, func() bool {
		var s struct {
			Nodes int `json:"nodes"`
			Stale int `json:"staleNodes"`
		}
		err := api.get("/api/v1/summary", &s)
		if tries++; tries%15 == 0 {
			logf("the aggregator knows %d nodes (%d stale) %v", s.Nodes, s.Stale, err)
		}
		return err == nil && s.Nodes >= o.nodes && s.Stale == 0
	}); err != nil {
		return nil, fmt.Errorf("the nodes' reports: %w", err)
	}
	time.Sleep(2 * o.period)
	before := truth()
	setup := time.Since(t0)
	logf("before: %d of %d nodes break the rule, %d hot (max ratio %.2f); set up in %v", before.breaking, o.nodes, before.hot, before.maxRatio, setup.Round(time.Second))
	// Baseline: the aggregator taking reports only, four windows.
	base0, err := aggtest.ProcCPU(agg.Process.Pid)
	if err != nil {
		return nil, err
	}
	baseT := time.Now()
	time.Sleep(4 * o.period)
	base1, _ := aggtest.ProcCPU(agg.Process.Pid)
	baseline := (base1 - base0).Seconds() / time.Since(baseT).Seconds()

	token, err := descheduler.Token(ctx, cs)
	if err != nil {
		return nil, err
	}
	ca, err := descheduler.CA(cp.Config)
	if err != nil {
		return nil, err
	}
	ddir := filepath.Join(dir, "descheduler")
	if err := os.MkdirAll(ddir, 0o700); err != nil {
		return nil, err
	}
	a0, _ := aggtest.ProcCPU(agg.Process.Pid)
	start := time.Now()
	dp, err := descheduler.Start(ctx, descheduler.Options{Bin: deschedBin, Dir: ddir, Server: cp.Config.Host, CA: ca, Token: token,
		Policy: policy, Interval: o.interval, Args: []string{"--v=2"}})
	if err != nil {
		return nil, err
	}
	defer dp.Stop()
	var (
		timeline   []Point
		st         status
		lastChange = start
		prev       Point
		converged  bool
	)
	// Quiet for a queue pass and two descheduling cycles: nothing left.
	quiet := 3*o.period + 2*o.interval
	for time.Since(start) < o.timeout && ctx.Err() == nil {
		time.Sleep(o.interval)
		if ok, err := dp.Exited(); ok {
			return nil, fmt.Errorf("the descheduler exited: %v\n%s", err, dp.Tail(30))
		}
		if err := api.get(reschedule.PathStatus+"?limit=1", &st); err != nil {
			logf("status: %v", err)
			continue
		}
		now := truth()
		r := st.Last24h
		pt := Point{Seconds: math.Round(time.Since(start).Seconds()), Breaking: now.breaking, Hot: now.hot, Queued: len(st.Queue),
			Moved: r.Moved, Pending: r.Pending, Refused: r.Denied}
		timeline = append(timeline, pt)
		logf("%4.0fs: %d nodes break the rule, %d hot; %d queued; %d moved, %d pending, %d failed, %d refused %v", pt.Seconds, pt.Breaking, pt.Hot,
			pt.Queued, r.Moved, r.Pending, r.Failed, r.Denied, r.Denials)
		// A cap's refusals go on while a node stays queued: not a change.
		if pt.Breaking != prev.Breaking || pt.Hot != prev.Hot || pt.Moved != prev.Moved || pt.Pending != prev.Pending || r.Asked-r.Denied != st.admitted {
			lastChange = time.Now()
		}
		prev, st.admitted = pt, r.Asked-r.Denied
		if pt.Pending == 0 && time.Since(lastChange) >= quiet {
			converged = true
			break
		}
	}
	a1, _ := aggtest.ProcCPU(agg.Process.Pid)
	span := time.Since(start).Seconds()
	dcpu, _ := dp.CPU()
	_, dpeak, _ := dp.RSS()
	_, apeak, _ := aggtest.ProcRSS(agg.Process.Pid)
	after := truth()
	_ = api.get(reschedule.PathStatus+"?limit=1", &st)
	metrics := api.text("/metrics")
	nr, _ := notReady(ctx, cs)
	r := st.Last24h
	s := &Summary{Nodes: o.nodes, Workloads: o.workloads, Pods: total, NodeCores: nodeCores, Period: o.period.String(), DeschedulingInterval: o.interval.String(),
		Watermark: o.watermark, HotWatermark: o.hotWatermark,
		Caps:           fmt.Sprintf("%d/node, %d/workload, %d per hour; %d per descheduling cycle", o.perNode, o.perWorkload, o.perHour, o.perCycle),
		BreakingBefore: before.breaking, BreakingAfter: after.breaking, HotBefore: before.hot, HotAfter: after.hot,
		HotShareBefore: float64(before.either) / float64(o.nodes), HotShareAfter: float64(after.either) / float64(o.nodes),
		MaxRatioBefore: round2(before.maxRatio), MaxRatioAfter: round2(after.maxRatio),
		Asked: r.Asked, Moved: r.Moved, Failed: r.Failed, Unresolved: r.Unresolved, Refused: r.Denied, Pending: r.Pending,
		RefusedBy: r.Denials, FailedBy: r.Failures, QueuedAtEnd: len(st.Queue),
		ConvergeSeconds: math.Round(lastChange.Sub(start).Seconds()), Converged: converged,
		AggregatorCPUSeconds: round2((a1 - a0).Seconds()), AggregatorCores: round3((a1 - a0).Seconds() / span), AggregatorBaselineCores: round3(baseline),
		AggregatorRSSPeakMiB: math.Round(float64(apeak) / (1 << 20)), DeschedulerCPUSeconds: round2(dcpu.Seconds()), DeschedulerCores: round3(dcpu.Seconds() / span),
		DeschedulerRSSPeakMiB: math.Round(float64(dpeak) / (1 << 20)), DeschedulerEvictions: strings.Count(readFile(dp.Log), `"Evicted pod" `),
		QueryP99ms: histP99(metrics, "cgpilot_aggregator_reschedule_query_seconds"), FilterP99ms: histP99(metrics, "cgpilot_aggregator_filter_seconds"),
		SetupSeconds: math.Round(setup.Seconds()), LeaseRenewals: lk.renews.Load(), LeaseErrors: lk.errs.Load(), NotReadyNodesAtEnd: nr,
		MachineCPUs: machineCPUs(), LoadAverage: loadavg(), Timeline: timeline}
	if baseline > 0 {
		s.AggregatorCostRatio = round2(s.AggregatorCores / baseline)
	}
	if !converged {
		logf("not converged within %v; descheduler log tail:\n%s", o.timeout, dp.Tail(20))
	}
	stopReports()
	return s, nil
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func running(sim *simcluster.Cluster) int {
	n := 0
	for _, p := range sim.Pods() {
		if p.Namespace == "bench" && p.Spec.NodeName != "" && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}

// nodeState is the cluster as the simulation makes it: what the
// aggregator is told, counted the aggregator's way (profile.Rule).
type nodeState struct {
	breaking, hot, either int
	maxRatio              float64
}

// measure counts the nodes whose pods' 7-day peaks break the rule and
// those whose real use (the node's base and its pods' idle use) is above
// the hot watermark, from where the pods run now.
func measure(sim *simcluster.Cluster, nodes []string, peaks map[string]float64, o options) nodeState {
	var out nodeState
	for _, n := range nodes {
		var peakCPU, peakMem float64
		for _, p := range sim.PodsOn(n) {
			peakCPU += peaks[p.Labels["app"]]
			peakMem += podMem
		}
		ratio := math.Max(peakCPU/(o.watermark*nodeCores), peakMem/(o.watermark*nodeMem))
		useCPU, useMem := baseCPU+o.idle*peakCPU, baseMem+peakMem
		isHot := useCPU > o.hotWatermark*nodeCores || useMem > o.hotWatermark*nodeMem
		out.maxRatio = math.Max(out.maxRatio, ratio)
		if ratio > 1 {
			out.breaking++
		}
		if isHot {
			out.hot++
		}
		if ratio > 1 || isHot {
			out.either++
		}
	}
	return out
}

type status struct {
	Queue   []reschedule.Entry `json:"queue"`
	Last24h reschedule.Report  `json:"last24h"`
	// admitted is Asked less Denied at the last look.
	admitted int
}

// aggAPI reads the aggregator's HTTP port with a token allowed its
// cluster views and /metrics.
type aggAPI struct{ base, token string }

const readerToken = "reschedbench-reader"

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (a *aggAPI) do(path string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, a.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	c := &http.Client{Timeout: 30 * time.Second}
	return c.Do(req)
}

func (a *aggAPI) ok(path string) bool {
	resp, err := a.do(path)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

func (a *aggAPI) get(path string, v any) error {
	resp, err := a.do(path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s %s", path, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func (a *aggAPI) text(path string) string {
	resp, err := a.do(path)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return string(b)
}

func waitFor(ctx context.Context, timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return nil
}

func cordon(ctx context.Context, cs kubernetes.Interface, names []string, on bool) error {
	patch := []byte(fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on))
	for _, n := range names {
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	return nil
}

func createDeployment(ctx context.Context, cs kubernetes.Interface, name string, replicas int32) error {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench"}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64), AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "c", Image: "docker.io/local/busybox:1", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}}}}}}}
	_, err := cs.AppsV1().Deployments("bench").Create(ctx, d, metav1.CreateOptions{})
	return err
}

func applyCRDs(ctx context.Context, cp *harness.ControlPlane, root string) error {
	files, err := filepath.Glob(filepath.Join(root, "deploy", "crds", "cgpilot.io_*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs under %s/deploy/crds (%v)", root, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		objs, err := deploy.Decode(b)
		if err != nil {
			return err
		}
		if err := deploy.Apply(ctx, cp.Config, objs, deploy.ApplyOptions{FieldManager: "cgpilot-bench"}); err != nil {
			return err
		}
	}
	return nil
}

// histP99 reads a Prometheus histogram from an exposition and returns the
// upper bound (ms) of the bucket holding its 99th percentile (0 without
// samples, -1 above the last bound).
func histP99(text, metric string) float64 {
	byLE := map[float64]float64{} // summed over the series' labels
	var total float64
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, metric+"_bucket{") {
			continue
		}
		i := strings.Index(l, `le="`)
		if i < 0 {
			continue
		}
		le := l[i+4:]
		le = le[:strings.IndexByte(le, '"')]
		v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		f, err := strconv.ParseFloat(le, 64)
		if err != nil || math.IsInf(f, 0) {
			total += v
			continue
		}
		byLE[f] += v
	}
	if total == 0 {
		return 0
	}
	les := make([]float64, 0, len(byLE))
	for le := range byLE {
		les = append(les, le)
	}
	sort.Float64s(les)
	for _, le := range les {
		if byLE[le] >= 0.99*total {
			return le * 1000
		}
	}
	return -1
}

func readFile(p string) string { b, _ := os.ReadFile(p); return string(b) }

func tail(p string, n int) string {
	lines := strings.Split(strings.TrimRight(readFile(p), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func machineCPUs() int {
	return strings.Count(readFile("/proc/cpuinfo"), "processor\t:")
}

func loadavg() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
