package rightsize

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/api/v1alpha1"
	apipolicy "github.com/cgpilot/cgpilot/api/v1alpha1/policy"
	"github.com/cgpilot/cgpilot/recommend"
)

// trust_test.go: what a compromised node (through the aggregator's merged
// recommendation) and a tenant (through its pods' annotations) can make
// a step decision do: never more than the policy, the namespace and the
// node allow (issue "trust", items 1 and 2).

// forged is a merged recommendation as a forged report made it: 1,800
// cores and 1.7 TB.
func forged(pol *Policy) *Merged {
	return &Merged{Preset: pol.Preset, CPU: recommend.Estimate{Target: 1800}, Memory: recommend.Estimate{Target: 1.7e12}, Nodes: 2, History: 48 * time.Hour}
}

// TestDecideClampsForgedMerged: a forged merged recommendation of 1,800
// cores under a policy whose maxAllowed is 1 core / 512Mi is applied as 1
// core / 512Mi, and the decision says which bound held it. Without the
// clamp the agent applied 1,800 cores.
func TestDecideClampsForgedMerged(t *testing.T) {
	now := t0.Add(6 * time.Hour)
	e := fed(t, "ns/Deployment/web/app", 0.2, 150*mib, 6*time.Hour)
	one, half := 1.0, 512.0*mib
	pol := policy(t, func(p *Policy) { p.Overrides.CPU.MaxAllowed, p.Overrides.Memory.MaxAllowed = &one, &half })
	c := burstable(0.5, 1, 256*mib, 512*mib)
	c.Merged = forged(pol)
	d := Decide(e, Pod{QoS: "Burstable", Containers: []Container{c}, Policies: []*Policy{pol}}, now)
	if !d.Apply {
		t.Fatalf("state %s (%s): want a resize within the bounds", d.State, d.Why)
	}
	to := d.Containers[0].To
	if to.Requests.CPU != 1 || to.Requests.Memory != half {
		t.Fatalf("requests %v cores / %v MiB, want 1 core / 512 MiB (the policy's maxAllowed)", to.Requests.CPU, to.Requests.Memory/mib)
	}
	// KeepRatio: the limits keep the spec's ratio to the clamped requests.
	if to.Limits.CPU != 2 || to.Limits.Memory != 2*half {
		t.Fatalf("limits %v cores / %v MiB, want 2 / 1024 (the spec's ratio)", to.Limits.CPU, to.Limits.Memory/mib)
	}
	reasons := map[apipolicy.Reason]int{}
	for _, b := range d.Clamped {
		reasons[b.Reason]++
	}
	if reasons[apipolicy.ReasonPolicyMax] != 4 || !strings.Contains(d.Why, "clamped") || !strings.Contains(d.Why, "PolicyMaxAllowed") {
		t.Fatalf("bindings %v, why %q: want the policy's max named", d.Clamped, d.Why)
	}
	if n := d.Containers[0].CPUNote; n != NoteClamped+string(apipolicy.ReasonPolicyMax) {
		t.Fatalf("cpu note %q", n)
	}
}

// TestDecideClampsToNamespaceAndNode: without policy bounds, the
// namespace's LimitRange max bounds each container and the node's
// allocatable the pod's requests together; a forged low target never
// takes memory below usage.
func TestDecideClampsToNamespaceAndNode(t *testing.T) {
	now := t0.Add(6 * time.Hour)
	e := fed(t, "ns/Deployment/web/app", 0.2, 150*mib, 6*time.Hour)
	pol := policy(t, nil)
	t.Run("LimitRange max", func(t *testing.T) {
		two, twoGi := 2.0, 2.0*(1<<30)
		pol := policy(t, func(p *Policy) { p.Overrides.CPU.MaxAllowed, p.Overrides.Memory.MaxAllowed = &two, &twoGi })
		c := burstable(0.5, 1, 256*mib, 512*mib)
		c.Merged = forged(pol)
		lr := apipolicy.LimitRange{Max: apipolicy.Values{CPU: 3, Memory: 3 << 30}}
		d := Decide(e, Pod{QoS: "Burstable", Containers: []Container{c}, Policies: []*Policy{pol}, LimitRange: lr}, now)
		to := d.Containers[0].To
		if !d.Apply || to.Requests.CPU != 2 || to.Limits.CPU != 3 || to.Requests.Memory != twoGi || to.Limits.Memory != 3<<30 {
			t.Fatalf("%s (%s): %+v, want requests at the policy's max, limits at the LimitRange's", d.State, d.Why, to)
		}
	})
	t.Run("clamped into another QoS class: nothing changes", func(t *testing.T) {
		c := burstable(0.5, 1, 256*mib, 512*mib)
		c.Merged = forged(pol)
		lr := apipolicy.LimitRange{Max: apipolicy.Values{CPU: 4, Memory: 8 << 30}}
		d := Decide(e, Pod{QoS: "Burstable", Containers: []Container{c}, Policies: []*Policy{pol}, LimitRange: lr}, now)
		if d.Apply || d.Containers[0].To != c.Spec || !strings.Contains(d.Why, "QoS") {
			t.Fatalf("%s (%s): %+v", d.State, d.Why, d.Containers[0].To)
		}
	})
	t.Run("node allocatable, pod total", func(t *testing.T) {
		a, b := burstable(0.5, 0, 256*mib, 0), burstable(0.5, 0, 256*mib, 0)
		b.Name = "side"
		a.Merged, b.Merged = forged(pol), forged(pol)
		d := Decide(e, Pod{QoS: "Burstable", Containers: []Container{a, b}, Policies: []*Policy{pol}, Allocatable: Resources{CPU: 8, Memory: 32 << 30}}, now)
		sumCPU, sumMem := 0.0, 0.0
		for _, cd := range d.Containers {
			sumCPU += cd.To.Requests.CPU
			sumMem += cd.To.Requests.Memory
		}
		if !d.Apply || sumCPU > 8 || sumMem > 32<<30 {
			t.Fatalf("%s: requests together %v cores / %v GiB, want within 8 / 32", d.State, sumCPU, sumMem/(1<<30))
		}
	})
	t.Run("a forged low target stays above usage", func(t *testing.T) {
		c := burstable(0.5, 1, 512*mib, 1024*mib)
		c.WorkingSet, c.Usage = 190*mib, 200*mib
		c.Merged = &Merged{Preset: pol.Preset, CPU: recommend.Estimate{Target: 0.1}, Memory: recommend.Estimate{Target: 100 * mib}, Nodes: 2, History: 48 * time.Hour}
		d := Decide(e, Pod{QoS: "Burstable", Containers: []Container{c}, Policies: []*Policy{pol}}, now)
		if to := d.Containers[0].To; to.Requests.Memory < 190*mib*1.1-1 || to.Limits.Memory < 200*mib*1.1-1 {
			t.Fatalf("memory %v / %v MiB below the usage floor", to.Requests.Memory/mib, to.Limits.Memory/mib)
		}
	})
}

// TestDecideHostileAnnotations: a tenant's target-saturation outside the
// policy's podTargetSaturation (default [0.3, 1]), or not a number, is
// refused with a reason and the policy's value applies: the decision is
// the one without the annotation. A resize annotation stronger than the
// policy's mode, or any where the policy does not allow choosing, does
// not make an Off or DryRun pod resized.
func TestDecideHostileAnnotations(t *testing.T) {
	now := t0.Add(6 * time.Hour)
	e := fed(t, "ns/Deployment/web/app", 0.2, 150*mib, 6*time.Hour)
	pol := policy(t, nil)
	c := burstable(2, 4, 2048*mib, 4096*mib)
	plain := Decide(e, Pod{QoS: "Burstable", Containers: []Container{c}, Policies: []*Policy{pol}}, now)
	if !plain.Apply {
		t.Fatalf("without annotations: %s (%s)", plain.State, plain.Why)
	}
	for _, v := range []string{"0.001", "1e-300", "NaN", "-1", "+Inf", "0", "1.5", "0.29", " 0.5"} {
		t.Run("target-saturation="+v, func(t *testing.T) {
			d := Decide(e, Pod{QoS: "Burstable", Containers: []Container{c}, Policies: []*Policy{pol}, Annotations: ann(v1alpha1.AnnotationTargetSaturation, v)}, now)
			if d.Refused == "" || !strings.Contains(d.Refused, v1alpha1.AnnotationTargetSaturation) {
				t.Fatalf("not refused: %q", d.Refused)
			}
			to, want := d.Containers[0].To, plain.Containers[0].To
			if to != want || math.IsNaN(to.Requests.CPU) || to.Requests.CPU > 2 {
				t.Fatalf("to %+v, want the policy's decision %+v", to, want)
			}
		})
	}
	t.Run("a saturation within the policy's range counts", func(t *testing.T) {
		d := Decide(e, Pod{QoS: "Burstable", Containers: []Container{c}, Policies: []*Policy{pol}, Annotations: ann(v1alpha1.AnnotationTargetSaturation, "0.3")}, now)
		if d.Refused != "" || !(d.Containers[0].To.Requests.CPU > plain.Containers[0].To.Requests.CPU) {
			t.Fatalf("refused %q, cpu %v vs %v", d.Refused, d.Containers[0].To.Requests.CPU, plain.Containers[0].To.Requests.CPU)
		}
	})
	for _, tc := range []struct {
		mode  Mode
		allow bool
		state string
	}{
		{ModeOff, false, StateOff}, {ModeOff, true, StateOff},
		{ModeDryRun, false, StateDryRun}, {ModeDryRun, true, StateDryRun},
	} {
		t.Run("resize=in-place on "+string(tc.mode), func(t *testing.T) {
			p := policy(t, func(p *Policy) { p.Mode, p.AllowPodModeOverride = tc.mode, tc.allow })
			d := Decide(e, Pod{QoS: "Burstable", Containers: []Container{c}, Policies: []*Policy{p}, Annotations: ann(v1alpha1.AnnotationResize, "in-place")}, now)
			if d.Apply || d.State != tc.state || d.Mode != tc.mode || d.Refused == "" {
				t.Fatalf("%s mode %s apply %v refused %q: want %s, not applied, refused", d.State, d.Mode, d.Apply, d.Refused, tc.state)
			}
		})
	}
}

// TestDecideOncePerStep: a pod resized less than a step ago is not
// resized again, whatever brought its decision forward (the agent
// decides at once on a label, annotation or policy change).
func TestDecideOncePerStep(t *testing.T) {
	now := t0.Add(6 * time.Hour)
	e := fed(t, "ns/Deployment/web/app", 0.2, 150*mib, 6*time.Hour)
	pol := policy(t, func(p *Policy) { p.Step = time.Hour })
	c := burstable(2, 4, 2048*mib, 4096*mib)
	for _, tc := range []struct {
		ago   time.Duration
		apply bool
	}{{time.Minute, false}, {59 * time.Minute, false}, {time.Hour, true}, {0, true}} {
		p := Pod{QoS: "Burstable", Containers: []Container{c}, Policies: []*Policy{pol}}
		if tc.ago > 0 {
			p.LastResize = now.Add(-tc.ago)
		}
		d := Decide(e, p, now)
		if d.Apply != tc.apply || (!tc.apply && d.State != StateStepWait) {
			t.Errorf("resized %v ago: %s apply %v, want apply %v", tc.ago, d.State, d.Apply, tc.apply)
		}
	}
}
