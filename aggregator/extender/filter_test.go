package extender

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/api/report"
)

// TestFilter: a node whose pods' 7-day peaks leave no room for the pod's
// peak under the watermark is filtered with its reason although its
// current usage and the pod's requests are low; a node with room passes;
// a node without a fresh load passes (fail-open); a follower passes all.
func TestFilter(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	p := profile.New(profile.Config{})
	peaky := report.Workload{Namespace: "shop", Kind: report.KindDeployment, Name: "peaky"}
	api := report.Workload{Namespace: "shop", Kind: report.KindDeployment, Name: "api"}
	send := func(node string, end time.Time, cs ...report.Container) {
		p.Observe(&report.Decoded{Report: report.Report{Node: node, WindowEnd: end, Usage: report.NodeUsage{
			CPUAllocatable: 4, CPUUsage: 0.5, MemoryAllocatable: 8 << 30, MemoryUsage: 1 << 30}, Containers: cs}}, end)
	}
	c := func(w report.Workload, pods int, cpu, mem float64) report.Container {
		return report.Container{Key: report.Key{Workload: w, Container: "c"}, Pods: pods, UsageCPU: cpu, UsageMemory: mem}
	}
	// Yesterday peaky's 2 pods used 1.5 cores each on "peaky-node"; today
	// they idle. api's pods peak at 0.4 cores.
	yday := now.Add(-24 * time.Hour)
	send("peaky-node", yday, c(peaky, 2, 3.0, 1<<30))
	send("roomy-node", yday, c(api, 1, 0.4, 256<<20))
	p.Close(yday.Add(5 * time.Minute))
	send("peaky-node", now, c(peaky, 2, 0.1, 1<<30))
	send("roomy-node", now, c(api, 1, 0.1, 256<<20))
	send("stale-node", now.Add(-time.Hour), c(report.Workload{Namespace: "shop", Kind: report.KindDeployment, Name: "old"}, 2, 3.5, 1<<30))
	p.Close(now.Add(5 * time.Minute))
	p.RefreshLoads(now)

	reg := prometheus.NewRegistry()
	f := NewFilter(p, profile.Rule{CPU: 0.8, Memory: 0.9}, reg)
	f.Now = func() time.Time { return now }
	srv := httptest.NewServer(f)
	defer srv.Close()
	names := []string{"peaky-node", "roomy-node", "stale-node", "never-reported"}
	ask := func(pod *corev1.Pod, byName bool) extenderv1.ExtenderFilterResult {
		t.Helper()
		args := extenderv1.ExtenderArgs{Pod: pod}
		if byName {
			args.NodeNames = &names
		} else {
			args.Nodes = &corev1.NodeList{}
			for _, n := range names {
				args.Nodes.Items = append(args.Nodes.Items, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
			}
		}
		body, _ := json.Marshal(args)
		resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out extenderv1.ExtenderFilterResult
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	yes := true
	// A new pod of api (peak 0.4 cores): peaky-node holds 2 × 1.5 = 3.0
	// cores of peaks; 3.4 > 0.8 × 4. Its requests (100m) would fit.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", GenerateName: "api-7c9-", Labels: map[string]string{"pod-template-hash": "7c9"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "api-7c9", Controller: &yes}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}}}}
	for _, byName := range []bool{true, false} {
		res := ask(pod, byName)
		var kept []string
		if byName {
			kept = *res.NodeNames
		} else {
			for _, n := range res.Nodes.Items {
				kept = append(kept, n.Name)
			}
		}
		if strings.Join(kept, ",") != "roomy-node,stale-node,never-reported" {
			t.Errorf("by name %v: kept %v", byName, kept)
		}
		why := res.FailedAndUnresolvableNodes["peaky-node"]
		if len(res.FailedAndUnresolvableNodes) != 1 || !strings.Contains(why, "7-day cpu peaks") || !strings.Contains(why, "pass 0.80 of") {
			t.Errorf("by name %v: failed %v", byName, res.FailedAndUnresolvableNodes)
		}
		if res.Error != "" {
			t.Errorf("error %q", res.Error)
		}
	}
	// A pod of an unknown workload goes by its requests: 0.1 core fits
	// under 3.2 with 3.0 there; 0.3 does not.
	bare := func(cpu string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "x"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}}}
	}
	if res := ask(bare("100m"), true); len(*res.NodeNames) != 4 {
		t.Errorf("small unknown pod: %+v", res)
	}
	if res := ask(bare("300m"), true); len(*res.NodeNames) != 3 {
		t.Errorf("larger unknown pod: %+v", res)
	}
	if got := testutil.ToFloat64(f.verdicts.WithLabelValues("unknown")); got != 8 {
		t.Errorf("unknown verdicts %v, want 2 per call", got)
	}
	// A follower passes every node.
	f.Leader = func() bool { return false }
	if res := ask(pod, true); len(*res.NodeNames) != 4 || len(res.FailedAndUnresolvableNodes) != 0 {
		t.Errorf("follower: %+v", res)
	}
	resp, _ := http.Post(srv.URL, "application/json", strings.NewReader(`{"pod":`))
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad body: %d", resp.StatusCode)
	}
}
