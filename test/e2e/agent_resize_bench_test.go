//go:build linux

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgpilot/cgpilot/cgroup"
)

// BenchmarkNodeResizeToCgroup measures, on the real node, a changed
// recommendation reaching the container's cgroup through the agent: the
// RightsizePolicy's CPU floor (minAllowed) flips between 100m and 400m
// (each flip changes the recommendation of a pod that uses almost no CPU,
// by more than the recommender's hysteresis),
// then the time to the request in the pod's spec (pods/resize accepted)
// and to cpu.shares in the container's cgroup (the kubelet applied it).
// The baseline, interleaved in the same run on a pod no policy selects, is
// the test itself sending the same pods/resize: the ratio is what the
// agent's path (informer, decision, patch, verification) adds to the
// kubelet's own. Run with -benchtime=10x or more.
func BenchmarkNodeResizeToCgroup(b *testing.B) {
	bd := startRightsizeNode(b)
	ctx := context.Background()
	floor := func(cpu string) map[string]any {
		return map[string]any{"mode": "InPlace", "step": "1s", "minHistory": "2s", "maxChangePerStep": 1.0,
			"cpu":         map[string]any{"minAllowed": cpu},
			"podSelector": map[string]any{"matchLabels": map[string]any{"app": "bench"}}}
	}
	bd.policy(b, "bench", floor("100m"))
	for _, p := range []*corev1.Pod{
		busyboxPod("bench", map[string]string{"app": "bench"}, "exec sleep 3600", rl("200m", "128Mi"), rl("400m", "256Mi")),
		busyboxPod("base", map[string]string{"app": "base"}, "exec sleep 3600", rl("200m", "128Mi"), rl("400m", "256Mi")),
	} {
		p.Spec.NodeName = bd.node.Name()
		if _, err := bd.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// The agent's first decision takes bench to the 100m floor.
	within(b, 3*time.Minute, "bench at its 100m floor", func() (bool, string) {
		p := bd.pod(b, "bench")
		rec := recommendationOf(p)
		return milli(p.Spec.Containers[0].Resources.Requests, corev1.ResourceCPU) == 100 && rec.State == "Applied", rec.State + ": " + rec.Reason
	})
	shares := func(name string) func() int64 {
		p := bd.pod(b, name)
		path, ok := bd.containerCgroup(b, p)
		if !ok {
			b.Fatalf("%s has no container", name)
		}
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
		deadline := t0.Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if spec == 0 {
				if p := bd.pod(b, name); milli(p.Spec.Containers[0].Resources.Requests, corev1.ResourceCPU) == cpu {
					spec = time.Since(t0)
				}
			}
			if read() == want {
				cg = time.Since(t0)
				if spec == 0 {
					spec = cg
				}
				return spec, cg
			}
			time.Sleep(2 * time.Millisecond)
		}
		p := bd.pod(b, name)
		b.Fatalf("%s: cpu.shares %d, want %d for %dm after 60s; spec %v; recommendation %s", name, read(), want, cpu,
			p.Spec.Containers[0].Resources.Requests, p.Annotations["cgpilot.io/recommendation"])
		return 0, 0
	}
	var agentSpec, agentCg, baseSpec, baseCg []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cpu := int64(400)
		if i%2 == 1 {
			cpu = 100
		}
		// The agent's path: the recommendation changes.
		t0 := time.Now()
		bd.setPolicy(b, "bench", floor(fmt.Sprintf("%dm", cpu)))
		s, c := await("bench", benchShares, cpu, t0)
		agentSpec, agentCg = append(agentSpec, s), append(agentCg, c)
		// The baseline: the same resize sent directly.
		patch := fmt.Sprintf(`{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"%dm"}}}]}}`, cpu)
		t0 = time.Now()
		if _, err := bd.cs.CoreV1().Pods("default").Patch(ctx, "base", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
			b.Fatal(err)
		}
		s, c = await("base", baseShares, cpu, t0)
		baseSpec, baseCg = append(baseSpec, s), append(baseCg, c)
	}
	b.StopTimer()
	b.ReportMetric(percentile(agentSpec, 0.5), "agent-accepted-p50-ms")
	b.ReportMetric(percentile(agentCg, 0.5), "agent-cgroup-p50-ms")
	b.ReportMetric(percentile(agentCg, 0.99), "agent-cgroup-p99-ms")
	b.ReportMetric(percentile(baseCg, 0.5), "direct-cgroup-p50-ms")
	b.ReportMetric(percentile(baseCg, 0.99), "direct-cgroup-p99-ms")
	b.ReportMetric(percentile(agentCg, 0.5)/percentile(baseCg, 0.5), "agent/direct-p50")
	if p := bd.pod(b, "bench"); p.Status.ContainerStatuses[0].RestartCount != 0 {
		b.Fatalf("bench restarted %d times", p.Status.ContainerStatuses[0].RestartCount)
	}
}

// setPolicy replaces a RightsizePolicy's spec.
func (b *rsBed) setPolicy(t testing.TB, name string, spec map[string]any) {
	t.Helper()
	u, err := b.dyn.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.Object["spec"] = spec
	if _, err := b.dyn.Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
