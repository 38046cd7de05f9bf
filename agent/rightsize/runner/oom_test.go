//go:build linux

package runner

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cgpilot/cgpilot/agent/rightsize"
)

// oomBenchPod tracks a pod of n containers (app, side-1, ...) with
// requests, limits and last samples, as a kill finds it.
func oomBenchPod(tb testing.TB, r *Runner, n int) *corev1.Pod {
	tb.Helper()
	p := r.addPod(tb, "hog")
	p = p.DeepCopy()
	p.Spec.Containers = nil
	ctrs := map[string]rsContainer{}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range n {
		name := "app"
		if i > 0 {
			name = fmt.Sprintf("side-%d", i)
		}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name,
			Resources: corev1.ResourceRequirements{Requests: rlist("100m", "256Mi"), Limits: rlist("1", "512Mi")}})
		id := "ctr-" + name
		ctrs[name] = rsContainer{id: id, memDir: "/sys/fs/cgroup/memory/kubepods/pod" + string(p.UID) + "/" + id}
		r.last[id] = lastSample{usage: 500 << 20, workingSet: 400 << 20}
	}
	r.pods[string(p.UID)].containers = ctrs
	if err := r.host.(*fakeHost).idx.Update(p); err != nil {
		tb.Fatal(err)
	}
	return p
}

// oomBenchPolicy bumps by 20 % up to three times a day.
func oomBenchPolicy(tb testing.TB) *rightsize.Policy {
	f := 0.2
	pol := &rightsize.Policy{Name: "web", Mode: rightsize.ModeInPlace, OOMFactor: &f, MaxOOMBumpsPerDay: 3}
	if err := pol.Check(); err != nil {
		tb.Fatal(err)
	}
	return pol
}

// BenchmarkOOMInput is what onOOM does between finding a kill's container
// and its cgroup write, in a pod of four containers: the input built from
// the tracked pod, the container's usage, and rightsize.OOMBump.
func BenchmarkOOMInput(b *testing.B) {
	r, _ := unitRightsizer(b)
	p := oomBenchPod(b, r, 4)
	pol := oomBenchPolicy(b)
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		in, _, ok := r.input(p, now)
		if !ok {
			b.Fatal("the pod is not tracked")
		}
		var c rightsize.Container
		for _, x := range in.Containers {
			if x.Name == "app" {
				c = x
			}
		}
		usage := max(c.Spec.Limits.Memory, c.Usage)
		if _, _, why := rightsize.OOMBump(in, pol, "app", usage, 1, 0); why != "" {
			b.Fatal(why)
		}
	}
}
