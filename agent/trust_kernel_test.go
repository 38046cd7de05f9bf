//go:build linux

package agent

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cgpilot/cgpilot/agent/rightsize"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/test/cgtest"
)

// trust_kernel_test.go: the whole agent on real cgroups (the OOM bed of
// oom_kernel_test.go) against what the "trust" issue's attackers do: a
// forged merged recommendation (a compromised node poisoning the
// aggregator), and an OOM kill loop (a tenant's container that never
// fits), and an API server that refuses the raise (a quota).

// TestAgentClampsForgedMerged: the aggregator's answer says 1,800 cores
// and 1.7 TB for a container whose policy allows at most 1 core and
// 512Mi. The agent asks pods/resize for 1 core and 512Mi (its limit at
// the spec's ratio), never more, and says why in a RightsizeClamped
// Event. Without the clamp it asked for 1,800 cores.
func TestAgentClampsForgedMerged(t *testing.T) {
	b := newBed(t, "counters", bedOptions{
		policy: map[string]any{"mode": "InPlace", "step": "1m",
			"cpu": map[string]any{"maxAllowed": "1"}, "memory": map[string]any{"maxAllowed": "512Mi"}},
		allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi")},
		setup:       withReporter,
	})
	uid, _, _ := b.pod(t, "victim")
	b.forge(t, uid, 1800, 1.7e12)

	var patch resizeBody
	waitFor(t, "a resize of the victim", 20*time.Second, func() bool {
		bodies := b.resizeBodies(t, "victim")
		if len(bodies) == 0 {
			return false
		}
		patch = bodies[0]
		return true
	})
	if len(patch.Spec.Containers) != 1 {
		t.Fatalf("patch %+v", patch)
	}
	res := patch.Spec.Containers[0].Resources
	cpu, mem, lim := res.Requests[corev1.ResourceCPU], res.Requests[corev1.ResourceMemory], res.Limits[corev1.ResourceMemory]
	if cpu.Cmp(resource.MustParse("1")) != 0 || mem.Cmp(resource.MustParse("512Mi")) != 0 || lim.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Fatalf("pods/resize asked cpu %s, memory %s, limit %s: want 1, 512Mi and 1Gi (the spec's ratio)", cpu.String(), mem.String(), lim.String())
	}
	t.Logf("forged 1800 cores / 1.7 TB; asked cpu %s, memory %s, limit %s", cpu.String(), mem.String(), lim.String())
	waitFor(t, "a RightsizeClamped event", 10*time.Second, func() bool { return countOf(b.eventReasons("victim"), "RightsizeClamped") > 0 })
	for _, e := range b.a.c.events.Recent("default", "victim") {
		if e.Reason == "RightsizeClamped" && !strings.Contains(e.Message, "PolicyMaxAllowed") {
			t.Errorf("clamp event does not name the bound: %q", e.Message)
		}
	}
}

// TestAgentClampsForgedMergedWithoutResize: the same forged answer where
// the cluster serves no pods/resize, so the agent writes the cgroups
// itself and no API server checks the values: the container's memory
// limit becomes 1Gi (512Mi at the spec's ratio), not 3 TiB, and on v1 its
// cpu.shares those of 1 core.
func TestAgentClampsForgedMergedWithoutResize(t *testing.T) {
	b := newBed(t, "counters", bedOptions{
		policy: map[string]any{"mode": "InPlace", "step": "1m",
			"cpu": map[string]any{"maxAllowed": "1"}, "memory": map[string]any{"maxAllowed": "512Mi"}},
		noResize: true,
		setup:    withReporter,
	})
	uid, _, ctrRel := b.pod(t, "victim")
	b.forge(t, uid, 1800, 1.7e12)
	waitFor(t, "the values written to the cgroups", 20*time.Second, func() bool { return b.stateOf(uid) == "Resize" && b.limit(t, ctrRel) != oomLimitMiB<<20 })
	if got := b.limit(t, ctrRel); got != 1<<30 {
		t.Fatalf("container memory limit %d, want 1Gi (the policy's 512Mi at the spec's ratio)", got)
	}
	if !b.k.SB.Unified {
		raw, err := os.ReadFile(filepath.Join(b.k.SB.Path(b.k.CPUKey, ctrRel), "cpu.shares"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(raw)); got != "1024" {
			t.Fatalf("cpu.shares %s, want 1024 (1 core)", got)
		}
	}
	if n := len(b.resizeBodies(t, "victim")); n != 0 {
		t.Fatalf("%d pods/resize requests where none is served", n)
	}
}

// TestOOMKillLoopCeiling: a container that never fits (it wants 1 GiB) is
// OOM-killed 16 times in a row, restarted in the same cgroup each time as
// the kubelet does. Its limit is raised at most maxOOMBumpsPerDay (3)
// times, never past the node's allocatable (100Mi here; the compounding
// used to reach 11 TiB after 10 kills and an unlimited limit after 16),
// and the later kills say why it is not raised.
func TestOOMKillLoopCeiling(t *testing.T) {
	const ceiling = 100 << 20
	b := newBed(t, "auto", bedOptions{
		policy:      map[string]any{"mode": "InPlace", "oomFactor": 0.2},
		allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: *resource.NewQuantity(ceiling, resource.BinarySI)},
	})
	// The Node's allocatable is read at the agent's start.
	waitFor(t, "the node's allocatable", 10*time.Second, func() bool {
		return b.a.c.rs.Allocatable().Memory == ceiling
	})
	_, podRel, ctrRel := b.pod(t, "loop")
	var limits []int64
	for kill := 1; kill <= 16; kill++ {
		before := b.limit(t, ctrRel)
		p := b.k.SB.Start(ctrRel, cgtest.Hog, 1024)
		exited, _ := p.Wait(10 * time.Second)
		if !exited || !p.Signaled(syscall.SIGKILL) {
			p.Kill()
			t.Fatalf("kill %d: the hog was not OOM-killed under %d MiB", kill, before>>20)
		}
		// The agent handles each kill before the next: the OOMKilled
		// events count them.
		waitFor(t, fmt.Sprintf("kill %d handled", kill), 10*time.Second, func() bool {
			return countOf(b.eventReasons("loop"), "OOMKilled") >= kill
		})
		waitFor(t, "the bump decided", 10*time.Second, func() bool {
			r := b.eventReasons("loop")
			return countOf(r, "MemoryRaised")+countOf(r, "MemoryNotRaised") >= kill
		})
		ctr, pod := b.limit(t, ctrRel), b.limit(t, podRel)
		limits = append(limits, ctr>>20)
		if ctr > ceiling || ctr <= 0 || pod > ceiling || pod <= 0 {
			t.Fatalf("kill %d: container limit %d, pod limit %d: above the node's allocatable %d (or unlimited)", kill, ctr, pod, int64(ceiling))
		}
	}
	reasons := b.eventReasons("loop")
	raised, notRaised := countOf(reasons, "MemoryRaised"), countOf(reasons, "MemoryNotRaised")
	t.Logf("16 kills: container limits (MiB) %v; %d raised, %d not raised", limits, raised, notRaised)
	if raised > 3 || raised == 0 || raised+notRaised != 16 {
		t.Fatalf("%d raises and %d refusals in 16 kills: want at most maxOOMBumpsPerDay (3) raises", raised, notRaised)
	}
	if last := limits[len(limits)-1]; last != ceiling>>20 {
		t.Errorf("the limit ends at %d MiB, want it held at the ceiling %d MiB", last, ceiling>>20)
	}
}

// TestOOMBumpsCountAcrossARestart: an agent restarted after a container's
// third raise of the day grants it no fourth. The bed starts on the state
// directory a previous agent left (three bumps of the container an hour
// ago, the default maxOOMBumpsPerDay); one real kill then gives a
// MemoryNotRaised Warning and the limit stays. Before the bump log, a
// restart forgot the bumps and raised again.
func TestOOMBumpsCountAcrossARestart(t *testing.T) {
	const name = "restarted"
	b := newBed(t, "auto", bedOptions{
		policy: map[string]any{"mode": "InPlace", "oomFactor": 0.2},
		setup: func(cfg *Config, _ *fake.Clientset) {
			before, _, err := rightsize.NewEngine(rightsize.EngineOptions{CheckpointDir: cfg.Rightsizing.StateDir})
			if err != nil {
				t.Fatal(err)
			}
			for i := 3; i > 0; i-- {
				at := time.Now().Add(-time.Duration(i) * time.Hour)
				if err := before.RecordBump(string(bedUID(name))+"/app", at, rightsize.OOMWindow); err != nil {
					t.Fatal(err)
				}
			}
		},
	})
	_, podRel, ctrRel := b.pod(t, name)
	p := b.k.SB.Start(ctrRel, cgtest.Hog, 1024)
	if exited, _ := p.Wait(10 * time.Second); !exited || !p.Signaled(syscall.SIGKILL) {
		p.Kill()
		t.Fatalf("the hog was not OOM-killed under %d MiB", oomLimitMiB)
	}
	waitFor(t, "the kill handled", 10*time.Second, func() bool {
		r := b.eventReasons(name)
		return countOf(r, "MemoryRaised")+countOf(r, "MemoryNotRaised") >= 1
	})
	var msg string
	for _, e := range b.a.c.events.Recent("default", name) {
		if e.Reason == "MemoryRaised" {
			t.Fatalf("a fourth raise in a day after a restart: %s", e.Message)
		}
		if e.Reason == "MemoryNotRaised" {
			msg = e.Message
		}
	}
	if !strings.Contains(msg, "3 bump(s)") {
		t.Fatalf("MemoryNotRaised says %q, want it to count the 3 bumps before the restart", msg)
	}
	if ctr, pod := b.limit(t, ctrRel), b.limit(t, podRel); ctr != oomLimitMiB<<20 || pod != oomLimitMiB<<20 {
		t.Fatalf("limits container %d, pod %d: want the spec's %d MiB", ctr, pod, oomLimitMiB)
	}
}

// TestOOMBumpRefusedGoesBack: the API server refuses the durable half of
// an OOM bump (pods/resize forbidden, as a quota refuses it). The raise
// does not stay in the cgroups behind the API's back: container and pod
// go back to the spec's 40Mi, with a MemoryRaiseRefused Warning saying
// why; the next kill's raise stays below the refused limit.
func TestOOMBumpRefusedGoesBack(t *testing.T) {
	b := newBed(t, "counters", bedOptions{setup: func(_ *Config, cs *fake.Clientset) {
		cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "resize" {
				return false, nil, nil
			}
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "quota-victim", fmt.Errorf("exceeded quota: compute, requested: limits.memory"))
		})
	}})
	_, podRel, ctrRel := b.pod(t, "quota-victim")
	for kill := 1; kill <= 2; kill++ {
		p := b.k.SB.Start(ctrRel, cgtest.Hog, 1024)
		if exited, _ := p.Wait(10 * time.Second); !exited {
			p.Kill()
			t.Fatal("the hog was not OOM-killed")
		}
		waitFor(t, "the refusal handled", 15*time.Second, func() bool {
			return countOf(b.eventReasons("quota-victim"), "MemoryRaiseRefused") >= kill
		})
		waitFor(t, "the cgroups back at the spec's limit", 10*time.Second, func() bool {
			return b.limit(t, ctrRel) == oomLimitMiB<<20 && b.limit(t, podRel) == oomLimitMiB<<20
		})
	}
	bodies := b.resizeBodies(t, "quota-victim")
	if len(bodies) < 2 {
		t.Fatalf("%d resize requests, want one per kill", len(bodies))
	}
	first := bodies[0].Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
	second := bodies[1].Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
	if second.Cmp(first) >= 0 {
		t.Errorf("the second raise asked %s, not below the refused %s", second.String(), first.String())
	}
	// The first write back may come before the killed process's memory
	// is released (the cgroup package refuses a limit below usage): then
	// the sweep writes it, and says so.
	later := 0
	for _, e := range b.a.c.events.Recent("default", "quota-victim") {
		if e.Reason != "MemoryRaiseRefused" {
			continue
		}
		if !strings.Contains(e.Message, "exceeded quota") || !(strings.Contains(e.Message, "back at the spec") || strings.Contains(e.Message, "retried at each sweep")) {
			t.Errorf("event does not say why: %q", e.Message)
		}
		if strings.Contains(e.Message, "retried at each sweep") {
			later++
		}
	}
	if n := countOf(b.eventReasons("quota-victim"), "MemoryRaiseReverted"); (later > 0) != (n > 0) {
		t.Errorf("%d reverts left to the sweep, %d MemoryRaiseReverted events", later, n)
	}
	t.Logf("raises asked: %s then %s; both refused and set back to %d MiB", first.String(), second.String(), oomLimitMiB)
}

// forge stores a merged recommendation for pod uid's container "app" as
// the aggregator's answer, and makes the agent decide at once.
func (b *oomBed) forge(t testing.TB, uid types.UID, cpu, mem float64) {
	t.Helper()
	r := b.a.c.rs
	key, ok := r.ContainerKey(string(uid), "app")
	if !ok {
		t.Fatal("the pod is not tracked")
	}
	preset := ""
	for _, p := range r.Presets() {
		preset = p
	}
	w := &report.WorkloadRecommendation{Preset: preset, Nodes: 2, Samples: 1 << 20, FreshUntil: time.Now().Add(time.Hour),
		Recommendation: report.Recommendation{CPU: report.Estimate{Target: cpu}, Memory: report.Estimate{Target: mem}}}
	r.Reporter().UseMerged(time.Now(), map[string]*report.WorkloadRecommendation{key: w})
	r.Redecide()
}

// annotate sets annotations on pod name in the (fake) API server.
func (b *oomBed) annotate(t testing.TB, name string, ann map[string]string) {
	t.Helper()
	ctx := context.Background()
	p, err := b.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	maps.Copy(p.Annotations, ann)
	if _, err := b.cs.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// stateOf is the right-sizing state of pod uid.
func (b *oomBed) stateOf(uid types.UID) string {
	return b.a.c.rs.State(string(uid))
}

// withReporter gives the agent a reporter that talks to no one: its
// answer is the one forge stores (a failed fetch keeps the last).
func withReporter(cfg *Config, _ *fake.Clientset) {
	cfg.Aggregator.URL = "https://127.0.0.1:1"
	cfg.Aggregator.TokenFile = "/nonexistent/cgpilot-test-token"
}

// TestAgentPodAnnotationsCannotWiden: a tenant annotates its pod of a
// DryRun policy with cgpilot.io/resize: in-place and a target saturation
// of 1e-300. The agent refuses both with a RightsizeAnnotationRefused
// Warning naming them, stays in DryRun and asks pods/resize nothing.
func TestAgentPodAnnotationsCannotWiden(t *testing.T) {
	b := newBed(t, "counters", bedOptions{policy: map[string]any{"mode": "DryRun", "step": "1m"}, setup: withReporter})
	uid, _, _ := b.pod(t, "tenant")
	b.annotate(t, "tenant", map[string]string{"cgpilot.io/resize": "in-place", "cgpilot.io/target-saturation": "1e-300"})
	waitFor(t, "the annotations seen", 10*time.Second, func() bool {
		p := b.a.c.PodByUID(string(uid))
		return p != nil && p.Annotations["cgpilot.io/resize"] == "in-place"
	})
	b.forge(t, uid, 0.5, 64<<20)
	waitFor(t, "a RightsizeAnnotationRefused warning", 15*time.Second, func() bool {
		return countOf(b.eventReasons("tenant"), "RightsizeAnnotationRefused") > 0
	})
	for _, e := range b.a.c.events.Recent("default", "tenant") {
		if e.Reason == "RightsizeAnnotationRefused" && (!strings.Contains(e.Message, "cgpilot.io/resize") || !strings.Contains(e.Message, "cgpilot.io/target-saturation")) {
			t.Errorf("the warning does not name both annotations: %q", e.Message)
		}
	}
	waitFor(t, "a DryRun decision", 10*time.Second, func() bool { return b.stateOf(uid) == "DryRun" })
	time.Sleep(3 * time.Second) // three more decision rounds
	if n := len(b.resizeBodies(t, "tenant")); n != 0 || b.stateOf(uid) != "DryRun" {
		t.Fatalf("%d resizes, state %s: an annotation widened a DryRun policy", n, b.stateOf(uid))
	}
}

// TestAgentResizesOncePerStep: a pod resized under a 1 h step changes its
// annotations (which makes the agent decide at once) while the
// recommendation moves: no second resize within the step, state StepWait.
func TestAgentResizesOncePerStep(t *testing.T) {
	b := newBed(t, "counters", bedOptions{policy: map[string]any{"mode": "InPlace", "step": "1h"}, setup: withReporter})
	uid, _, _ := b.pod(t, "churner")
	b.forge(t, uid, 0.5, 64<<20)
	waitFor(t, "the first resize", 15*time.Second, func() bool { return len(b.resizeBodies(t, "churner")) == 1 })
	for i := range 3 {
		b.forge(t, uid, 0.7+0.2*float64(i), 64<<20)
		b.annotate(t, "churner", map[string]string{"tenant/poke": fmt.Sprint(i), "cgpilot.io/resize-paused-until": "2000-01-01T00:00:00Z"})
		time.Sleep(1500 * time.Millisecond)
	}
	if n := len(b.resizeBodies(t, "churner")); n != 1 {
		t.Fatalf("%d resizes within one step", n)
	}
	if st := b.stateOf(uid); st != "StepWait" {
		t.Fatalf("state %s, want StepWait", st)
	}
}
