package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/topology"
)

// Run runs the agent until ctx is cancelled: informer, workers, cgroup
// watcher, sweep, health/metrics endpoint and the local API.
func Run(ctx context.Context, cfg Config, log logr.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.NodeName == "" {
		return fmt.Errorf("%w: node name empty: set NODE_NAME (downward API) or --node-name", ErrInvalidConfig)
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %q: %w", cfg.Kubeconfig, err)
	}
	restCfg.QPS, restCfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	c, err := newController(ctx, cfg, cs, log)
	if err != nil {
		return err
	}
	return c.run(ctx)
}

// newController builds everything that does not yet talk to the API server.
func newController(ctx context.Context, cfg Config, cs kubernetes.Interface, log logr.Logger) (*controller, error) {
	all, source, topo, err := discoverCPUs(cfg, log)
	if err != nil {
		return nil, err
	}
	if !cfg.reserved().IsSubsetOf(all) {
		return nil, fmt.Errorf("%w: reservedCPUs %s not within the node's cpus %s", ErrInvalidConfig, cfg.reserved(), all)
	}
	backend, err := newBackend(cfg)
	if err != nil {
		return nil, err
	}
	m := newMetrics()
	bc := record.NewBroadcaster(record.WithContext(ctx))
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	rec := bc.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "cgpilot-agent", Host: cfg.NodeName})
	factory, inf, err := newPodInformer(cs, cfg.NodeName, cfg.ResyncPeriod)
	if err != nil {
		return nil, err
	}
	c := &controller{
		cfg: cfg, cs: cs, lister: factory.Core().V1().Pods().Lister(), indexer: inf.GetIndexer(),
		queue:   workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "cgpilot-pods"}),
		statusQ: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "cgpilot-status"}),
		pending: map[string]pendingStatus{},
		events:  newEventLog(rec, cfg.NodeName, m),
		metrics: m, log: log,
		since: map[string]time.Time{}, late: map[string]time.Time{}, known: map[string]*knownPod{},
		kubelet: kubeletStatic{Taken: cpuset.New(), Pods: map[string]bool{}},
	}
	state := &checkpointState{memState: newMemState(all, cfg.reserved()), file: cfg.CheckpointPath}
	pol := policy{alloc: firstFit{}, capFraction: *cfg.ExclusiveCap}
	if topo != nil {
		pol.alloc = topologyAllocator{topo: topo, ioAny: len(topo.IRQs) == 0}
	}
	if cfg.OvercommitRatio > 0 {
		pol.sellable = c.sellable
	}
	c.pools = newPools(state, pol, backend)
	c.pools.topologySource = source
	c.topo = topologySummary(topo)
	if topo != nil {
		c.numaNodes = topo.Counts().NUMANodes
	}
	c.factory, c.informer = factory, inf
	if err := c.addHandlers(inf); err != nil {
		return nil, err
	}
	return c, nil
}

// sellable is the sellable rule: min(a, b), a = allocatable − 2 × the
// largest shared pod, b = (allocatable − CPUs sold to shared pods) / ratio.
func (c *controller) sellable(allocatable int) int {
	largest, sold := 0, 0
	for _, p := range c.allPods() {
		if p.Untouched || (p.ReqErr == nil && p.Req.Pool == PoolExclusive) {
			continue
		}
		largest = max(largest, p.DemandCPUs)
		sold += p.DemandCPUs
	}
	a := allocatable - 2*largest
	b := int(float64(allocatable-sold) / c.cfg.OvercommitRatio)
	return min(a, b)
}

// discoverCPUs returns the CPUs the pools manage, where they came from, and
// the machine topology (nil when discovery failed: the agent then picks the
// lowest free CPU ids, and says so).
func discoverCPUs(cfg Config, log logr.Logger) (cpuset.CPUSet, string, *topology.Topology, error) {
	topo, warns, terr := topology.Discover(cfg.SysRoot, cfg.ProcRoot)
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
		set, err := ParseCPUList(cfg.CPUs)
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
	set, err := ParseCPUList(strings.TrimSpace(string(b)))
	if err != nil || set.IsEmpty() {
		return cpuset.New(), "", nil, fmt.Errorf("online cpus %s: %q: %v", file, b, err)
	}
	return set, file, nil, nil
}

func (c *controller) run(ctx context.Context) error {
	var ready atomic.Bool
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready: informer sync and first sweep pending", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	health.Handle("/metrics", promhttp.HandlerFor(c.metrics.reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Addr: c.cfg.HealthAddr, Handler: health, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 2)
	if c.cfg.HealthAddr != "" {
		go func() {
			if err := hs.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("health endpoint %s: %w", c.cfg.HealthAddr, err)
			}
		}()
	}
	var api *http.Server
	if c.cfg.SocketPath != "" {
		l, err := listenUnix(c.cfg.SocketPath)
		if err != nil {
			return fmt.Errorf("local API: %w", err)
		}
		api = &http.Server{Handler: c.apiHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := api.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("local API: %w", err)
			}
		}()
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
		if api != nil {
			api.Shutdown(sctx)
			os.Remove(c.cfg.SocketPath)
		}
	}()

	c.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return fmt.Errorf("pod informer did not sync: %w", ctx.Err())
	}
	c.refreshKubeletState()
	c.restore(ctx)
	if err := c.watchCgroups(ctx, c.pools.cg); err != nil {
		c.log.Error(err, "cgroup watch unavailable; late containers wait for the sweep", "interval", c.cfg.SweepInterval.Duration)
	}
	for i := 0; i < max(c.cfg.WorkerCount, 1); i++ {
		go c.runWorker(ctx)
	}
	go c.runStatusWorker(ctx)
	defer c.statusQ.ShutDown()
	c.enqueueAll()
	c.sweep(ctx)
	ready.Store(true)
	c.log.Info("agent ready", "node", c.cfg.NodeName, "cpus", c.pools.State().All().String(),
		"reserved", c.pools.State().Reserved().String(), "sharedPool", c.pools.State().SharedPool().String())
	t := time.NewTicker(c.cfg.SweepInterval.Duration)
	defer t.Stop()
	defer c.queue.ShutDown()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-t.C:
			c.sweep(ctx)
		}
	}
}

// restore rebuilds the pool state after a start: from the checkpoint when
// it is good, else from the pods' allocated-cpus annotations and their
// cgroups' actual cpusets. It never gives a CPU to two pods: candidates are
// taken oldest pod first, and one that overlaps an earlier one, a reserved
// or a kubelet-static CPU is dropped (the pod is then allocated afresh).
func (c *controller) restore(ctx context.Context) {
	st := c.pools.state.(*checkpointState)
	pods := c.allPods()
	byUID := map[string]podInfo{}
	for _, p := range pods {
		byUID[p.UID] = p
	}
	saved, err := readCheckpoint(st.file)
	switch {
	case err == nil:
	case errors.Is(err, ErrCheckpointNotFound):
		c.log.Info("no checkpoint: rebuilding from pod annotations and cgroups", "file", st.file)
	default:
		msg := err.Error()
		if errors.Is(err, ErrCheckpointCorrupt) || errors.Is(err, ErrCheckpointVersion) {
			if aside, qerr := quarantineCheckpoint(st.file, time.Now()); qerr == nil {
				msg += "; moved aside to " + aside
			}
		}
		c.log.Error(err, "checkpoint unusable: rebuilding from pod annotations and cgroups")
		c.events.emit(ctx, nil, podEvent{Warning: true, Reason: "CheckpointCorrupt", Message: msg + "; state rebuilt from pod annotations and cgroups"})
		saved = nil
	}
	type candidate struct {
		a      Assignment
		source string
	}
	var cands []candidate
	for _, a := range saved {
		cands = append(cands, candidate{a, "checkpoint"})
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].a.UID < cands[j].a.UID })
	if saved == nil {
		for _, p := range pods {
			if p.Untouched || p.ReqErr != nil || p.Req.Pool != PoolExclusive {
				continue
			}
			pod, err := c.lister.Pods(p.Namespace).Get(p.Name)
			if err != nil {
				continue
			}
			if set, err := ParseCPUList(pod.Annotations[AnnotationAllocatedCPUs]); err == nil && !set.IsEmpty() {
				cands = append(cands, candidate{Assignment{UID: p.UID, Namespace: p.Namespace, Name: p.Name, CPUs: set, ReleaseIsolation: p.Req.ReleaseIsolation}, "annotation"})
				continue
			}
			if pp, err := c.pools.cg.PodPath(p.UID, p.QoS); err == nil && !p.Req.ReleaseIsolation {
				free := c.pools.state.All().Difference(c.pools.state.Reserved())
				if set, err := c.pools.cg.ReadCPUs(pp); err == nil && !set.IsEmpty() && set.IsSubsetOf(free) && !set.Equals(free) {
					cands = append(cands, candidate{Assignment{UID: p.UID, Namespace: p.Namespace, Name: p.Name, CPUs: set}, "cgroup"})
				}
			}
		}
	}
	taken := c.pools.state.Reserved().Union(c.pools.state.KubeletTaken())
	keep := map[string]Assignment{}
	for _, cand := range cands {
		p, live := byUID[cand.a.UID]
		switch {
		case !live || p.Untouched:
			c.log.Info("dropping allocation of a pod that is gone or unmanaged", "uid", cand.a.UID, "cpus", cand.a.CPUs.String(), "source", cand.source)
		case !cand.a.CPUs.IsSubsetOf(c.pools.state.All()) || !cand.a.CPUs.Intersection(taken).IsEmpty():
			c.log.Info("dropping allocation that overlaps taken cpus; the pod is allocated afresh", "pod", p.Key, "cpus", cand.a.CPUs.String(), "source", cand.source)
		default:
			keep[cand.a.UID] = cand.a
			taken = taken.Union(cand.a.CPUs)
		}
	}
	c.pools.mu.Lock()
	defer c.pools.mu.Unlock()
	for uid := range st.snapshot() {
		if _, ok := keep[uid]; !ok {
			_ = st.memState.deleteAssignment(uid)
		}
	}
	for _, a := range keep {
		_ = st.memState.setAssignment(a)
	}
	if err := writeCheckpoint(st.file, st.snapshot()); err != nil {
		c.log.Error(err, "writing the rebuilt checkpoint; retried on the next change")
	}
	c.log.Info("pool state restored", "exclusivePods", len(keep), "exclusive", st.Exclusive().String(), "sharedPool", st.SharedPool().String())
}
