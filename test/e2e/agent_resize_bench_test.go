//go:build linux

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
)

// BenchmarkNodeResizeToCgroup measures, on the real node, a changed
// recommendation reaching the container's cgroup through the agent: the
// RightsizePolicy's CPU floor (minAllowed) flips between 150m and 300m
// (each flip changes the recommendation of a pod that uses almost no CPU,
// by more than the recommender's hysteresis and within one step's bound),
// then the time to the request in the pod's spec (pods/resize accepted)
// and to cpu.shares in the container's cgroup (the kubelet applied it).
// The baseline, interleaved in the same run on a pod no policy selects, is
// the test itself sending the same pods/resize, as soon as its own watch
// brings the write of a policy that selects no pod (the agent decides as
// soon as its watch brings bench's policy write): the ratio is what the
// agent's path (informer, decision, patch, verification) adds to the
// kubelet's own. The agent's path is timed twice: from the policy write
// (which adds the test's read and write of the policy and the watch that
// brings it to the agent), and from the agent's decision (its local API's
// resizeDecided, on this host's clock), the start the baseline has: the
// test decides, then sends. Run with -benchtime=10x or more.
func BenchmarkNodeResizeToCgroup(b *testing.B) {
	bd := startRightsizeNode(b)
	ctx := context.Background()
	// platform-sl-0.6: a preset without a cost objective, so without the
	// node-level resize budget (resizesPerDay) of the others, under which
	// every change spends a token, a raise included, and the cut after a
	// raise waits for the next token (a day at the default): right for a
	// workload, not for a path timed change by change.
	floor := func(cpu string) map[string]any {
		return map[string]any{"mode": "InPlace", "preset": "platform-sl-0.6", "step": "1s", "minHistory": "2s", "maxChangePerStep": 1.0,
			"cpu":         map[string]any{"minAllowed": cpu},
			"podSelector": map[string]any{"matchLabels": map[string]any{"app": "bench"}}}
	}
	bd.policy(b, "bench", floor("150m"))
	// idle selects no pod: the direct resize follows a write of it, as
	// the agent's follows the write of bench (see below).
	idle := func(cpu string) map[string]any {
		spec := floor(cpu)
		spec["podSelector"] = map[string]any{"matchLabels": map[string]any{"app": "none"}}
		return spec
	}
	bd.policy(b, "idle", idle("150m"))
	for _, p := range []*corev1.Pod{
		busyboxPod("bench", map[string]string{"app": "bench"}, "exec sleep 3600", rl("200m", "128Mi"), rl("400m", "256Mi")),
		busyboxPod("base", map[string]string{"app": "base"}, "exec sleep 3600", rl("200m", "128Mi"), rl("400m", "256Mi")),
	} {
		p.Spec.NodeName = bd.node.Name()
		if _, err := bd.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// The agent's first decisions take bench to the 150m floor.
	settled := func(cpu int64) {
		within(b, 3*time.Minute, fmt.Sprintf("bench at %dm, its resize done", cpu), func() (bool, string) {
			p := bd.pod(b, "bench")
			st, _ := resizeConditions(p)
			return milli(p.Spec.Containers[0].Resources.Requests, corev1.ResourceCPU) == cpu && st == "" && metric(b, bd.na.cfg.HealthAddr, `cgpilot_resizes_total{result="applied"}`) > 0,
				fmt.Sprintf("requests %v, resize %q", p.Spec.Containers[0].Resources.Requests, st)
		})
	}
	settled(150)
	idleSeen := bd.watchGenerations(b, "idle")
	// The clocks stop on events, not on polls: a pod watch of the test's
	// own for the request in the spec (a GET every 2 ms loaded the API
	// server on the agent's path only: the direct patch returns the spec),
	// and inotify on the containers' cpu.shares (runc writes it with
	// write(2)); a 5 ms read of the file backs the watch up.
	specSeen := watchRequests(b, bd.cs, "default")
	fw := watchFiles(b)
	shares := func(name string) func() int64 {
		p := bd.pod(b, name)
		path, ok := bd.containerCgroup(b, p)
		if !ok {
			b.Fatalf("%s has no container", name)
		}
		dirs, err := bd.na.kp.Layout().DirsAt(path)
		if err != nil {
			b.Fatal(err)
		}
		file := filepath.Join(dirs.CPU, "cpu.shares")
		if dirs.Unified {
			file = filepath.Join(dirs.CPU, "cpu.weight")
		}
		fw.add(file)
		return func() int64 {
			cur, err := bd.na.kp.ReadCurrent(path)
			if err != nil {
				b.Fatal(err)
			}
			return int64(cur.Shares)
		}
	}
	benchShares, baseShares := shares("bench"), shares("base")
	// await times the request in the spec and cpu.shares reaching cpu milli.
	await := func(name string, read func() int64, cpu int64, t0 time.Time) (spec, cg time.Duration) {
		want := int64(cgroup.KubeletShares(cpu))
		deadline := time.NewTimer(60 * time.Second)
		defer deadline.Stop()
		poll := time.NewTicker(5 * time.Millisecond)
		defer poll.Stop()
		for {
			if read() == want {
				cg = time.Since(t0)
				spec = cg
				if at, ok := specSeen(name, cpu, t0); ok {
					spec = at.Sub(t0)
				}
				return spec, cg
			}
			select {
			case <-fw.changed:
			case <-poll.C:
			case <-deadline.C:
				p := bd.pod(b, name)
				b.Fatalf("%s: cpu.shares %d, want %d for %dm after 60s; spec %v; recommendation %s", name, read(), want, cpu,
					p.Spec.Containers[0].Resources.Requests, p.Annotations["cgpilot.io/recommendation"])
				return 0, 0
			}
		}
	}
	var agentSpec, agentCg, decidedCg, decidedSpec, baseSpec, baseCg []time.Duration
	// decided is when the agent decided bench's last resize.
	decided := func() (time.Time, bool) {
		var recs []local.RecView
		if err := local.NewClient(bd.na.cfg.SocketPath).Get(ctx, local.PathRecs, nil, &recs); err != nil {
			b.Fatal(err)
		}
		for _, r := range recs {
			if r.Pod == "bench" && r.ResizeDecided != nil {
				return *r.ResizeDecided, true
			}
		}
		return time.Time{}, false
	}
	health := bd.na.cfg.HealthAddr
	acc0, app0 := metric(b, health, `cgpilot_resize_seconds_sum{phase="accepted"}`), metric(b, health, `cgpilot_resize_seconds_sum{phase="applied"}`)
	nacc0, napp0 := metric(b, health, `cgpilot_resize_seconds_count{phase="accepted"}`), metric(b, health, `cgpilot_resize_seconds_count{phase="applied"}`)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cpu := int64(300)
		if i%2 == 1 {
			cpu = 150
		}
		// The agent's path: the recommendation changes.
		fw.drain()
		t0 := time.Now()
		bd.setPolicy(b, "bench", floor(fmt.Sprintf("%dm", cpu)))
		s, c := await("bench", benchShares, cpu, t0)
		agentSpec, agentCg = append(agentSpec, s), append(agentCg, c)
		if at, ok := decided(); !ok || at.Before(t0) || at.After(t0.Add(c)) {
			b.Fatalf("the agent's resizeDecided %v (%v) is not between the policy write %v and the cgroup %v", at, ok, t0, t0.Add(c))
		} else {
			decidedCg = append(decidedCg, t0.Add(c).Sub(at))
			decidedSpec = append(decidedSpec, t0.Add(s).Sub(at))
		}
		b.StopTimer()
		settled(cpu) // the kubelet done with it: the next flip is a fresh decision
		// A pod is resized at most once a step (1s here), whatever
		// brings the decision forward, so the next flip waits out the
		// step, or it would time the step's wait, not the path. It also
		// waits for the agent's last write of this change, the
		// annotation's Applied: a pod update that the kubelet syncs, and
		// the kubelet's pod worker starts a pod's next sync only after a
		// PLEG relist (1 s) newer than its last one, so a resize within a
		// relist of that write would wait for the next relist. In use a
		// step (an hour by default) lies between the two; here 1.5 s.
		within(b, 30*time.Second, "the change verified (Applied)", func() (bool, string) {
			rec := recommendationOf(bd.pod(b, "bench"))
			return rec.State == "Applied" && rec.LastApplied != nil && !rec.LastApplied.Before(t0.Truncate(time.Second)), fmt.Sprintf("%s at %v", rec.State, rec.LastApplied)
		})
		time.Sleep(max(time.Until(t0.Add(s+time.Second+100*time.Millisecond)), 1500*time.Millisecond))
		b.StartTimer()
		// The baseline: the same resize sent directly, at the same point
		// after a policy write: the agent decides when its watch brings
		// bench's new generation, and the API server is still at that
		// write's work (its watchers, the controllers' metadata
		// informers); the test sends when its own watch brings idle's.
		// What the agent sends under KeepRatio: the request and the limit
		// (twice the request, as created).
		patch := fmt.Sprintf(`{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"%dm"},"limits":{"cpu":"%dm"}}}]}}`, cpu, 2*cpu)
		fw.drain()
		t0 = idleSeen(bd.setPolicy(b, "idle", idle(fmt.Sprintf("%dm", cpu))))
		if _, err := bd.cs.CoreV1().Pods("default").Patch(ctx, "base", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
			b.Fatal(err)
		}
		s, c = await("base", baseShares, cpu, t0)
		baseSpec, baseCg = append(baseSpec, s), append(baseCg, c)
		// The next change of bench starts as quiet as this one did: the
		// kubelet done with base's resize (its status written, which the
		// API server and the kubelet work on after cpu.shares) and the
		// same pause. Started at once, the agent's path met that work
		// (and base's path never did).
		b.StopTimer()
		within(b, 30*time.Second, "base's resize done", func() (bool, string) {
			p := bd.pod(b, "base")
			st, _ := resizeConditions(p)
			res := p.Status.ContainerStatuses[0].Resources
			return st == "" && res != nil && milli(res.Requests, corev1.ResourceCPU) == cpu, fmt.Sprintf("resize %q, status %+v", st, res)
		})
		time.Sleep(max(time.Until(t0.Add(s+time.Second+100*time.Millisecond)), 1500*time.Millisecond))
		b.StartTimer()
		b.Logf("change %d to %dm: agent accepted %v, cgroup %v (%v from its decision); direct cgroup %v", i, cpu,
			agentSpec[i].Round(time.Millisecond), agentCg[i].Round(time.Millisecond), decidedCg[i].Round(time.Millisecond), c.Round(time.Millisecond))
	}
	b.StopTimer()
	b.ReportMetric(percentile(agentSpec, 0.5), "agent-accepted-p50-ms")
	b.ReportMetric(percentile(agentCg, 0.5), "agent-cgroup-p50-ms")
	b.ReportMetric(percentile(agentCg, 0.99), "agent-cgroup-p99-ms")
	b.ReportMetric(percentile(baseCg, 0.5), "direct-cgroup-p50-ms")
	b.ReportMetric(percentile(baseCg, 0.99), "direct-cgroup-p99-ms")
	b.ReportMetric(percentile(agentCg, 0.5)/percentile(baseCg, 0.5), "agent/direct-p50")
	b.ReportMetric(percentile(decidedCg, 0.5), "decided-cgroup-p50-ms")
	b.ReportMetric(percentile(decidedCg, 0.99), "decided-cgroup-p99-ms")
	// The request in the spec, as the test's watch sees it: the part of
	// each path up to pods/resize accepted (and the watch's delivery,
	// the same for both).
	b.ReportMetric(percentile(decidedSpec, 0.5), "decided-spec-p50-ms")
	b.ReportMetric(percentile(decidedSpec, 0.99), "decided-spec-p99-ms")
	b.ReportMetric(percentile(baseSpec, 0.5), "direct-spec-p50-ms")
	b.ReportMetric(percentile(baseSpec, 0.99), "direct-spec-p99-ms")
	// The rest, from the request in the spec to cpu.shares: the kubelet's.
	kubelet := func(cg, spec []time.Duration) []time.Duration {
		out := make([]time.Duration, min(len(cg), len(spec)))
		for i := range out {
			out[i] = cg[i] - spec[i]
		}
		return out
	}
	agentKubelet, baseKubelet := kubelet(decidedCg, decidedSpec), kubelet(baseCg, baseSpec)
	b.ReportMetric(percentile(agentKubelet, 0.5), "agent-kubelet-p50-ms")
	b.ReportMetric(percentile(agentKubelet, 0.99), "agent-kubelet-p99-ms")
	b.ReportMetric(percentile(baseKubelet, 0.5), "direct-kubelet-p50-ms")
	b.ReportMetric(percentile(baseKubelet, 0.99), "direct-kubelet-p99-ms")
	b.ReportMetric(percentile(decidedCg, 0.5)/percentile(baseCg, 0.5), "decided/direct-p50")
	b.ReportMetric(percentile(decidedCg, 0.99)/percentile(baseCg, 0.99), "decided/direct-p99")
	// The agent's own clock, from its decision: the part of the path after
	// the policy reached it and the recommendation changed.
	var nacc, napp float64
	within(b, 30*time.Second, "the agent verified every resize", func() (bool, string) {
		nacc = metric(b, health, `cgpilot_resize_seconds_count{phase="accepted"}`) - nacc0
		napp = metric(b, health, `cgpilot_resize_seconds_count{phase="applied"}`) - napp0
		p := bd.pod(b, "bench")
		return nacc >= float64(b.N) && napp >= float64(b.N), fmt.Sprintf("%v accepted and %v applied for %d changes; bench %s, status %+v %+v",
			nacc, napp, b.N, p.Annotations["cgpilot.io/recommendation"], p.Status.Conditions, p.Status.ContainerStatuses[0].Resources)
	})
	b.ReportMetric(1000*(metric(b, health, `cgpilot_resize_seconds_sum{phase="accepted"}`)-acc0)/nacc, "decision-to-accepted-mean-ms")
	b.ReportMetric(1000*(metric(b, health, `cgpilot_resize_seconds_sum{phase="applied"}`)-app0)/napp, "decision-to-verified-mean-ms")
	if p := bd.pod(b, "bench"); p.Status.ContainerStatuses[0].RestartCount != 0 {
		b.Fatalf("bench restarted %d times", p.Status.ContainerStatuses[0].RestartCount)
	}
}

// watchRequests watches the pods of ns and returns a lookup: when the
// watch first showed pod name's first container requesting cpu milli
// after since (false if it has not).
func watchRequests(b *testing.B, cs kubernetes.Interface, ns string) func(name string, cpu int64, since time.Time) (time.Time, bool) {
	var mu sync.Mutex
	type seen struct {
		cpu int64
		at  time.Time
	}
	last := map[string][]seen{}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	record := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || len(p.Spec.Containers) == 0 {
			return
		}
		now := time.Now()
		cpu := milli(p.Spec.Containers[0].Resources.Requests, corev1.ResourceCPU)
		mu.Lock()
		defer mu.Unlock()
		if h := last[p.Name]; len(h) == 0 || h[len(h)-1].cpu != cpu {
			last[p.Name] = append(h, seen{cpu, now})
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) }}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return func(name string, cpu int64, since time.Time) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range last[name] {
			if s.cpu == cpu && !s.at.Before(since) {
				return s.at, true
			}
		}
		return time.Time{}, false
	}
}

// setPolicy replaces a RightsizePolicy's spec and returns its new
// generation. The agent writes the policy's status meanwhile: a conflict
// is retried on a fresh read.
func (b *rsBed) setPolicy(t testing.TB, name string, spec map[string]any) int64 {
	t.Helper()
	var gen int64
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := b.dyn.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		u.Object["spec"] = spec
		u, err = b.dyn.Update(context.Background(), u, metav1.UpdateOptions{})
		if err == nil {
			gen = u.GetGeneration()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return gen
}

// watchGenerations watches the RightsizePolicy name and returns a wait:
// the time the watch delivered generation gen (or a later one). The test
// bed's client ends every request after 30 s, a watch too: it watches
// again (its first event is the object as it is).
func (b *rsBed) watchGenerations(t testing.TB, name string) func(gen int64) time.Time {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	type seen struct {
		gen int64
		at  time.Time
	}
	ch := make(chan seen, 64)
	go func() {
		for ctx.Err() == nil {
			w, err := b.dyn.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if u, ok := ev.Object.(*unstructured.Unstructured); ok {
					select {
					case ch <- seen{u.GetGeneration(), time.Now()}:
					default:
					}
				}
			}
			w.Stop()
		}
	}()
	return func(gen int64) time.Time {
		deadline := time.After(30 * time.Second)
		for {
			select {
			case s := <-ch:
				if s.gen >= gen {
					return s.at
				}
			case <-deadline:
				t.Fatalf("policy %s: generation %d not watched in 30s", name, gen)
				return time.Time{}
			}
		}
	}
}

// resizeConditions is the pod's pending or in-progress resize, if any.
func resizeConditions(p *corev1.Pod) (string, string) {
	for _, c := range p.Status.Conditions {
		if (c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress) && c.Status == corev1.ConditionTrue {
			return string(c.Type), c.Message
		}
	}
	return "", ""
}
