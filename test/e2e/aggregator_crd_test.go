//go:build linux

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/cgpilot/cgpilot/aggregator"
	"github.com/cgpilot/cgpilot/aggregator/kube"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/test/aggtest"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

// TestWorkloadRecommendationReload: the CRD bounds an object (32
// containers, 32 KiB of state each); a replica restarted from the
// checkpoints it wrote serves the same recommendations, and a corrupt
// checkpoint written by someone else is skipped, not fatal.
func TestWorkloadRecommendationReload(t *testing.T) {
	bins := tier.E2E(t)
	cp := harness.MustStart(t, bins, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	applyCRDs(ctx, t, cp)
	createNamespaces(ctx, t, cp.Client, 20)
	dc, _ := dynamic.NewForConfig(cp.Config)
	wr := dc.Resource(kube.WorkloadRecommendations)

	// The schema's bounds.
	obj := func(name string, containers int, state []byte) *unstructured.Unstructured {
		o := &v1alpha1.WorkloadRecommendation{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "WorkloadRecommendation"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-00", Labels: map[string]string{kube.LabelManagedBy: kube.ManagedBy}},
			Spec:       v1alpha1.WorkloadRecommendationSpec{Workload: v1alpha1.WorkloadReference{Kind: "Deployment", Name: name}}}
		for i := range containers {
			o.Status.Containers = append(o.Status.Containers, v1alpha1.ContainerRecommendation{Name: fmt.Sprintf("c%d", i), State: state})
		}
		u, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		return &unstructured.Unstructured{Object: u}
	}
	if _, err := wr.Namespace("team-00").Create(ctx, obj("too-many", 33, nil), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "32") {
		t.Errorf("33 containers: %v, want refused", err)
	}
	if _, err := wr.Namespace("team-00").Create(ctx, obj("too-big", 1, make([]byte, 25<<10)), metav1.CreateOptions{}); err == nil {
		t.Error("a state of 25 KiB (34 KiB of base64) was accepted")
	}
	// A checkpoint that does not decode, as a bad write or edit leaves it.
	if _, err := wr.Namespace("team-00").Create(ctx, obj("corrupt", 1, []byte("not a checkpoint")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	certs, _ := aggtest.Certs(dir)
	fleet := aggtest.NewFleet(aggtest.FleetConfig{Nodes: 2, PodsPerNode: 8, Seed: 21})
	createFleetPods(ctx, t, cp.Client, fleet, 2)
	tokens := tokenFiles(t, dir, fleet, 2)
	cfg := aggregator.Config{RESTConfig: cp.Config, Namespace: "default", Identity: "reload", CertFile: certs.CertFile, KeyFile: certs.KeyFile,
		StaticTokens: tokens, FoldInterval: 200 * time.Millisecond, Step: time.Nanosecond, Grace: 5 * time.Second,
		CheckpointInterval: 300 * time.Millisecond, CheckpointMinAge: time.Nanosecond, CheckpointBudget: 1000}
	first := aggtest.Start(t, cfg)
	aggtest.Wait(t, "leading despite the corrupt checkpoint", time.Minute, first.IsLeader)
	sendWindows(ctx, t, fleet, clientsFor(t, dir, fleet, 2, first.URL(), certs), pastWindows(65))
	recs := func(r *aggtest.Replica) map[report.Key]report.Recommendation {
		out := map[report.Key]report.Recommendation{}
		r.Store.Entries(func(e stateEntry) {
			if e.Rec != nil {
				out[e.Key] = e.Rec.Recommendation
			}
		})
		return out
	}
	aggtest.Wait(t, "recommendations", time.Minute, func() bool { return len(recs(first)) > 0 })
	if err := first.Stop(); err != nil { // the last pass writes everything
		t.Fatal(err)
	}
	// What the replica held when it stopped (windows sent may still have
	// been folded after the first recommendation): its folding had ended
	// before its last checkpoint pass.
	want := recs(first)
	list, err := wr.List(ctx, metav1.ListOptions{LabelSelector: kube.LabelManagedBy + "=" + kube.ManagedBy})
	if err != nil {
		t.Fatal(err)
	}
	largest := 0
	for _, o := range list.Items {
		b, _ := o.MarshalJSON()
		largest = max(largest, len(b))
	}
	t.Logf("%d WorkloadRecommendations, the largest %d bytes", len(list.Items), largest)
	if largest > 64<<10 {
		t.Errorf("an object of %d bytes for a few containers", largest)
	}

	second := aggtest.Start(t, cfg)
	aggtest.Wait(t, "leading again", time.Minute, second.IsLeader)
	got := recs(second)
	for k, r := range want {
		if g, ok := got[k]; !ok || g.CPU.Target != r.CPU.Target || g.Memory.Target != r.Memory.Target {
			t.Errorf("%s: restored %+v, had %+v", k, got[k], r)
		}
	}
	// The corrupt container kept its entry without history.
	bad := report.Key{Workload: report.Workload{Namespace: "team-00", Kind: "Deployment", Name: "corrupt"}, Container: "c0"}
	found := false
	second.Store.Entries(func(e stateEntry) { found = found || (e.Key == bad && e.Samples == 0) })
	if !found {
		t.Error("the corrupt checkpoint's container is not in the store without history")
	}
}
