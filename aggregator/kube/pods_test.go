package kube

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgpilot/cgpilot/api/report"
)

func ptrTrue() *bool { b := true; return &b }

// pod is a pod of the given controller (kind "" for a bare pod) on node.
func pod(ns, name, node, ownerKind, ownerName string, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name), Labels: labels},
		Spec: corev1.PodSpec{NodeName: node}}
	if ownerKind != "" {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: ownerKind, Name: ownerName, Controller: ptrTrue()}}
	}
	return p
}

// The list and watch through client-go's Reflector are tested against a
// real API server in test/e2e (TestAggregatorTrustsNodesOnlyForTheirPods);
// this checks the store's answers.
func TestPodsBound(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	p := newPods(nil)
	p.Now = func() time.Time { return now }
	lookups := 0
	p.Parent = func(_ context.Context, ns, kind, name string) (*report.Owner, bool) {
		lookups++
		if ns == "shop" && kind == report.KindReplicaSet && name == "api-5c7d" {
			return &report.Owner{Kind: "Rollout", Name: "api"}, true
		}
		return nil, true
	}
	s := &podStore{p}
	hash := map[string]string{"pod-template-hash": "7d9f5", "app": "web"}
	list := []any{
		slim(pod("shop", "web-7d9f5-a", "n1", "ReplicaSet", "web-7d9f5", hash)),
		slim(pod("shop", "web-7d9f5-b", "n1", "ReplicaSet", "web-7d9f5", hash)),
		slim(pod("shop", "api-5c7d-x", "n1", "ReplicaSet", "api-5c7d", map[string]string{"rollouts-pod-template-hash": "5c7d"})),
		slim(pod("batch", "nightly-29000000-q", "n2", "Job", "nightly-29000000", nil)),
		slim(pod("db", "pg-0", "n2", "StatefulSet", "pg", nil)),
		slim(pod("shop", "debug", "n1", "", "", nil)),
		slim(pod("shop", "pending", "", "ReplicaSet", "web-7d9f5", hash)),
	}
	if err := s.Replace(list, "1"); err != nil {
		t.Fatal(err)
	}
	if !p.Synced() {
		t.Fatal("not synced after the list")
	}
	ctx := context.Background()
	w := func(ns, kind, name string) report.Workload {
		return report.Workload{Namespace: ns, Kind: kind, Name: name}
	}
	web := w("shop", report.KindDeployment, "web")
	for _, tc := range []struct {
		node string
		w    report.Workload
		want int
	}{
		{"n1", web, 2},
		{"n1", w("shop", report.KindReplicaSet, "web-7d9f5"), 2},
		{"n2", web, 0},
		{"n2", w("batch", report.KindCronJob, "nightly"), 1},
		{"n2", w("batch", report.KindJob, "nightly-29000000"), 1},
		{"n2", w("db", report.KindStatefulSet, "pg"), 1},
		{"n1", w("shop", report.KindPod, "debug"), 1},
		{"n1", w("shop", "Rollout", "api"), 1}, // through the ReplicaSet's owner
		{"n1", w("other", report.KindDeployment, "web"), 0},
		{"n3", web, 0},
	} {
		if got := p.Bound(ctx, tc.node, tc.w, now); got != tc.want {
			t.Errorf("Bound(%s, %s) = %d, want %d", tc.node, tc.w, got, tc.want)
		}
	}
	before := lookups
	p.Bound(ctx, "n1", w("shop", "Rollout", "api"), now)
	p.Bound(ctx, "n1", w("shop", "Rollout", "nope"), now)
	if lookups != before {
		t.Errorf("owners looked up again: %d lookups", lookups-before)
	}
	if !p.PodOn(ctx, "n1", "shop", "web-7d9f5-a", web, now) || p.PodOn(ctx, "n2", "shop", "web-7d9f5-a", web, now) ||
		p.PodOn(ctx, "n1", "shop", "debug", web, now) || !p.PodOn(ctx, "n1", "shop", "api-5c7d-x", w("shop", "Rollout", "api"), now) {
		t.Error("PodOn answers wrong")
	}
	if l := p.Labels(web); l["app"] != "web" {
		t.Errorf("labels of web: %v", l)
	}
	// A deleted pod still counts for windows that began before it went,
	// for Retention.
	now = now.Add(time.Minute)
	if err := s.Delete(slim(pod("shop", "web-7d9f5-a", "n1", "ReplicaSet", "web-7d9f5", hash))); err != nil {
		t.Fatal(err)
	}
	if got := p.Bound(ctx, "n1", web, now.Add(-time.Minute)); got != 2 {
		t.Errorf("a window before the deletion: %d pods, want 2", got)
	}
	if got := p.Bound(ctx, "n1", web, now.Add(time.Second)); got != 1 {
		t.Errorf("a window after the deletion: %d pods, want 1", got)
	}
	if !p.PodOn(ctx, "n1", "shop", "web-7d9f5-a", web, now.Add(-time.Minute)) {
		t.Error("the deleted pod's OOM kill of before its deletion is refused")
	}
	// A re-list without the bare pod: gone (with a tombstone).
	if err := s.Replace(list[:5], "2"); err != nil {
		t.Fatal(err)
	}
	if got := p.Bound(ctx, "n1", w("shop", report.KindPod, "debug"), now.Add(time.Second)); got != 0 {
		t.Errorf("a pod missing from a re-list still counts: %d", got)
	}
	// Tombstones expire; workloads no pod counts for are forgotten.
	now = now.Add(2 * time.Hour)
	p.mu.Lock()
	for _, n := range p.nodes {
		p.pruneLocked(n, now.Add(-p.retention()))
	}
	p.mu.Unlock()
	if st := p.Stats(); st.Tombstones != 0 || st.Pods != 5 {
		t.Errorf("after the retention: %+v", st)
	}
	for _, gone := range []report.Workload{w("shop", report.KindPod, "debug")} {
		if _, ok := p.wlIndex[gone]; ok {
			t.Errorf("%s still indexed", gone)
		}
	}
}

func TestPodsConcurrent(t *testing.T) {
	p := newPods(nil)
	s := &podStore{p}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				sp := slim(pod("ns", fmt.Sprintf("p-%d-%d", g, i%50), fmt.Sprint("n", i%3), "ReplicaSet", "web-abc", map[string]string{"pod-template-hash": "abc"}))
				if i%3 == 0 {
					_ = s.Delete(sp)
				} else {
					_ = s.Add(sp)
				}
				p.Bound(context.Background(), "n1", report.Workload{Namespace: "ns", Kind: report.KindDeployment, Name: "web"}, time.Time{})
			}
		}()
	}
	wg.Wait()
	p.mu.RLock()
	defer p.mu.RUnlock()
	live := 0
	for _, n := range p.nodes {
		for i, c := range n.live {
			if c <= 0 || p.workloads[i].refs <= 0 {
				t.Errorf("node %s: workload %d count %d refs %d", n.name, i, c, p.workloads[i].refs)
			}
			live += int(c)
		}
	}
	if live != 2*len(p.pods) { // each pod counts for its ReplicaSet and Deployment
		t.Errorf("%d live counts for %d pods", live, len(p.pods))
	}
}

var benchPods = flag.Int("pods", 100_000, "pods in BenchmarkPodsMemory (500000: the aggregator's load-generator scale, 5,000 nodes × 100)")

// fleetPods is n pods of a synthetic cluster like test/aggtest's fleet:
// 100 pods a node, Deployments of 1-40 replicas in 20 namespaces.
func fleetPods(n int) []*corev1.Pod {
	out := make([]*corev1.Pod, 0, n)
	for i, wl := 0, 0; len(out) < n; wl++ {
		replicas := 1 + wl%40
		ns := fmt.Sprintf("team-%02d", wl%20)
		name := fmt.Sprintf("svc-%d", wl)
		hash := fmt.Sprintf("%08x", (wl*2654435761)%(1<<32))
		labels := map[string]string{"app": name, "pod-template-hash": hash, "team": ns}
		for r := 0; r < replicas && len(out) < n; r++ {
			// Each decoded pod has labels of its own.
			own := make(map[string]string, len(labels))
			for k, v := range labels {
				own[k] = v
			}
			p := pod(ns, fmt.Sprintf("%s-%s-%05d", name, hash, r), fmt.Sprintf("node-%05d", i/100), "ReplicaSet", name+"-"+hash, own)
			p.ResourceVersion = fmt.Sprint(i)
			p.OwnerReferences[0].APIVersion, p.OwnerReferences[0].UID = "apps/v1", types.UID(fmt.Sprintf("rs-%d", wl))
			out = append(out, p)
			i++
		}
	}
	return out
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkPodsMemory measures the pod cache's heap per pod, against the
// baseline of the same pods kept as an informer keeps them when trimmed
// by a transform to what the cache needs (a *corev1.Pod with names, node,
// owner and labels). go test ./aggregator/kube -run '^$' -bench PodsMemory
// -pods 500000 for the load generator's scale.
func BenchmarkPodsMemory(b *testing.B) {
	pods := fleetPods(*benchPods)
	for range b.N {
		base := heapInUse()
		trimmed := make(map[string]*corev1.Pod, len(pods))
		for _, p := range pods {
			t := &corev1.Pod{}
			t.Name, t.Namespace, t.UID, t.ResourceVersion, t.Labels = p.Name, p.Namespace, p.UID, p.ResourceVersion, p.Labels
			t.OwnerReferences, t.Spec.NodeName = p.OwnerReferences, p.Spec.NodeName
			trimmed[p.Namespace+"/"+p.Name] = t
		}
		informer := heapInUse() - base
		runtime.KeepAlive(trimmed)
		trimmed = nil
		base = heapInUse()
		c := newPods(nil)
		s := &podStore{c}
		// A list in pages of 500, as the Reflector hands them over.
		for i := 0; i < len(pods); i += 500 {
			for _, p := range pods[i:min(i+500, len(pods))] {
				_ = s.Add(slim(p))
			}
		}
		cache := heapInUse() - base
		runtime.KeepAlive(c)
		b.ReportMetric(float64(cache)/float64(len(pods)), "B/pod")
		b.ReportMetric(float64(informer)/float64(len(pods)), "informer-B/pod")
		b.ReportMetric(float64(cache)/float64(informer), "ratio")
		b.ReportMetric(float64(cache)/(1<<20), "MiB")
	}
}
