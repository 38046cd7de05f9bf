//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cgpilot/cgpilot/aggregator"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/test/aggtest"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

// TestSchedulerExtenderPlacesByUsage configures the test bed's real
// kube-scheduler with the aggregator as its prioritize extender. Three
// identical nodes (to the scheduler: same allocatable, no pods) differ in
// real usage, as their reports say: one has CPU free, one memory, one
// neither. A Deployment whose pods are known to use much CPU lands on the
// CPU-free node, one whose pods use much memory on the memory-free node,
// although by requests (placeholders bound to those two) busy is best.
// The scheduler presents a client certificate (its extenders[].tlsConfig),
// the only callers the extender answers.
func TestSchedulerExtenderPlacesByUsage(t *testing.T) {
	bins := tier.E2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	certs, err := aggtest.Certs(dir)
	if err != nil {
		t.Fatal(err)
	}
	nodes := []string{"cpu-free", "mem-free", "busy"}
	var lines strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&lines, "tok-%s,%s\n", n, n)
		os.WriteFile(filepath.Join(dir, "token-"+n), []byte("tok-"+n), 0o600)
	}
	os.WriteFile(filepath.Join(dir, "tokens"), []byte(lines.String()), 0o600)
	callers, err := aggtest.ClientCerts(dir, "system:kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	sched := callers.Certs["system:kube-scheduler"]
	// The extender needs no API server: a standalone replica.
	agg := aggtest.Start(t, aggregator.Config{Standalone: true, StaticTokens: filepath.Join(dir, "tokens"), Identity: "extender",
		CertFile: certs.CertFile, KeyFile: certs.KeyFile, FoldInterval: 200 * time.Millisecond, ExtenderClientCAFile: callers.CAFile})
	schedCfg := fmt.Sprintf(`extenders:
  - urlPrefix: "https://%s/scheduler"
    prioritizeVerb: prioritize
    weight: 5
    enableHTTPS: true
    tlsConfig:
      caData: %s
      certFile: %s
      keyFile: %s
    nodeCacheCapable: false
    ignorable: false
`, agg.SecureAddr(), base64.StdEncoding.EncodeToString(certs.CAPEM), sched.CertFile, sched.KeyFile)
	cp := harness.MustStart(t, bins, harness.Options{Controllers: true, SchedulerConfig: schedCfg})
	cs := cp.Client
	for _, n := range nodes {
		createReadyNode(ctx, t, cp, n)
	}
	keepNodesAlive(ctx, t, cs, nodes...)
	// The node lifecycle controller may taint a new node not-ready until it
	// has seen its Ready condition: wait until all three are schedulable,
	// or the scheduler would score a single feasible node (no scoring).
	waitFor(t, "three untainted nodes", 60*time.Second, func() bool {
		for _, n := range nodes {
			node, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil || len(node.Spec.Taints) > 0 {
				return false
			}
		}
		return true
	})

	// What the nodes' agents report: real usage of 4 cores / 8 GiB, and
	// two workloads' pods running elsewhere in the cluster.
	compute := report.Key{Workload: report.Workload{Namespace: "sched", Kind: report.KindDeployment, Name: "compute"}, Container: "c"}
	cache := report.Key{Workload: report.Workload{Namespace: "sched", Kind: report.KindDeployment, Name: "cache"}, Container: "c"}
	usage := map[string][2]float64{"cpu-free": {0.4, 7 << 30}, "mem-free": {3.6, 1 << 30}, "busy": {3.7, 7.5 * (1 << 30)}}
	end := time.Now().UTC().Truncate(time.Minute).Add(-3 * time.Minute)
	for _, n := range nodes {
		b, _ := report.NewBuilder(report.BuilderConfig{Node: n})
		for s := range 6 {
			ts := end.Add(-time.Minute + time.Duration(s)*10*time.Second)
			b.NodeSample(ts, usage[n][0], usage[n][1])
			if n == "busy" { // the two workloads' pods run on the busy node
				b.Sample(compute, "compute-1", ts, 1.5, 100<<20)
				b.Sample(cache, "cache-1", ts, 0.05, 3<<30)
			}
		}
		b.SetNode(report.NodeUsage{CPUAllocatable: 4, MemoryAllocatable: 8 << 30})
		rep := b.Cut(end)[0]
		c, err := report.NewClient(report.ClientConfig{URL: agg.URL(), TokenFile: filepath.Join(dir, "token-"+n), CAFile: certs.CAFile})
		if err != nil {
			t.Fatal(err)
		}
		c.Enqueue(rep)
		if err := c.Flush(ctx); err != nil || c.Stats().Accepted != 1 {
			t.Fatalf("%s: %v %+v", n, err, c.Stats())
		}
	}
	aggtest.Wait(t, "the workloads' usage per pod", 30*time.Second, func() bool {
		_, ok1 := agg.Profiles.Workload(compute.Workload, time.Now())
		_, ok2 := agg.Profiles.Workload(cache.Workload, time.Now())
		return ok1 && ok2
	})

	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sched"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "default ServiceAccount", 60*time.Second, func() bool {
		_, err := cs.CoreV1().ServiceAccounts("sched").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	// Placeholders bound to cpu-free and mem-free request half of them:
	// by requests alone (the scheduler's own scores) busy is the best
	// node, so a placement elsewhere is the extender's doing.
	for _, n := range []string{"cpu-free", "mem-free"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "placeholder-" + n, Namespace: "sched"}, Spec: corev1.PodSpec{NodeName: n,
			TerminationGracePeriodSeconds: new(int64), Containers: []corev1.Container{{Name: "c", Image: "docker.io/local/busybox:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}}}}}}
		if _, err := cs.CoreV1().Pods("sched").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Both ask the scheduler for the same small requests: only usage differs.
	tmpl := corev1.PodSpec{TerminationGracePeriodSeconds: new(int64), Containers: []corev1.Container{{Name: "c", Image: "docker.io/local/busybox:1",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}}}
	for _, name := range []string{"compute", "cache"} {
		d := &appsDeployment{name: name, ns: "sched", replicas: 1, labels: map[string]string{"app": name}, spec: tmpl}
		if err := d.create(ctx, cs); err != nil {
			t.Fatal(err)
		}
	}
	placed := map[string]string{}
	waitFor(t, "both pods scheduled", 90*time.Second, func() bool {
		l, err := cs.CoreV1().Pods("sched").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, p := range l.Items {
			if p.Spec.NodeName != "" && p.Labels["app"] != "" {
				placed[p.Labels["app"]] = p.Spec.NodeName
			}
		}
		return len(placed) == 2
	})
	if placed["compute"] != "cpu-free" || placed["cache"] != "mem-free" {
		t.Errorf("placements %v: want compute on cpu-free and cache on mem-free", placed)
		for _, l := range grepLog(cp.LogPath("kube-scheduler"), func(l string) bool {
			return strings.Contains(strings.ToLower(l), "extender") || strings.Contains(l, "sched/")
		}) {
			t.Log(l)
		}
		l, _ := cs.CoreV1().Pods("sched").List(ctx, metav1.ListOptions{})
		for _, p := range l.Items {
			body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: &p, NodeNames: &nodes})
			resp, err := aggtest.HTTPClientWithCert(certs.CAPEM, sched.Pair).Post(agg.URL()+"/scheduler/prioritize", "application/json", bytes.NewReader(body))
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				t.Logf("%s (owners %v, labels %v): %s", p.Name, p.OwnerReferences, p.Labels, b)
			}
		}
	}
	var calls float64
	for _, l := range strings.Split(metricsOf(t, agg), "\n") {
		if strings.HasPrefix(l, `cgpilot_aggregator_prioritize_total{result="ok"} `) {
			fmt.Sscan(strings.Fields(l)[1], &calls)
		}
	}
	if calls < 2 {
		t.Errorf("the scheduler called the extender %v times, want one per pod", calls)
	}
	t.Logf("placed by real usage: %v", placed)
}
