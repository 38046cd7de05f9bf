//go:build linux

package agent

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cgpilot/cgpilot/agent/history"
	"github.com/cgpilot/cgpilot/agent/oomwatch"
	"github.com/cgpilot/cgpilot/agent/podspec"
	"github.com/cgpilot/cgpilot/agent/pools"
	"github.com/cgpilot/cgpilot/agent/reporter"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	"github.com/cgpilot/cgpilot/agent/rightsize/runner"
	local "github.com/cgpilot/cgpilot/api/local"
)

// wire.go: right-sizing (agent/rightsize/runner) and reporting
// (agent/reporter) wired to the controller. The configuration becomes
// their parts here (the recommenders from their checkpoints, the history,
// the OOM watcher, the reporter), and the controller is their Host: the
// informer's pods, Events, the status worker, the pools' exclusive CPUs.

// newRightsizer builds right-sizing from the config. Nothing here talks
// to the API server.
func (c *controller) newRightsizer() error {
	rc := c.cfg.Rightsizing
	engine, warns, err := rightsize.NewEngine(rightsize.EngineOptions{CheckpointDir: rc.StateDir})
	if err != nil {
		return fmt.Errorf("%w: %w (roll the agent forward, or delete the file to start the histograms afresh)", ErrInvalidConfig, err)
	}
	for _, w := range warns {
		c.log.Error(w, "recommender checkpoint unusable: moved aside, its histograms start afresh")
		c.events.emit(nil, pools.Event{Warning: true, Reason: local.EventCheckpointCorrupt, Message: w.Error() + "; the histograms start afresh"})
	}
	hist, err := history.Open(history.Options{Dir: filepath.Join(rc.StateDir, "history"), Retention: rc.HistoryRetention.Duration, MaxBytes: rc.HistoryMaxBytes})
	if err != nil {
		return err
	}
	var oom *oomwatch.Watcher
	if rc.OOMWatch != "off" {
		backend := map[string]oomwatch.Backend{"auto": oomwatch.BackendAuto, "bpf": oomwatch.BackendBPF, "counters": oomwatch.BackendCounters}[rc.OOMWatch]
		oom, err = oomwatch.New(oomwatch.Config{Backend: backend, Logger: c.log.WithName("oomwatch"), Guard: c.guard})
		if err != nil {
			if rc.OOMWatch != "auto" {
				return fmt.Errorf("%w: rightsizing.oomWatch=%s: %w", ErrInvalidConfig, rc.OOMWatch, err)
			}
			c.log.Error(err, "OOM watcher unavailable: OOM kills reach the histograms only through the cgroup counters' next sample, and memory is not raised at once")
			oom = nil
		} else {
			c.log.Info("OOM watcher", "backend", oom.Backend().String(), "reason", oom.Reason())
		}
	}
	var rep *reporter.Reporter
	if c.cfg.Aggregator.on() {
		if rep, err = c.newReporter(); err != nil {
			return err
		}
	}
	c.rs = runner.New(runner.Options{
		Host: rsHost{c}, Kube: c.kube, Cgroups: c.cgroups, Log: c.log, Guard: c.guard, Spawn: c.spawn,
		Metrics: c.metrics.rs, Writes: c.metrics.writes, Drift: c.metrics.drift, Registerer: c.metrics.reg,
		Engine: engine, History: hist, OOM: oom, Reporter: rep,
		NodeName: c.cfg.NodeName, ResyncPeriod: c.cfg.ResyncPeriod, SampleInterval: rc.SampleInterval.Duration,
		CheckpointInterval: rc.CheckpointInterval.Duration, ForgetAfter: rc.ForgetAfter.Duration, AggregatorURL: c.cfg.Aggregator.URL,
		HousekeepEvery: housekeepEvery(c.cfg.SweepInterval.Duration),
	})
	return nil
}

// newReporter builds the aggregator's reporter from the config.
func (c *controller) newReporter() (*reporter.Reporter, error) {
	ac := c.cfg.Aggregator
	rep, err := reporter.New(reporter.Options{
		Node: c.cfg.NodeName, URL: strings.TrimSuffix(ac.URL, "/"), CAFile: ac.CAFile, TokenFile: ac.TokenFile, MaxBufferBytes: ac.MaxBufferBytes,
		Period: ac.ReportPeriod.Duration, SampleInterval: c.cfg.Rightsizing.SampleInterval.Duration, ProcRoot: c.cfg.ProcRoot,
		Registerer: c.metrics.reg, Log: c.log, Guard: c.guard, Spawn: c.spawn,
		Requests: c.nodeRequests, Pools: c.poolSizes,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return rep, nil
}

// nodeRequests are the requests of the node's pods that have not
// finished, and their number.
func (c *controller) nodeRequests() (cpu, memory float64, pods int) {
	for _, p := range c.listPods() {
		if p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed" {
			continue
		}
		pods++
		for _, ctr := range p.Spec.Containers {
			req, _ := podspec.Requirements(ctr.Resources)
			cpu += req.CPU
			memory += req.Memory
		}
	}
	return cpu, memory, pods
}

// poolSizes are the pools' sizes for the reports.
func (c *controller) poolSizes() reporter.Pools {
	st := c.pools.State()
	return reporter.Pools{All: st.All().Size(), Reserved: st.Reserved().Size(), Shared: st.SharedPool().Size(), Exclusive: st.Exclusive().Size(),
		Allocatable: st.All().Difference(st.Reserved()).Size(), ExclusivePods: len(st.Assignments())}
}

// rsHost is the controller as right-sizing's Host: PodByUID is the
// controller's own (reconcile.go), the other methods adapt.
type rsHost struct{ *controller }

func (h rsHost) Pod(namespace, name string) (*corev1.Pod, error) {
	return h.lister.Pods(namespace).Get(name)
}

func (h rsHost) HoldsExclusive(p *corev1.Pod) bool { return h.holdsExclusive(p) }

func (h rsHost) Emit(who *runner.PodRef, ev runner.Event) {
	var ref *podRef
	if who != nil {
		ref = &podRef{UID: who.UID, Namespace: who.Namespace, Name: who.Name}
	}
	h.events.emit(ref, pools.Event{Warning: ev.Warning, Reason: ev.Reason, Message: ev.Message})
}

func (h rsHost) QueueStatus(key string) { h.statusQ.Add(key) }

func (h rsHost) Pods() []*corev1.Pod { return h.listPods() }

func (h rsHost) Manages(p *corev1.Pod) bool { return !h.podInfo(p).Untouched }

func (h rsHost) Requeue(p *corev1.Pod) { h.enqueue(podspec.Key(p.Namespace, p.Name), time.Now()) }

func (h rsHost) RequeueAfter(p *corev1.Pod, d time.Duration) {
	h.queue.AddAfter(podspec.Key(p.Namespace, p.Name), d)
}

// holdsExclusive says whether the pod runs on cores of its own (the pools'
// or the kubelet's static CPU manager's).
func (c *controller) holdsExclusive(p *corev1.Pod) bool {
	if _, ok := c.pools.State().Assignment(string(p.UID)); ok {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kubelet.holds(string(p.UID), podspec.Key(p.Namespace, p.Name))
}
