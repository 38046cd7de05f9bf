package trust

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/api/report"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func workload(ns, name string) report.Workload {
	return report.Workload{Namespace: ns, Kind: report.KindDeployment, Name: name}
}

// fakePods is what the API server would say: pods (namespace/name) of
// workloads bound to nodes.
type fakePods struct {
	pods map[string]fakePod // by namespace/name
}

type fakePod struct {
	node string
	w    report.Workload
}

func (f *fakePods) Bound(_ context.Context, node string, w report.Workload, _ time.Time) int {
	n := 0
	for _, p := range f.pods {
		if p.node == node && p.w == w {
			n++
		}
	}
	return n
}

func (f *fakePods) PodOn(_ context.Context, node, ns, name string, w report.Workload, _ time.Time) bool {
	p, ok := f.pods[ns+"/"+name]
	return ok && p.node == node && p.w == w
}

func (f *fakePods) OnNode(node string) map[report.Workload]int {
	out := map[report.Workload]int{}
	for _, p := range f.pods {
		if p.node == node {
			out[p.w]++
		}
	}
	return out
}

// build is node's report of one window with a pod per key sampled six
// times (every 10 s), plus what extra does.
func build(t *testing.T, node string, keys []report.Key, cpu float64, extra func(*report.Builder)) *report.Decoded {
	t.Helper()
	b, err := report.NewBuilder(report.BuilderConfig{Node: node, SampleInterval: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		b.Describe(k, report.ContainerInfo{Policy: "loose", Mode: "InPlace", Preset: "cgpilot-aggressive", Adjustable: true})
		for s := range 6 {
			b.Sample(k, k.Name+"-pod", t0.Add(time.Duration(s)*10*time.Second), cpu, 300<<20)
		}
	}
	b.NodeSample(t0, 2, 4<<30)
	b.SetNode(report.NodeUsage{CPUCapacity: 64, CPUAllocatable: 63, MemoryCapacity: 256 << 30, MemoryAllocatable: 250 << 30, Pods: 3})
	if extra != nil {
		extra(b)
	}
	r := b.Cut(t0.Add(time.Minute))[0]
	r.APIVersion, r.Agent, r.Sequence = report.APIVersion, report.Agent{ID: "a", Started: t0}, 1
	body, err := report.Encode(r, false)
	if err != nil {
		t.Fatal(err)
	}
	d, err := report.Decode(bytes.NewReader(body), "")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestForgedReportOfAnotherNodesWorkload(t *testing.T) {
	web := report.Key{Workload: workload("shop", "web"), Container: "app"}
	own := report.Key{Workload: workload("evil-ns", "miner"), Container: "app"}
	pods := &fakePods{pods: map[string]fakePod{"shop/web-1": {"good", web.Workload}, "evil-ns/miner-1": {"evil", own.Workload}}}
	c := New(Config{Pods: pods})
	d := build(t, "evil", []report.Key{web, own}, 0.1, nil)
	v := c.Check(context.Background(), d)
	if len(d.Containers) != 1 || d.Containers[0].Key != own || len(d.Counts) != 1 || v[ReasonNotOnNode] != 1 {
		t.Fatalf("evil's report keeps %v (verdict %v); want only its own workload", keysOf(d), v)
	}
	d = build(t, "good", []report.Key{web}, 0.6, nil)
	if v := c.Check(context.Background(), d); len(d.Containers) != 1 || v[ReasonNotOnNode] != 0 {
		t.Fatalf("the good node's own report: %v %v", keysOf(d), v)
	}
}

func keysOf(d *report.Decoded) []string {
	var out []string
	for _, c := range d.Containers {
		out = append(out, c.Key.String())
	}
	return out
}

func TestFakeContainersAreDropped(t *testing.T) {
	var keys []report.Key
	for i := range report.MaxContainers {
		keys = append(keys, report.Key{Workload: workload(fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("fake-%d", i)), Container: "c"})
	}
	c := New(Config{Pods: &fakePods{}})
	d := build(t, "evil", keys[:64], 0.1, nil)
	v := c.Check(context.Background(), d)
	if len(d.Containers) != 0 || v[ReasonNotOnNode] != 64 {
		t.Fatalf("fake containers kept: %d (%v)", len(d.Containers), v)
	}
	// Without an API server (standalone) a report keeps at most MaxKeys.
	c = New(Config{MaxKeys: 10})
	d = build(t, "evil", keys[:64], 0.1, nil)
	if v := c.Check(context.Background(), d); len(d.Containers) != 10 || v[ReasonOverKeys] != 54 {
		t.Fatalf("over MaxKeys: %d kept (%v)", len(d.Containers), v)
	}
}

func TestSamplesBoundedByPodsTimesRounds(t *testing.T) {
	web := report.Key{Workload: workload("shop", "web"), Container: "app"}
	pods := &fakePods{pods: map[string]fakePod{"shop/web-1": {"evil", web.Workload}}}
	c := New(Config{Pods: pods})
	// 2^20 samples of one pod in a minute, claiming 1000 pods and a
	// million rounds.
	d := build(t, "evil", []report.Key{web}, 0.1, nil)
	for range 1 << 20 {
		d.Counts[0].CPU.Add(0.1)
	}
	d.Containers[0].Pods, d.Rounds = 1000, 1_000_000
	v := c.Check(context.Background(), d)
	if len(d.Containers) != 0 || v[ReasonOverSamples] != 1 || v[ReasonPodsCapped] != 1 || d.Rounds != c.MaxRounds(1) {
		t.Fatalf("a flood of samples kept: %v, rounds %d (verdict %v)", keysOf(d), d.Rounds, v)
	}
	// One pod sampled every 10 s: 6 samples, within 1 × 7 rounds.
	d = build(t, "evil", []report.Key{web}, 0.1, nil)
	if v := c.Check(context.Background(), d); len(d.Containers) != 1 || len(v) != 0 {
		t.Fatalf("an honest window: %v %v", keysOf(d), v)
	}
	// Sampling every second (10× the agents' interval) is ten times the
	// weight of an honest node's pod: refused.
	d = build(t, "evil", []report.Key{web}, 0.1, func(b *report.Builder) {
		for s := range 60 {
			b.Sample(web, "web-1", t0.Add(time.Duration(s)*time.Second+time.Millisecond), 0.1, 1<<20)
		}
	})
	if v := c.Check(context.Background(), d); len(d.Containers) != 0 || v[ReasonOverSamples] != 1 {
		t.Fatalf("one sample a second: %v %v (rounds %d)", keysOf(d), v, d.Rounds)
	}
}

func TestPolicyIsTheAggregators(t *testing.T) {
	web := report.Key{Workload: workload("shop", "web"), Container: "app"}
	pods := &fakePods{pods: map[string]fakePod{"shop/web-1": {"n1", web.Workload}}}
	c := New(Config{Pods: pods, Policies: func(w report.Workload) Policy {
		if w.Namespace == "shop" {
			return Policy{Name: "strict", Mode: "DryRun"}
		}
		return Policy{}
	}})
	d := build(t, "n1", []report.Key{web}, 0.1, nil)
	v := c.Check(context.Background(), d)
	got := d.Containers[0]
	if got.Policy != "strict" || got.Mode != "DryRun" || got.Preset != "" || v[ReasonPolicy] != 1 {
		t.Fatalf("policy %q mode %q preset %q (verdict %v): want the aggregator's strict, DryRun, the policy's preset", got.Policy, got.Mode, got.Preset, v)
	}
}

func TestOOMKillsAndAdjustmentsOfOtherPods(t *testing.T) {
	web := report.Key{Workload: workload("shop", "web"), Container: "app"}
	pods := &fakePods{pods: map[string]fakePod{"shop/web-1": {"good", web.Workload}, "shop/web-2": {"evil", web.Workload}}}
	size := Size{CPUCapacity: 8, CPUAllocatable: 7.5, MemoryCapacity: 32 << 30, MemoryAllocatable: 30 << 30, Pods: 110}
	c := New(Config{Pods: pods, Sizes: func(string) (Size, bool) { return size, true }})
	d := build(t, "evil", []report.Key{web}, 0.1, func(b *report.Builder) {
		for _, pod := range []string{"web-1", "web-2"} {
			if err := b.OOM(report.OOMKill{Key: web, Pod: pod, Time: t0.Add(time.Second), UsageBytes: 1e15, LimitBytes: 1e15}); err != nil {
				t.Fatal(err)
			}
			if err := b.Adjusted(report.Adjustment{Key: web, Pod: pod, Time: t0, Resource: "cpu", From: 1, To: 0.5, Reason: "recommendation"}); err != nil {
				t.Fatal(err)
			}
		}
	})
	v := c.Check(context.Background(), d)
	if len(d.OOMKills) != 1 || d.OOMKills[0].Pod != "web-2" || len(d.Adjustments) != 1 || v[ReasonOOMNotOnNode] != 1 || v[ReasonAdjNotOnNode] != 1 {
		t.Fatalf("OOM kills %+v, adjustments %+v (%v): want only evil's own pod's", d.OOMKills, d.Adjustments, v)
	}
	if k := d.OOMKills[0]; k.UsageBytes != size.MemoryCapacity || k.LimitBytes != size.MemoryCapacity || v[ReasonOOMAmountCap] != 1 {
		t.Fatalf("an OOM kill at 1e15 bytes on a 32 GiB node kept %+v", k)
	}
}

func TestNodeSizeAndUsageFromTheNodeObject(t *testing.T) {
	web := report.Key{Workload: workload("shop", "web"), Container: "app"}
	pods := &fakePods{pods: map[string]fakePod{"shop/web-1": {"evil", web.Workload}, "shop/web-2": {"evil", web.Workload}}}
	size := Size{CPUCapacity: 16, CPUAllocatable: 15.5, MemoryCapacity: 64 << 30, MemoryAllocatable: 62 << 30, Pods: 110}
	c := New(Config{Pods: pods, Sizes: func(n string) (Size, bool) { return size, n == "evil" },
		// web's pods use 2 cores and 3 GiB each on every node.
		PerPod: func(w report.Workload) (float64, float64, bool) { return 2, 3 << 30, w == web.Workload }})
	d := build(t, "evil", []report.Key{web}, 0.1, nil)
	d.Usage = report.NodeUsage{CPUCapacity: 1e300, CPUAllocatable: 1e300, MemoryCapacity: 1e300, MemoryAllocatable: 1e300,
		CPURequests: 1e299, MemoryRequests: 1e299, CPUUsage: 0, MemoryUsage: 0, Pods: 1 << 30}
	v := c.Check(context.Background(), d)
	u := d.Usage
	if u.CPUAllocatable != 15.5 || u.CPUCapacity != 16 || u.MemoryAllocatable != 62<<30 || u.CPURequests != 15.5 || u.Pods != 110 {
		t.Errorf("a node claiming 1e300: %+v (verdict %v)", u, v)
	}
	// Idle: its two web pods use 2 cores each elsewhere: at least half.
	if u.CPUUsage < 2 || u.MemoryUsage < 3<<30 || v[ReasonUsageRaised] != 1 {
		t.Errorf("a node claiming idle: usage %.2f cores %.1f GiB (verdict %v)", u.CPUUsage, u.MemoryUsage/(1<<30), v)
	}
	// A node without a Node object: its usage is not believed.
	d = build(t, "ghost", nil, 0, nil)
	if v := c.Check(context.Background(), d); d.Usage != (report.NodeUsage{}) || v[ReasonNodeUnknown] != 1 {
		t.Errorf("a node without a Node: %+v %v", d.Usage, v)
	}
}
