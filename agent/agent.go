//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/agent/kube"
	"github.com/cgpilot/cgpilot/agent/pools"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/internal/cpulist"
	"github.com/cgpilot/cgpilot/internal/loop"
	"github.com/cgpilot/cgpilot/topology"
)

// Agent is one node's cgpilot agent.
type Agent struct{ c *controller }

// Run runs the agent until ctx is cancelled, with a client built from
// cfg.Kubeconfig (in-cluster when empty).
func Run(ctx context.Context, cfg Config, log logr.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %q: %w", cfg.Kubeconfig, err)
	}
	a, err := New(ctx, cfg, restCfg, log)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// New builds the agent: everything that does not yet talk to the API
// server (topology, cgroups, pools, sampling, the recommenders' state, the
// informer's wiring). Events are recorded until ctx ends.
func New(ctx context.Context, cfg Config, restCfg *rest.Config, log logr.Logger) (*Agent, error) {
	restCfg = rest.CopyConfig(restCfg)
	if restCfg.QPS == 0 {
		restCfg.QPS, restCfg.Burst = 50, 100
	}
	h := newHealth(sweepTick(cfg.SweepInterval.Duration), cfg.WorkerCount)
	restCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return apiTracker{rt: rt, h: h} })
	kc, err := kube.New(restCfg)
	if err != nil {
		return nil, err
	}
	mounts, err := cgroup.ReadMounts(cfg.ProcRoot)
	if err != nil {
		return nil, err
	}
	return newAgent(ctx, cfg, kc, h, mounts, log)
}

// newAgent is New with its API client (h: told of the API server's
// answers; nil: made here) and cgroup mounts given, so that the
// kernel tests can run the whole agent on real cgroups (in the v2 VM too,
// where no API server runs) with a fake clientset (kube/kubetest).
func newAgent(ctx context.Context, cfg Config, kc kube.Interface, h *health, mounts cgroup.Mounts, log logr.Logger) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.NodeName == "" {
		return nil, fmt.Errorf("%w: node name empty: set NODE_NAME (downward API) or --node-name", ErrInvalidConfig)
	}
	all, source, topo, err := discoverCPUs(cfg, log)
	if err != nil {
		return nil, err
	}
	if !cfg.reserved().IsSubsetOf(all) {
		return nil, fmt.Errorf("%w: reservedCPUs %s not within the node's cpus %s", ErrInvalidConfig, cfg.reserved(), all)
	}
	kp, err := cgroup.OpenKubepods(mounts, cgroup.KubepodsConfig{Root: cfg.CgroupRoot, Layout: cgroup.LayoutConfig{KubepodsPath: cfg.CgroupParent}})
	if err != nil {
		return nil, fmt.Errorf("%w: %w (set cgroupRoot/cgroupParent)", ErrInvalidConfig, err)
	}
	pm, err := pools.New(pools.Options{
		Topology: topo, All: all, Reserved: cfg.reserved(), CapRatio: *cfg.ExclusiveCap, OvercommitRatio: cfg.OvercommitRatio,
		Checkpoint: cfg.CheckpointPath, Cgroups: kp,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	m := newMetrics()
	qm := newQueueMetrics(m.reg)
	bc := record.NewBroadcaster(record.WithContext(ctx))
	sink := newGatedSink(kc.Events)
	bc.StartRecordingToSink(sink)
	rec := bc.NewRecorder(kube.Scheme, corev1.EventSource{Component: "cgpilot-agent", Host: cfg.NodeName})
	inf, err := newPodInformer(kc, cfg.NodeName, cfg.ResyncPeriod, cfg.SweepInterval.Duration)
	if err != nil {
		return nil, err
	}
	c := &controller{
		cfg: cfg, kube: kc, lister: corelisters.NewPodLister(inf.GetIndexer()), indexer: inf.GetIndexer(),
		queue:   workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "cgpilot-pods", MetricsProvider: qm}),
		statusQ: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "cgpilot-status", MetricsProvider: qm}),
		pending: map[string]pendingStatus{},
		events:  newEventLog(rec, cfg.NodeName),
		metrics: m, log: log, pools: pm, cgroups: kp, topologySource: source, topo: topologySummary(topo),
		since: map[string]time.Time{}, late: map[string]time.Time{}, known: map[string]*knownPod{},
		kubelet: kubeletStatic{Taken: cpuset.New(), Pods: map[string]bool{}},
	}
	c.guard = c.newGuard()
	m.reg.MustRegister(stateCollector{c})
	if topo != nil {
		c.numaNodes = topo.Counts().NUMANodes
	}
	if cfg.KubeletPodResources != "" {
		c.podres = &podResources{socket: cfg.KubeletPodResources}
	}
	if cfg.Rightsizing.on() {
		if err := c.newRightsizer(); err != nil {
			return nil, err
		}
	}
	c.informer, c.broadcaster, c.sink = inf, bc, sink
	c.health = h
	if c.health == nil {
		c.health = newHealth(sweepTick(cfg.SweepInterval.Duration), cfg.WorkerCount)
	}
	c.health.synced = inf.HasSynced
	if err := c.addHandlers(inf); err != nil {
		return nil, err
	}
	return &Agent{c: c}, nil
}

// discoverCPUs returns the CPUs the pools manage, where they came from, and
// the machine topology (nil when discovery failed or does not describe the
// configured CPUs: the pools then allocate on a flat machine, and say so).
func discoverCPUs(cfg Config, log logr.Logger) (cpuset.CPUSet, string, *topology.Topology, error) {
	topo, warns, terr := topology.DiscoverWith(topology.Roots{Sys: cfg.SysRoot, Proc: cfg.ProcRoot, Interrupts: cfg.InterruptsPath})
	for _, w := range warns {
		log.Info("topology degraded", "warning", w.String())
	}
	if terr == nil && len(topo.IRQs) == 0 {
		log.Info("no IRQ information: the io-queues policies avoid and spread act as any", "reason", noIRQReason(warns))
	}
	if terr != nil {
		log.Error(terr, "topology discovery failed: exclusive CPUs are picked by lowest id")
		topo = nil
	}
	if cfg.CPUs != "" {
		set, err := cpulist.Parse(cfg.CPUs)
		if topo != nil && !set.IsSubsetOf(topo.Online()) {
			topo = nil // a test machine smaller than the host: the host topology does not apply
		}
		return set, "config cpus", topo, err
	}
	if topo != nil {
		return topo.Online().Difference(topo.Reserved), "topology " + cfg.SysRoot, topo, nil
	}
	file := filepath.Join(cfg.SysRoot, "devices/system/cpu/online")
	b, err := os.ReadFile(file)
	if err != nil {
		return cpuset.New(), "", nil, fmt.Errorf("online cpus: %w", err)
	}
	set, err := cpulist.Parse(strings.TrimSpace(string(b)))
	if err != nil || set.IsEmpty() {
		return cpuset.New(), "", nil, fmt.Errorf("online cpus %s: %q: %v", file, b, err)
	}
	return set, file, nil, nil
}

// noIRQReason names why the topology has no IRQs, from the discovery
// warnings.
func noIRQReason(warns []topology.Warning) string {
	for _, w := range warns {
		if strings.HasSuffix(w.Path, "interrupts") {
			return w.String()
		}
	}
	return "the interrupts file lists no IRQs"
}

// topologySummary is the machine shape for the local API and the Node.
func topologySummary(t *topology.Topology) string {
	if t == nil {
		return ""
	}
	c := t.Counts()
	return fmt.Sprintf("%d cpus (%d online), %d sockets, %d NUMA nodes, %d cores, %d L3 groups, %d IO-queue cpus %s",
		c.CPUs, c.Online, c.Sockets, c.NUMANodes, c.Cores, c.LLCGroups, t.IOCPUs().Size(), t.IOCPUs())
}

// Run runs the agent until ctx is cancelled: informer, workers, cgroup
// watcher, sweep, health/metrics endpoint and the local API.
func (a *Agent) Run(ctx context.Context) error { return a.c.run(ctx) }

// openFileLimit is the process's RLIMIT_NOFILE (Go raised the soft limit
// to the hard one at start), logged at start: the agent holds its cgroup
// files open, about 11 descriptors a sampled container (BenchmarkAgentFootprint:
// 11,028 at 1,000 pods), and a node whose runtime gives its containers a
// low hard limit runs out ("too many open files" on the reads and writes).
func openFileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return l.Cur
}

func (c *controller) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	c.health.start = time.Now()
	errc := make(chan error, 3)
	// The servers end last, after everything else: the kubelet keeps
	// probing readiness while the agent shuts down, and a refused probe
	// is an "Unhealthy" Warning Event.
	var servers []*http.Server
	var serving sync.WaitGroup
	serve := func(what string, l net.Listener, h http.Handler, lim serverLimits) {
		s := newServer(h, lim)
		servers = append(servers, s)
		serving.Add(1)
		go func() {
			defer serving.Done()
			if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s: %w", what, err)
			}
		}()
	}
	// Shutdown drains: the queues finish what their workers hold, the
	// informers and every goroutine the agent started end before Run
	// returns.
	defer func() {
		c.health.stopping.Store(true)
		cancel()
		// ShutDownWithDrain waits for the keys being worked on; ShutDown
		// then also ends the rate limiter's delaying loop.
		for _, q := range []workqueue.TypedRateLimitingInterface[string]{c.queue, c.statusQ} {
			q.ShutDownWithDrain()
			q.ShutDown()
		}
		c.wg.Wait()
		if err := c.pools.Flush(); err != nil {
			c.log.Error(err, "the checkpoint's last release-isolation change was not saved; the pods' annotations restore it")
		}
		if c.rs != nil {
			c.rs.Stop()
		}
		if c.podres != nil {
			c.podres.close()
		}
		if c.broadcaster != nil {
			c.broadcaster.Shutdown()
		}
		if c.sink != nil {
			c.sink.close()
		}
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		for _, s := range servers {
			s.Shutdown(sctx) // the listener's Close also unlinks the socket
		}
		scancel()
		serving.Wait()
	}()
	if c.cfg.HealthAddr != "" {
		l, err := listenTCP(c.cfg.HealthAddr, httpLimits)
		if err != nil {
			return fmt.Errorf("health endpoint: %w", err)
		}
		serve("health endpoint", l, c.guard.Handler(loopHealthHTTP, c.health.handler(c.metrics, c.cfg.Profiling)), httpLimits)
	}
	if c.cfg.MetricsAddr != "" {
		l, err := listenTCP(c.cfg.MetricsAddr, httpLimits)
		if err != nil {
			return fmt.Errorf("metrics endpoint: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", c.metrics.handler())
		serve("metrics endpoint", l, c.guard.Handler(loopMetricsHTTP, mux), httpLimits)
	}
	if c.cfg.SocketPath != "" {
		l, err := listenSocket(socketOptions{path: c.cfg.SocketPath, gid: c.cfg.socketGID(), log: c.log,
			refused: func(reason string) { c.metrics.apiRefused.WithLabelValues(reason).Inc() }}, localAPILimits)
		if err != nil {
			return fmt.Errorf("local API: %w", err)
		}
		serve("local API", l, c.guard.Handler(loopLocalAPI, c.apiHandler()), localAPILimits)
	}
	c.spawn(func() { c.informer.RunWithContext(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return fmt.Errorf("pod informer did not sync: %w", ctx.Err())
	}
	if c.rs != nil {
		c.rs.Start(ctx)
	}
	c.refreshKubeletState(ctx, "start")
	if err := c.restore(); err != nil {
		return err
	}
	watching, err := c.cgroups.Watch(ctx, func(ev cgroup.WatchEvent) {
		_ = c.guard.Do(loopCgroupEvents, func() { c.onCgroupEvent(ev) })
	}, func(err error) {
		if p, ok := err.(*loop.Panic); ok {
			c.guard.OnPanic(p) // the watch's own code panicked on one event
			return
		}
		c.log.Error(err, "cgroup watch; the sweep covers missed events")
	})
	if err != nil {
		c.log.Error(err, "cgroup watch unavailable; late containers wait for the sweep", "interval", c.cfg.SweepInterval.Duration)
	} else {
		c.spawn(func() { <-watching })
	}
	for i := range c.health.workers {
		c.spawn(func() { c.runWorker(ctx, i) })
	}
	for range statusWorkers {
		c.spawn(func() { c.runStatusWorker(ctx) })
	}
	c.enqueueAll()
	_ = c.guard.Do(loopSweep, func() { c.sweep(ctx, allSlices) })
	st := c.pools.State()
	c.log.Info("agent ready", "node", c.cfg.NodeName, "cpus", st.All().String(), "reserved", st.Reserved().String(), "sharedPool", st.SharedPool().String(),
		"openFileLimit", openFileLimit())
	c.spawn(func() { c.sweepLoop(ctx) })
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}

// sweepLoop runs the safety-net sweep until ctx ends: every sweepTick a
// slice of the node's pods (sweepSlices of them), so that each pod is
// checked once per SweepInterval and no tick walks them all. The
// right-sizer's housekeeping rides on the same tick.
func (c *controller) sweepLoop(ctx context.Context) {
	slice := 0
	c.guard.Every(ctx, loopSweep, sweepTick(c.cfg.SweepInterval.Duration), func() {
		c.sweep(ctx, slice)
		slice = (slice + 1) % sweepSlices(c.cfg.SweepInterval.Duration)
		if c.rs != nil {
			c.rs.Sweep(ctx)
		}
	})
}

// spawn runs f in a goroutine that Run waits for before it returns.
func (c *controller) spawn(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// restore rebuilds the pool state after a start (see pools.Restore) and
// reports what it found.
func (c *controller) restore() error {
	pods := c.allPods()
	claims := map[string]pools.Claim{}
	for _, p := range c.listPods() {
		if v, ok := p.Annotations[local.AnnotationAllocatedCPUs]; ok {
			claims[string(p.UID)] = pools.Claim{AllocatedCPUs: v, Status: p.Annotations[local.AnnotationStatus]}
		}
	}
	rep, err := c.pools.Restore(pods, claims, time.Now())
	if err != nil {
		if errors.Is(err, pools.ErrCheckpointVersion) {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		c.log.Error(err, "writing the restored checkpoint; retried on the next change")
	}
	if len(rep.Cleaned) > 0 {
		c.log.Info("removed stale checkpoint files", "files", rep.Cleaned)
	}
	if rep.Corrupt != nil {
		msg := rep.Corrupt.Error()
		if rep.Aside != "" {
			msg += "; moved aside to " + rep.Aside
		}
		c.log.Error(rep.Corrupt, "checkpoint unusable: rebuilding from pod annotations and cgroups")
		c.events.emit(nil, pools.Event{Warning: true, Reason: local.EventCheckpointCorrupt, Message: msg + "; state rebuilt from pod annotations and cgroups"})
	}
	for uid, why := range rep.Dropped {
		c.log.Info("restore: allocation not kept", "uid", uid, "why", why)
	}
	st := c.pools.State()
	c.log.Info("pool state restored", "source", rep.Source, "exclusivePods", len(rep.Kept), "exclusive", st.Exclusive().String(), "sharedPool", st.SharedPool().String())
	return nil
}
