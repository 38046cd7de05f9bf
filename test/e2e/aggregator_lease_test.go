//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/cgpilot/cgpilot/aggregator"
	"github.com/cgpilot/cgpilot/aggregator/kube"
	"github.com/cgpilot/cgpilot/aggregator/state"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/test/aggtest"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

// TestAggregatorLeaseFailover runs two replicas against a real API server,
// as two pods would (same ports, two IPs: 127.0.0.1 and 127.0.0.2). The
// first takes the Lease; agents report to the follower, which forwards to
// the leader; the leader checkpoints WorkloadRecommendations. When the
// leader stops, the follower takes the Lease, loads the checkpoints and
// serves the same recommendations, and merges new reports on top of the
// restored state.
func TestAggregatorLeaseFailover(t *testing.T) {
	bins := tier.E2E(t)
	cp := harness.MustStart(t, bins, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	applyCRDs(ctx, t, cp)
	createNamespaces(ctx, t, cp.Client, 20)
	dir := t.TempDir()
	certs, err := aggtest.Certs(dir, "127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	const nodes = 3
	fleet := aggtest.NewFleet(aggtest.FleetConfig{Nodes: nodes, PodsPerNode: 12, Seed: 11})
	createFleetPods(ctx, t, cp.Client, fleet, nodes)
	secure, plain := loopbackPorts(t)
	tokens := tokenFiles(t, dir, fleet, nodes)
	replica := func(name, ip string) aggregator.Config {
		return aggregator.Config{RESTConfig: cp.Config, Namespace: "default", Identity: name, PodIP: ip,
			SecureAddr: fmt.Sprintf("%s:%d", ip, secure), HTTPAddr: fmt.Sprintf("%s:%d", ip, plain),
			CertFile: certs.CertFile, KeyFile: certs.KeyFile, StaticTokens: tokens,
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
			FoldInterval: 200 * time.Millisecond, Step: time.Nanosecond, Grace: 5 * time.Second,
			CheckpointInterval: 500 * time.Millisecond, CheckpointMinAge: time.Nanosecond, CheckpointBudget: 1000}
	}
	a := aggtest.Start(t, replica("replica-a", "127.0.0.1"))
	aggtest.Wait(t, "replica-a leading", time.Minute, a.IsLeader)
	b := aggtest.Start(t, replica("replica-b", "127.0.0.2"))
	holder, err := aggregator.LeaseHolder(ctx, cp.Client, "default", "cgpilot-aggregator")
	if err != nil || holder != "replica-a@127.0.0.1" {
		t.Fatalf("Lease holder %q (%v), want replica-a@127.0.0.1", holder, err)
	}
	if b.IsLeader() {
		t.Fatal("two leaders")
	}

	// Agents report to the follower's address: it forwards to the leader.
	clients := clientsFor(t, dir, fleet, nodes, b.URL(), certs)
	sendWindows(ctx, t, fleet, clients, pastWindows(70))

	recsOf := func(r *aggtest.Replica) map[report.Key]report.Recommendation {
		m := map[report.Key]report.Recommendation{}
		r.Store.Entries(func(e stateEntry) {
			if e.Rec != nil {
				m[e.Key] = e.Rec.Recommendation
			}
		})
		return m
	}
	aggtest.Wait(t, "recommendations on the leader", time.Minute, func() bool { return len(recsOf(a)) > 0 })
	if n := len(recsOf(b)); n != 0 {
		t.Errorf("the follower holds %d recommendations: it must not merge", n)
	}
	if fw := forwarded(t, b); fw == 0 {
		t.Error("the follower forwarded nothing to the leader")
	}
	wantWorkloads, _ := fleet.Workloads()
	dc, _ := dynamic.NewForConfig(cp.Config)
	withRec := func(r *aggtest.Replica) map[string]bool {
		m := map[string]bool{}
		r.Store.Entries(func(e stateEntry) {
			if e.Rec != nil {
				m[e.Key.Namespace+"/"+kube.ObjectName(e.Key.Workload)] = true
			}
		})
		return m
	}
	aggtest.Wait(t, "a WorkloadRecommendation per workload with a recommendation", time.Minute, func() bool {
		l, err := dc.Resource(kube.WorkloadRecommendations).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		want := withRec(a)
		for _, o := range l.Items {
			cs, _, _ := unstructured.NestedSlice(o.Object, "status", "containers")
			if len(cs) > 0 && cs[0].(map[string]any)["state"] != nil {
				delete(want, o.GetNamespace()+"/"+o.GetName())
			}
		}
		return len(want) == 0
	})

	// kubectl get shows the printer columns.
	table := getTable(ctx, t, cp, "workloadrecommendations")
	if !strings.Contains(table, "Requested CPU") || !strings.Contains(table, "Nodes") {
		t.Errorf("printer columns missing: %s", table)
	}

	// The leader goes (a rolling update: it releases the Lease).
	if err := a.Stop(); err != nil {
		t.Fatalf("leader stop: %v", err)
	}
	// What it held at the handover, which its last checkpoint pass wrote
	// (read before it stopped, a recommendation recomputed in between made
	// the comparison below flaky).
	before := recsOf(a)
	samplesBefore := map[report.Key]int64{}
	a.Store.Entries(func(e stateEntry) { samplesBefore[e.Key] = e.Samples })
	t.Logf("leader: %d recommendations for %d workloads of the fleet", len(before), wantWorkloads)
	aggtest.Wait(t, "replica-b leading", time.Minute, b.IsLeader)
	holder, _ = aggregator.LeaseHolder(ctx, cp.Client, "default", "cgpilot-aggregator")
	if holder != "replica-b@127.0.0.2" {
		t.Errorf("Lease holder %q", holder)
	}
	after := recsOf(b)
	if len(after) != len(before) {
		t.Fatalf("after takeover %d recommendations, before %d", len(after), len(before))
	}
	for k, r := range before {
		got := after[k]
		if got.CPU.Target != r.CPU.Target || got.Memory.Target != r.Memory.Target {
			t.Errorf("%s: restored %v / %v, leader had %v / %v", k, got.CPU.Target, got.Memory.Target, r.CPU.Target, r.Memory.Target)
		}
	}
	// New reports merge on top of the restored histograms.
	next := pastWindows(1)[0].Add(2 * time.Minute)
	if next.After(time.Now()) {
		next = next.Add(-time.Minute)
	}
	sendWindows(ctx, t, fleet, clients, []time.Time{next})
	aggtest.Wait(t, "new samples merged on the new leader", time.Minute, func() bool {
		grown := 0
		b.Store.Entries(func(e stateEntry) {
			if e.Samples > samplesBefore[e.Key] && samplesBefore[e.Key] > 0 {
				grown++
			}
		})
		return grown > 0
	})
}

func forwarded(t *testing.T, r *aggtest.Replica) float64 {
	t.Helper()
	mfs, err := r.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "cgpilot_aggregator_forwarded_total" {
			for _, m := range mf.Metric {
				for _, l := range m.Label {
					if l.GetValue() == "ok" {
						n += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return n
}

// getTable is kubectl get: the server's Table of a cgpilot.io resource.
func getTable(ctx context.Context, t *testing.T, cp *harness.ControlPlane, resource string) string {
	t.Helper()
	raw, err := cp.Client.Discovery().RESTClient().Get().AbsPath("/apis", v1alpha1.GroupName, "v1alpha1", resource).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var tbl metav1.Table
	if err := json.Unmarshal(raw, &tbl); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, c := range tbl.ColumnDefinitions {
		b.WriteString(c.Name + "\t")
	}
	b.WriteString("\n")
	for _, r := range tbl.Rows {
		for _, c := range r.Cells {
			fmt.Fprintf(&b, "%v\t", c)
		}
		b.WriteString("\n")
	}
	t.Logf("kubectl get %s:\n%s", resource, b.String())
	return b.String()
}

type stateEntry = state.Entry
