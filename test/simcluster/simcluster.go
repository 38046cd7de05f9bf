// Package simcluster runs simulated nodes on a real control plane (the
// test bed's): Nodes without a kubelet whose pods are real API objects
// placed by the real scheduler. For them it plays the two parts of a node
// that rescheduling tests need: the kubelet's pod lifecycle (a pod bound
// to a simulated node becomes Running and Ready; a pod being deleted goes)
// and the cgpilot agent's reports (every period, each node's pods with
// the usage a test gives them, through the real report.Builder and
// report.Client to a real aggregator). Usage follows the pods: when a pod
// moves, its usage is reported by its new node from the next window.
//
// It is test support beside test/harness (which it does not change): the
// harness makes the Nodes (CreateFakeNode), this makes them behave.
// Errors: Start returns what prevents it from running; a failed status
// write or report is counted (Stats) and retried at the next event or
// window, never fatal.
package simcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/internal/loop"
)

// Usage is a pod's usage (cores, bytes) at t.
type Usage func(pod *corev1.Pod, t time.Time) (cpu, mem float64)

// Config configures a simulated cluster.
type Config struct {
	Client kubernetes.Interface
	// Nodes are the simulated nodes' names (Nodes already created, e.g.
	// by harness.CreateFakeNode with a Heartbeat).
	Nodes []string
	// NodeCPU and NodeMemory are each node's allocatable as reported.
	NodeCPU, NodeMemory float64
	// BaseCPU and BaseMemory are each node's use outside its pods.
	BaseCPU, BaseMemory float64
	// Usage gives each pod's usage; nil: 0.
	Usage Usage
	// Period is the report grid; Samples per window (default 2).
	Period  time.Duration
	Samples int
	// URL and CAFile of the aggregator; TokenDir holds token-<node> files
	// for its static tokens (see Tokens).
	URL, CAFile, TokenDir string
	// Workers sending reports at once (default 64).
	Workers int
}

// Stats counts what the simulation did.
type Stats struct {
	Reports, ReportErrors, StatusWrites, StatusErrors, Deletes uint64
}

// Cluster is a running simulation.
type Cluster struct {
	cfg     Config
	sim     map[string]bool
	pods    cache.SharedIndexInformer
	clients map[string]*report.Client
	queue   chan *corev1.Pod
	stats   struct{ reports, reportErrs, status, statusErrs, deletes atomic.Uint64 }
	sendMu  sync.Mutex // one window at a time
}

const byNode = "node"

// Start runs the kubelets' part and returns once the pod informer has
// synced; reports are sent by Run (or SendWindow). Everything stops with
// ctx.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Period == 0 {
		cfg.Period = report.DefaultPeriod
	}
	if cfg.Samples == 0 {
		cfg.Samples = 2
	}
	if cfg.Workers == 0 {
		cfg.Workers = 64
	}
	c := &Cluster{cfg: cfg, sim: map[string]bool{}, clients: map[string]*report.Client{}, queue: make(chan *corev1.Pod, 4096)}
	for _, n := range cfg.Nodes {
		c.sim[n] = true
		if cfg.URL != "" {
			rc, err := report.NewClient(report.ClientConfig{URL: cfg.URL, CAFile: cfg.CAFile, TokenFile: filepath.Join(cfg.TokenDir, "token-"+n),
				AgentID: "sim-" + n, Started: time.Now()})
			if err != nil {
				return nil, fmt.Errorf("simcluster: report client of %s: %w", n, err)
			}
			c.clients[n] = rc
		}
	}
	f := informers.NewSharedInformerFactory(cfg.Client, 0)
	c.pods = f.Core().V1().Pods().Informer()
	if err := c.pods.AddIndexers(cache.Indexers{byNode: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && c.sim[p.Spec.NodeName] && c.needsKubelet(p) {
			select {
			case c.queue <- p:
			default: // full: the next event of the pod brings it back
			}
		}
	}
	if _, err := c.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }}); err != nil {
		return nil, err
	}
	go c.pods.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.pods.HasSynced) {
		return nil, fmt.Errorf("simcluster: the pod informer did not sync")
	}
	for range 8 {
		go c.kubelet(ctx)
	}
	go loop.Every(ctx, 3*time.Second, func() { // a missed event: look again every few seconds
		for _, o := range c.pods.GetStore().List() {
			enqueue(o)
		}
	})
	return c, nil
}

func (c *Cluster) needsKubelet(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return true
	}
	if p.Status.Phase != corev1.PodRunning {
		return true
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status != corev1.ConditionTrue
		}
	}
	return true
}

// kubelet makes the simulated nodes' pods Running and Ready, and removes
// those being deleted, as a kubelet confirms a pod's end.
func (c *Cluster) kubelet(ctx context.Context) {
	for {
		var p *corev1.Pod
		select {
		case <-ctx.Done():
			return
		case p = <-c.queue:
		}
		pods := c.cfg.Client.CoreV1().Pods(p.Namespace)
		if p.DeletionTimestamp != nil {
			zero := int64(0)
			err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID}})
			if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				c.stats.deletes.Add(1)
			}
			continue
		}
		cur, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || cur.UID != p.UID || !c.needsKubelet(cur) || cur.DeletionTimestamp != nil {
			continue
		}
		now := metav1.Now()
		cur.Status.Phase = corev1.PodRunning
		cur.Status.StartTime = &now
		cur.Status.HostIP, cur.Status.PodIP = "198.51.100.10", "10.244.0.10"
		cur.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		cur.Status.ContainerStatuses = nil
		for _, ct := range cur.Spec.Containers {
			cur.Status.ContainerStatuses = append(cur.Status.ContainerStatuses, corev1.ContainerStatus{Name: ct.Name, Image: ct.Image, Ready: true,
				Started: new(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
		}
		if _, err := pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			c.stats.statusErrs.Add(1)
			continue
		}
		c.stats.status.Add(1)
	}
}

// PodsOn returns the pods bound to node, not being deleted, sorted.
func (c *Cluster) PodsOn(node string) []*corev1.Pod {
	objs, _ := c.pods.GetIndexer().ByIndex(byNode, node)
	var out []*corev1.Pod
	for _, o := range objs {
		if p := o.(*corev1.Pod); p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	return out
}

// Pod returns a pod from the informer (nil when gone).
func (c *Cluster) Pod(namespace, name string) *corev1.Pod {
	o, ok, _ := c.pods.GetStore().GetByKey(namespace + "/" + name)
	if !ok {
		return nil
	}
	return o.(*corev1.Pod)
}

// Pods returns every pod the informer holds.
func (c *Cluster) Pods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range c.pods.GetStore().List() {
		out = append(out, o.(*corev1.Pod))
	}
	return out
}

// WorkloadOf is a pod's workload by the reports' rule (a ReplicaSet's
// pods are their Deployment's, by pod-template-hash).
func WorkloadOf(p *corev1.Pod) report.Workload {
	var owner *report.Owner
	if c := metav1.GetControllerOf(p); c != nil {
		owner = &report.Owner{Kind: c.Kind, Name: c.Name}
	}
	return report.WorkloadOf(p.Namespace, p.Name, owner, p.Labels, nil)
}

// Report builds node's report of the window ending at end with usage
// (Config.Usage when nil).
func (c *Cluster) Report(node string, end time.Time, usage Usage) *report.Report {
	if usage == nil {
		usage = c.cfg.Usage
	}
	cfg := c.cfg
	step := cfg.Period / time.Duration(cfg.Samples)
	b, err := report.NewBuilder(report.BuilderConfig{Node: node, Period: cfg.Period, SampleInterval: step})
	if err != nil {
		panic(err)
	}
	pods := c.PodsOn(node)
	var reqCPU, reqMem float64
	for _, p := range pods {
		for _, ct := range p.Spec.Containers {
			reqCPU += ct.Resources.Requests.Cpu().AsApproximateFloat64()
			reqMem += ct.Resources.Requests.Memory().AsApproximateFloat64()
		}
	}
	for s := range cfg.Samples {
		ts := end.Add(-cfg.Period + time.Duration(s+1)*step).Add(-time.Millisecond)
		cpu, mem := cfg.BaseCPU, cfg.BaseMemory
		for _, p := range pods {
			var pc, pm float64
			if usage != nil {
				pc, pm = usage(p, ts)
			}
			b.Sample(report.Key{Workload: WorkloadOf(p), Container: p.Spec.Containers[0].Name}, p.Name, ts, pc, pm)
			cpu += pc
			mem += pm
		}
		b.NodeSample(ts, cpu, mem)
	}
	b.SetNode(report.NodeUsage{CPUCapacity: cfg.NodeCPU, CPUAllocatable: cfg.NodeCPU, CPURequests: reqCPU, MemoryCapacity: cfg.NodeMemory,
		MemoryAllocatable: cfg.NodeMemory, MemoryRequests: reqMem, Pods: len(pods)})
	rs := b.Cut(end)
	if len(rs) != 1 {
		panic(fmt.Sprintf("simcluster: %d reports for one window", len(rs)))
	}
	return rs[0]
}

// SendWindow has every node report the window ending at end (usage nil:
// Config.Usage) and returns once all are accepted or failed.
func (c *Cluster) SendWindow(ctx context.Context, end time.Time, usage Usage) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	sem := make(chan struct{}, c.cfg.Workers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, n := range c.cfg.Nodes {
		rc := c.clients[n]
		if rc == nil {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(n string) {
			defer func() { <-sem; wg.Done() }()
			err := rc.Enqueue(c.Report(n, end, usage))
			if err == nil {
				err = rc.Flush(ctx)
			}
			if err != nil {
				c.stats.reportErrs.Add(1)
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("simcluster: report of %s for %s: %w", n, end.Format(time.RFC3339), err)
				}
				mu.Unlock()
				return
			}
			c.stats.reports.Add(1)
		}(n)
	}
	wg.Wait()
	return first
}

// Run sends every window as it ends until ctx ends; onWindow, when set,
// is called after each with its end and error.
func (c *Cluster) Run(ctx context.Context, onWindow func(end time.Time, err error)) {
	p := c.cfg.Period
	for {
		next := time.Now().Truncate(p).Add(p)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		err := c.SendWindow(ctx, next, nil)
		if onWindow != nil {
			onWindow(next, err)
		}
	}
}

// Stats returns the counters.
func (c *Cluster) Stats() Stats {
	return Stats{Reports: c.stats.reports.Load(), ReportErrors: c.stats.reportErrs.Load(), StatusWrites: c.stats.status.Load(),
		StatusErrors: c.stats.statusErrs.Load(), Deletes: c.stats.deletes.Load()}
}

// Tokens writes, for each node, dir/token-<node> and the "token,node"
// file of an aggregator's static tokens, whose path it returns.
func Tokens(dir string, nodes []string) (string, error) {
	var b []byte
	for i, n := range nodes {
		tok := fmt.Sprintf("sim-%d-%s", i, n)
		b = append(b, tok+","+n+"\n"...)
		if err := os.WriteFile(filepath.Join(dir, "token-"+n), []byte(tok), 0o600); err != nil {
			return "", fmt.Errorf("simcluster: %w", err)
		}
	}
	path := filepath.Join(dir, "tokens")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", fmt.Errorf("simcluster: %w", err)
	}
	return path, nil
}
