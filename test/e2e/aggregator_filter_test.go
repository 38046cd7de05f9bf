//go:build linux

package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgpilot/cgpilot/aggregator"
	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/test/aggtest"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

// TestSchedulerExtenderFiltersOnPeaks configures the test bed's real
// kube-scheduler with the aggregator's filter and prioritize verbs. Node
// "peaky" runs a batch workload whose two pods idle now (0.2 of 4 cores)
// but used 1.5 cores each yesterday: the sum of their 7-day peaks, 3.0
// cores, leaves no room under the 80 % watermark (3.2 cores) for a pod
// asking 300m, although by requests (nothing bound there) and by current
// usage peaky is empty. The pod stays Pending with the extender's reason
// in its FailedScheduling event; once peaky's next report shows the batch
// pods gone, the pod is placed there. Then node "silent", whose pods'
// peaks are as high, keeps a pod pinned to it off while it reports, and
// takes it once its agent has been silent for longer than the aggregator
// waits (3 periods, the aggregator's clock moved on): a node without a
// fresh load is never filtered (fail-open).
//
// The scheduler retries a pod an extender rejected on the next cluster
// event of any kind (kubernetes#122019), else at its periodic flush (5
// min). A busy cluster has many a second; this quiet test bed has none,
// so the test makes one (a label on peaky) once the load has dropped.
func TestSchedulerExtenderFiltersOnPeaks(t *testing.T) {
	bins := tier.E2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	certs, err := aggtest.Certs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens"), []byte("tok-peaky,peaky\ntok-silent,silent\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"peaky", "silent"} {
		if err := os.WriteFile(filepath.Join(dir, "token-"+n), []byte("tok-"+n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The scheduler presents a client certificate, the only caller the
	// extender answers.
	callers, err := aggtest.ClientCerts(dir, "system:kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	sched := callers.Certs["system:kube-scheduler"]
	var offset atomic.Int64 // the aggregator's clock runs ahead by this
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	agg := aggtest.Start(t, aggregator.Config{Clock: clock, Standalone: true, StaticTokens: filepath.Join(dir, "tokens"), Identity: "extender",
		CertFile: certs.CertFile, KeyFile: certs.KeyFile, FoldInterval: 200 * time.Millisecond, LoadInterval: time.Second,
		Placement: profile.Rule{CPU: 0.8, Memory: 0.8}, ExtenderClientCAFile: callers.CAFile})
	schedCfg := extenderConfig(agg.SecureAddr(), certs.CAPEM, sched)
	cp := harness.MustStart(t, bins, harness.Options{Controllers: true, SchedulerConfig: schedCfg})
	cs := cp.Client
	addNode := func(n string) {
		createReadyNode(ctx, t, cp, n)
		keepNodesAlive(ctx, t, cs, n)
		waitFor(t, n+" untainted", 60*time.Second, func() bool {
			node, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			return err == nil && len(node.Spec.Taints) == 0
		})
	}
	addNode("peaky")

	clients := map[string]*report.Client{}
	for _, n := range []string{"peaky", "silent"} {
		c, err := report.NewClient(report.ClientConfig{URL: agg.URL(), TokenFile: filepath.Join(dir, "token-"+n), CAFile: certs.CAFile})
		if err != nil {
			t.Fatal(err)
		}
		clients[n] = c
	}
	send := func(node string, end time.Time, batchCPU float64, batchPods int) {
		t.Helper()
		batch := report.Key{Workload: report.Workload{Namespace: "sched", Kind: report.KindDeployment, Name: "batch-" + node}, Container: "c"}
		client := clients[node]
		b, _ := report.NewBuilder(report.BuilderConfig{Node: node})
		for s := range 6 {
			ts := end.Add(-time.Minute + time.Duration(s)*10*time.Second)
			b.NodeSample(ts, 0.1+batchCPU, 1<<30)
			for p := range batchPods {
				b.Sample(batch, fmt.Sprintf("batch-%d", p), ts, batchCPU/float64(batchPods), 200<<20)
			}
		}
		b.SetNode(report.NodeUsage{CPUAllocatable: 4, MemoryAllocatable: 8 << 30})
		if err := client.Enqueue(b.Cut(end)[0]); err != nil {
			t.Fatal(err)
		}
		if err := client.Flush(ctx); err != nil {
			t.Fatalf("report of %s: %v", end, err)
		}
	}
	recent := time.Now().UTC().Truncate(time.Minute).Add(-3 * time.Minute)
	send("peaky", recent.Add(-24*time.Hour), 3.0, 2) // yesterday's peak: 1.5 cores per pod
	send("peaky", recent, 0.2, 2)                    // idle now
	send("silent", recent, 3.9, 2)                   // its own batch
	aggtest.Wait(t, "peaky's load", 30*time.Second, func() bool {
		l, ok := agg.Profiles.NodeLoad("peaky")
		return ok && l.Pods == 2 && l.CPU > 2.9
	})
	l, _ := agg.Profiles.NodeLoad("peaky")
	t.Logf("peaky: 7-day peaks of its pods %.2f cores, real use %.2f cores, of %.0f allocatable", l.CPU, l.CPUUsage, l.CPUAllocatable)

	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sched"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "default ServiceAccount", 60*time.Second, func() bool {
		_, err := cs.CoreV1().ServiceAccounts("sched").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	pod := func(name, node string) *corev1.Pod {
		var sel map[string]string
		if node != "" {
			sel = map[string]string{"kubernetes.io/hostname": node}
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sched"}, Spec: corev1.PodSpec{
			NodeSelector:                  sel,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "c", Image: "docker.io/local/busybox:1", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("300m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}}}}
	}
	if _, err := cs.CoreV1().Pods("sched").Create(ctx, pod("web", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodeOf := func(name string) string {
		p, err := cs.CoreV1().Pods("sched").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return p.Spec.NodeName
	}
	// The scheduler tries web again every few seconds (the extender, not a
	// plugin, rejected it: it backs off up to 10 s); it must stay off peaky.
	var reason string
	waitFor(t, "web's FailedScheduling event with the extender's reason", 60*time.Second, func() bool {
		evs, err := cs.CoreV1().Events("sched").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "web").String()})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedScheduling" && strings.Contains(e.Message, "cgpilot: the 7-day cpu peaks") {
				reason = e.Message
				return true
			}
		}
		return false
	})
	t.Logf("kept off peaky: %s", reason)
	held := time.Now()
	for time.Since(held) < 15*time.Second {
		if n := nodeOf("web"); n != "" {
			t.Fatalf("web placed on %s while peaky's peaks leave no room", n)
		}
		time.Sleep(time.Second)
	}
	filtered := metricValue(t, agg, `cgpilot_aggregator_filter_nodes_total{verdict="filtered_cpu"}`)
	if filtered < 2 {
		t.Errorf("the extender filtered peaky %v times; the scheduler should have asked at least twice", filtered)
	}

	// The batch pods leave peaky: its next report shows none.
	send("peaky", recent.Add(time.Minute), 0, 0)
	dropped := time.Now()
	aggtest.Wait(t, "peaky's load without the batch pods", 30*time.Second, func() bool {
		l, ok := agg.Profiles.NodeLoad("peaky")
		return ok && l.Pods == 0
	})
	t.Logf("peaky's load %.2f cores after the report without the batch pods", func() float64 { l, _ := agg.Profiles.NodeLoad("peaky"); return l.CPU }())
	// A cluster event, as any busy cluster has many: the scheduler tries
	// the pods that extenders rejected again.
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "peaky", types.MergePatchType, []byte(`{"metadata":{"labels":{"cgpilot-test/nudge":"1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "web placed on peaky once its profile dropped", 60*time.Second, func() bool { return nodeOf("web") == "peaky" })
	t.Logf("web placed on peaky %v after the report without the batch pods (filtered %v times before)", time.Since(dropped).Round(time.Second), filtered)

	// Fail-open: silent, full of peaks, keeps a pod off while it reports...
	addNode("silent")
	if l, ok := agg.Profiles.NodeLoad("silent"); !ok || l.CPU < 3.8 {
		t.Fatalf("silent's load %+v: want its 3.9 cores of peaks", l)
	}
	if _, err := cs.CoreV1().Pods("sched").Create(ctx, pod("probe", "silent"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "probe's FailedScheduling event with the extender's reason", 60*time.Second, func() bool {
		evs, err := cs.CoreV1().Events("sched").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "probe").String()})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedScheduling" && strings.Contains(e.Message, "cgpilot: the 7-day cpu peaks") {
				return true
			}
		}
		return false
	})
	// ...and takes it once its load is stale (no report for 10 minutes of
	// the aggregator's clock; StaleAfter is 3 periods).
	offset.Store(int64(10 * time.Minute))
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "silent", types.MergePatchType, []byte(`{"metadata":{"labels":{"cgpilot-test/nudge":"1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod pinned to the stale node placed (fail-open)", 60*time.Second, func() bool { return nodeOf("probe") == "silent" })
	if unknown := metricValue(t, agg, `cgpilot_aggregator_filter_nodes_total{verdict="unknown"}`); unknown < 1 {
		t.Errorf("the stale node was not counted as unknown (%v)", unknown)
	}
}

// extenderConfig is the scheduler's configuration of the aggregator at
// addr as the extender of both verbs (CA caPEM), presenting cert.
func extenderConfig(addr string, caPEM []byte, cert aggtest.ClientCert) string {
	return fmt.Sprintf(`extenders:
  - urlPrefix: "https://%s/scheduler"
    filterVerb: filter
    prioritizeVerb: prioritize
    weight: 5
    enableHTTPS: true
    tlsConfig:
      caData: %s
      certFile: %s
      keyFile: %s
    nodeCacheCapable: true
    ignorable: true
`, addr, base64.StdEncoding.EncodeToString(caPEM), cert.CertFile, cert.KeyFile)
}

// metricValue reads one sample (name with its labels, as exposed) of the
// replica's metrics (its registry: /metrics needs a token); 0 when absent.
func metricValue(t *testing.T, r *aggtest.Replica, series string) float64 {
	t.Helper()
	var v float64
	for _, l := range strings.Split(metricsOf(t, r), "\n") {
		if strings.HasPrefix(l, series+" ") {
			fmt.Sscan(strings.Fields(l)[1], &v)
		}
	}
	return v
}
