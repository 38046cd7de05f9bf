package rightsize

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/agent/collector"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	apipolicy "github.com/cgpilot/cgpilot/api/v1alpha1/policy"
	"github.com/cgpilot/cgpilot/recommend"
)

const mib = 1 << 20

var t0 = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)

// fed is an Engine with key fed steady usage (cpu cores, memory bytes)
// every 10 s for span.
func fed(t *testing.T, key string, cpu, mem float64, span time.Duration) *Engine {
	t.Helper()
	e, warns, err := NewEngine(EngineOptions{})
	if err != nil || len(warns) > 0 {
		t.Fatal(err, warns)
	}
	tg := &collector.Target{Key: key}
	for at := t0; at.Before(t0.Add(span)); at = at.Add(10 * time.Second) {
		e.Round(at, []collector.Sample{{Target: tg, Time: at, CPUCores: cpu, MemoryWorkingSet: uint64(mem)}})
	}
	return e
}

func policy(t *testing.T, mutate func(*Policy)) *Policy {
	t.Helper()
	p := &Policy{Name: "web", Mode: ModeInPlace, Step: time.Minute, MinHistory: time.Hour}
	if mutate != nil {
		mutate(p)
	}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	return p
}

// maxMemoryCeiling is the clamp's ceiling where nothing else bounds.
const maxMemoryCeiling = 1 << 60

func allowModes(p *Policy) { p.AllowPodModeOverride = true }

func ann(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func burstable(reqCPU, limCPU, reqMem, limMem float64) Container {
	return Container{Name: "app", Key: "ns/Deployment/web/app", Spec: Requirements{
		Requests: Resources{CPU: reqCPU, Memory: reqMem}, Limits: Resources{CPU: limCPU, Memory: limMem}},
		WorkingSet: 150 * mib, Usage: 160 * mib}
}

func TestDecide(t *testing.T) {
	now := t0.Add(6 * time.Hour)
	e := fed(t, "ns/Deployment/web/app", 0.2, 150*mib, 6*time.Hour)
	over := burstable(2, 4, 2048*mib, 4096*mib)
	for _, tc := range []struct {
		name  string
		pod   Pod
		state string
		apply bool
		check func(t *testing.T, d Decision)
	}{
		{"over-provisioned burstable comes down, limits keep their ratio", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, nil)}},
			StateResize, true, func(t *testing.T, d Decision) {
				to := d.Containers[0].To
				if !(to.Requests.CPU < 1 && to.Requests.CPU > 0.1) || to.Limits.CPU != roundCPU(to.Requests.CPU*2) {
					t.Errorf("cpu %+v", to)
				}
				if !(to.Requests.Memory < 1024*mib && to.Requests.Memory >= 165*mib) || to.Limits.Memory != roundMemory(to.Requests.Memory*2) {
					t.Errorf("memory request %v MiB limit %v MiB", to.Requests.Memory/mib, to.Limits.Memory/mib)
				}
			}},
		{"max change per step bounds the move", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, func(p *Policy) { p.MaxChangePerStep = 0.25 })}},
			StateResize, true, func(t *testing.T, d Decision) {
				to := d.Containers[0].To
				if to.Requests.CPU != 1.5 || to.Requests.Memory != 1536*mib || d.Containers[0].CPUNote != NoteStepBounded {
					t.Errorf("bounded step: %+v notes %s %s", to, d.Containers[0].CPUNote, d.Containers[0].MemoryNote)
				}
			}},
		{"guaranteed stays guaranteed", Pod{QoS: "Guaranteed", Containers: []Container{burstable(2, 2, 2048*mib, 2048*mib)}, Policies: []*Policy{policy(t, func(p *Policy) { p.Limits = LimitsKeep })}},
			StateResize, true, func(t *testing.T, d Decision) {
				to := d.Containers[0].To
				if to.Requests != to.Limits || apipolicy.QoSOf([]Requirements{to}) != "Guaranteed" {
					t.Errorf("guaranteed pod became %s: %+v", apipolicy.QoSOf([]Requirements{to}), to)
				}
			}},
		{"an init container made the pod burstable: its guaranteed app container is resized", Pod{QoS: "Burstable", Containers: []Container{func() Container {
			c := burstable(2, 2, 2048*mib, 2048*mib)
			c.WorkingSet, c.Usage = 10*mib, 10*mib
			return c
		}()}, Policies: []*Policy{policy(t, nil)}},
			StateResize, true, func(t *testing.T, d Decision) {
				to := d.Containers[0].To
				if !(to.Requests.CPU < 1) || apipolicy.QoSOf([]Requirements{to}) != "Guaranteed" || d.Containers[0].CPUNote == NoteWouldChangeQoS {
					t.Errorf("the app container: %+v (%s), note %s", to, apipolicy.QoSOf([]Requirements{to}), d.Containers[0].CPUNote)
				}
			}},
		{"exclusive cores: memory only", Pod{QoS: "Guaranteed", Containers: []Container{func() Container {
			c := burstable(2, 2, 2048*mib, 2048*mib)
			c.ExclusiveCPUs = true
			return c
		}()}, Policies: []*Policy{policy(t, nil)}},
			StateResize, true, func(t *testing.T, d Decision) {
				cd := d.Containers[0]
				if cd.To.Requests.CPU != 2 || cd.To.Limits.CPU != 2 || cd.CPUNote != NoteExclusiveCPUs || cd.To.Requests.Memory >= 2048*mib {
					t.Errorf("exclusive: %+v note %s", cd.To, cd.CPUNote)
				}
			}},
		{"memory never below usage", Pod{QoS: "Burstable", Containers: []Container{func() Container {
			c := burstable(2, 4, 2048*mib, 4096*mib)
			c.WorkingSet, c.Usage = 900*mib, 950*mib // usage jumped since the histogram
			return c
		}()}, Policies: []*Policy{policy(t, nil)}},
			StateResize, true, func(t *testing.T, d Decision) {
				to := d.Containers[0].To
				if to.Requests.Memory < 990*mib || to.Limits.Memory < 1045*mib || d.Containers[0].MemoryNote != NoteUsageFloor {
					t.Errorf("floor: request %v MiB limit %v MiB note %s", to.Requests.Memory/mib, to.Limits.Memory/mib, d.Containers[0].MemoryNote)
				}
			}},
		{"keep: limits stay, requests under them", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, func(p *Policy) { p.Limits = LimitsKeep })}},
			StateResize, true, func(t *testing.T, d Decision) {
				if to := d.Containers[0].To; to.Limits != over.Spec.Limits {
					t.Errorf("limits moved: %+v", to)
				}
			}},
		{"unset cannot remove limits in place", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, func(p *Policy) { p.Limits = LimitsUnset })}},
			StateResize, true, func(t *testing.T, d Decision) {
				if cd := d.Containers[0]; cd.To.Limits != over.Spec.Limits || cd.CPUNote != NoteLimitsNotRemovable {
					t.Errorf("unset: %+v %s", cd.To, cd.CPUNote)
				}
			}},
		{"no requests: nothing to size", Pod{QoS: "Burstable", Containers: []Container{burstable(0, 0, 0, 0)}, Policies: []*Policy{policy(t, nil)}},
			StateUnchanged, false, func(t *testing.T, d Decision) {
				if cd := d.Containers[0]; cd.CPUNote != NoteNoRequest || cd.MemoryNote != NoteNoRequest {
					t.Errorf("notes %s %s", cd.CPUNote, cd.MemoryNote)
				}
			}},
		{"dry run recommends only", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, func(p *Policy) { p.Mode = ModeDryRun })}},
			StateDryRun, false, nil},
		{"pod annotation turns it off", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, allowModes)}, Annotations: ann(v1alpha1.AnnotationResize, "off")},
			StateOff, false, nil},
		{"pod annotation dry run", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, allowModes)}, Annotations: ann(v1alpha1.AnnotationResize, "dry-run")},
			StateDryRun, false, nil},
		{"pod annotation without allowPodModeOverride: refused, the policy's mode", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, nil)}, Annotations: ann(v1alpha1.AnnotationResize, "off")},
			StateResize, true, func(t *testing.T, d Decision) {
				if !strings.Contains(d.Refused, "allowPodModeOverride") {
					t.Errorf("refused %q", d.Refused)
				}
			}},
		{"two policies: neither applies", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, nil), policy(t, func(p *Policy) { p.Name = "other" })}},
			StateConflict, false, func(t *testing.T, d Decision) {
				if !d.Warning || !strings.Contains(d.Why, "web, other") {
					t.Errorf("conflict: %+v", d)
				}
			}},
		{"no policy", Pod{QoS: "Burstable", Containers: []Container{over}}, StateOff, false, nil},
		{"paused policy", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, func(p *Policy) { p.PausedUntil = now.Add(time.Hour) })}},
			StatePaused, false, nil},
		{"paused pod", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, nil)}, Annotations: ann(v1alpha1.AnnotationResizePausedUntil, now.Add(time.Minute).Format(time.RFC3339))},
			StatePaused, false, nil},
		{"pause over", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, func(p *Policy) { p.PausedUntil = now.Add(-time.Hour) })}},
			StateResize, true, nil},
		{"avoid window", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, func(p *Policy) {
			w, err := ParseWindow("0 5 * * *", 2*time.Hour) // 05:00-07:00 UTC; now is 06:00
			if err != nil {
				t.Fatal(err)
			}
			p.Avoid = []Window{w}
		})}}, StateAvoidWindow, false, nil},
		{"besteffort is not adjustable", Pod{QoS: "BestEffort", Containers: []Container{burstable(0, 0, 0, 0)}, Policies: []*Policy{policy(t, nil)}}, StateNotAdjustable, false, nil},
		{"too little history", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, func(p *Policy) { p.MinHistory = 24 * time.Hour })}},
			StateInsufficientHistory, false, nil},
		{"unsampled workload", Pod{QoS: "Burstable", Containers: []Container{func() Container { c := over; c.Key = "ns/Deployment/new/app"; return c }()}, Policies: []*Policy{policy(t, nil)}},
			StateInsufficientHistory, false, nil},
		{"a resize in flight waits", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, nil)}, Resize: "Deferred", ResizeMessage: "not enough memory"},
			StateResizePending, false, func(t *testing.T, d Decision) {
				if !strings.Contains(d.Why, "not enough memory") {
					t.Errorf("why %q", d.Why)
				}
			}},
		{"a bad annotation is refused: the policy's values apply", Pod{QoS: "Burstable", Containers: []Container{over}, Policies: []*Policy{policy(t, nil)}, Annotations: ann(v1alpha1.AnnotationResize, "maybe")},
			StateResize, true, func(t *testing.T, d Decision) {
				if !strings.Contains(d.Refused, `cgpilot.io/resize="maybe"`) || d.Mode != ModeInPlace {
					t.Errorf("refused %q mode %s", d.Refused, d.Mode)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(e, tc.pod, now)
			if d.State != tc.state || d.Apply != tc.apply {
				t.Fatalf("state %s apply %v (%s), want %s %v", d.State, d.Apply, d.Why, tc.state, tc.apply)
			}
			// The pod's class stays: a lone app container keeps its own
			// class or takes the pod's (an init container's class does
			// not change).
			for _, cd := range d.Containers {
				to := apipolicy.QoSOf([]Requirements{cd.To})
				if cd.Changed && len(tc.pod.Containers) == 1 && to != tc.pod.QoS && to != apipolicy.QoSOf([]Requirements{cd.From}) {
					t.Errorf("QoS class changed: %+v", cd.To)
				}
			}
			if tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

// TestDecideSettles: once the pod holds the recommendation, later steps
// change nothing (no flapping).
func TestDecideSettles(t *testing.T) {
	now := t0.Add(6 * time.Hour)
	e := fed(t, "ns/Deployment/web/app", 0.2, 150*mib, 6*time.Hour)
	pol := policy(t, nil)
	c := burstable(2, 4, 2048*mib, 4096*mib)
	d := Decide(e, Pod{QoS: "Burstable", Containers: []Container{c}, Policies: []*Policy{pol}}, now)
	if !d.Apply {
		t.Fatalf("first decision: %+v", d)
	}
	c.Spec = d.Containers[0].To
	for i := 1; i <= 5; i++ {
		d = Decide(e, Pod{QoS: "Burstable", Containers: []Container{c}, Policies: []*Policy{pol}}, now.Add(time.Duration(i)*time.Hour))
		if d.Apply || d.State != StateUnchanged {
			t.Fatalf("step %d: %s (%s) %+v", i, d.State, d.Why, d.Containers[0])
		}
	}
}

// TestRecommendationOncePerStep: the pods of one workload share one read
// per step.
func TestRecommendationOncePerStep(t *testing.T) {
	e := fed(t, "k", 0.5, 100*mib, 3*time.Hour)
	now := t0.Add(3 * time.Hour)
	a, ok, err := e.Recommendation(recommend.DefaultPreset, recommend.Overrides{}, "k", now, time.Hour)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	half := 0.5
	for i := 0; i < 3; i++ {
		b, _, _ := e.Recommendation(recommend.DefaultPreset, recommend.Overrides{CPU: recommend.ResourceOverrides{}}, "k", now.Add(time.Duration(i)*time.Minute), time.Hour)
		if b.Time != a.Time {
			t.Fatalf("read again within the step: %v vs %v", b.Time, a.Time)
		}
	}
	c, _, _ := e.Recommendation(recommend.DefaultPreset, recommend.Overrides{CPU: recommend.ResourceOverrides{TargetSaturation: &half}}, "k", now, time.Hour)
	if !(c.CPU.Target > a.CPU.Target) {
		t.Fatalf("saturation 0.5 target %v not above %v", c.CPU.Target, a.CPU.Target)
	}
	if _, _, err := e.Recommendation("nope", recommend.Overrides{}, "k", now, time.Hour); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("unknown preset: %v", err)
	}
}

func TestOOMBump(t *testing.T) {
	c := burstable(0.5, 1, 256*mib, 512*mib)
	f := 0.2
	pol := func(mut func(*Policy)) *Policy {
		return policy(t, func(p *Policy) {
			p.OOMFactor, p.MaxOOMBumpsPerDay = &f, 3
			if mut != nil {
				mut(p)
			}
		})
	}
	maxMem := func(v float64) func(*Policy) { return func(p *Policy) { p.Overrides.Memory.MaxAllowed = &v } }
	for _, tc := range []struct {
		name    string
		c       Container
		qos     string
		pol     *Policy
		alloc   float64
		kills   int
		bumps   int
		ok      bool
		lim     float64
		req     float64
		whyPart string
	}{
		{"first kill: +20 %", c, "Burstable", pol(nil), 0, 1, 0, true, roundMemory(512 * mib * 1.2), 256 * mib, ""},
		{"third kill compounds", c, "Burstable", pol(nil), 0, 3, 2, true, roundMemory(512 * mib * 1.2 * 1.2 * 1.2), 256 * mib, ""},
		{"guaranteed request follows", func() Container { g := c; g.Spec.Requests.Memory = 512 * mib; return g }(), "Guaranteed", pol(nil), 0, 1, 0, true, roundMemory(512 * mib * 1.2), roundMemory(512 * mib * 1.2), ""},
		{"capped by maxAllowed", c, "Burstable", pol(maxMem(600 * mib)), 0, 1, 0, true, 600 * mib, 256 * mib, ""},
		{"at maxAllowed already", c, "Burstable", pol(maxMem(512 * mib)), 0, 1, 0, false, 512 * mib, 256 * mib, "maxAllowed"},
		{"no container limit", burstable(0.5, 0, 256*mib, 0), "Burstable", pol(nil), 0, 1, 0, false, 0, 256 * mib, "no container memory limit"},
		{"maxOOMBumpsPerDay reached", c, "Burstable", pol(nil), 0, 4, 3, false, 512 * mib, 256 * mib, "maxOOMBumpsPerDay is 3"},
		{"no bumps at all under 0", c, "Burstable", pol(func(p *Policy) { p.MaxOOMBumpsPerDay = 0 }), 0, 1, 0, false, 512 * mib, 256 * mib, "maxOOMBumpsPerDay is 0"},
		{"the node's allocatable bounds the limit", c, "Burstable", pol(nil), 600 * mib, 1, 0, true, 600 * mib, 256 * mib, ""},
		{"a guaranteed request is held to the policy's max", func() Container { g := c; g.Spec.Requests.Memory = 512 * mib; return g }(), "Guaranteed", pol(maxMem(550 * mib)), 0, 1, 0, true, 550 * mib, 550 * mib, ""},
		{"below a limit pods/resize refused", func() Container { r := c; r.RefusedMemoryLimit = 600 * mib; return r }(), "Burstable", pol(nil), 0, 2, 1, true, 599 * mib, 256 * mib, ""},
		{"a refused limit just above: no bump", func() Container { r := c; r.RefusedMemoryLimit = 512*mib + 1; return r }(), "Burstable", pol(nil), 0, 2, 1, false, 512 * mib, 256 * mib, "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Pod{QoS: tc.qos, Containers: []Container{tc.c}, Allocatable: Resources{Memory: tc.alloc}}
			to, _, why := OOMBump(oomInputOf(p, "app"), tc.pol, 512*mib, tc.kills, tc.bumps)
			if (why == "") != tc.ok || to.Limits.Memory != tc.lim || to.Requests.Memory != tc.req || !strings.Contains(why, tc.whyPart) {
				t.Fatalf("got %q limit %v MiB request %v MiB, want ok=%v %v %v (%q)", why, to.Limits.Memory/mib, to.Requests.Memory/mib, tc.ok, tc.lim/mib, tc.req/mib, tc.whyPart)
			}
		})
	}
}

// TestOOMKillLoop: a container OOM-killed again and again. Each bump is
// fed back as the spec the next kill sees, as the agent does. Under the
// default maxOOMBumpsPerDay the limit rises at most that many times; with
// the most bumps a policy may allow (24) and a node of 64 GiB, the
// compounding (×1.2^(1+2+…+k)) that used to reach 11 TiB after 10 kills
// and overflow int64 into an unlimited limit after 16 never passes the
// node's allocatable, and every limit is finite and whole.
func TestOOMKillLoop(t *testing.T) {
	f := 0.2
	for _, tc := range []struct {
		name      string
		maxBumps  int
		alloc     float64
		wantBumps int
	}{
		{"default rate (3 a day)", 3, 64 << 30, 3},
		{"24 a day, the node's allocatable holds", 24, 64 << 30, -1},
		{"24 a day, the node unknown: the package's ceiling holds", 24, 0, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := policy(t, func(p *Policy) { p.OOMFactor, p.MaxOOMBumpsPerDay = &f, tc.maxBumps })
			c := burstable(0.5, 1, 256*mib, 512*mib)
			ceiling := tc.alloc
			if ceiling == 0 {
				ceiling = maxMemoryCeiling
			}
			bumps := 0
			for kill := 1; kill <= 24; kill++ {
				p := Pod{QoS: "Burstable", Containers: []Container{c}, Allocatable: Resources{Memory: tc.alloc}}
				to, _, why := OOMBump(oomInputOf(p, "app"), pol, c.Spec.Limits.Memory, kill, bumps)
				lim := to.Limits.Memory
				if math.IsNaN(lim) || math.IsInf(lim, 0) || lim <= 0 || lim > ceiling || lim != math.Trunc(lim) || int64(lim) <= 0 {
					t.Fatalf("kill %d: limit %v (ceiling %v)", kill, lim, ceiling)
				}
				if why == "" {
					bumps++
					c.Spec = to
				}
			}
			if tc.wantBumps >= 0 && bumps != tc.wantBumps {
				t.Fatalf("%d bumps in 24 kills, want %d", bumps, tc.wantBumps)
			}
			if tc.wantBumps < 0 && c.Spec.Limits.Memory != ceiling {
				t.Fatalf("after 24 kills the limit is %v, want it held at the ceiling %v", c.Spec.Limits.Memory, ceiling)
			}
			t.Logf("%d bumps, limit %v MiB", bumps, c.Spec.Limits.Memory/mib)
		})
	}
}

// TestDecidePrefersFreshMerged: a merged recommendation replaces the
// node's own only under the policy's preset, without a pod saturation
// override, and with enough history somewhere; the safety rules (usage
// floor) still bound it.
func TestDecidePrefersFreshMerged(t *testing.T) {
	now := t0.Add(6 * time.Hour)
	e := fed(t, "ns/Deployment/web/app", 0.2, 150*mib, 6*time.Hour)
	young := fed(t, "ns/Deployment/web/app", 0.2, 150*mib, 10*time.Minute)
	pol := policy(t, nil)
	merged := &Merged{Preset: pol.Preset, CPU: recommend.Estimate{Target: 0.75}, Memory: recommend.Estimate{Target: 700 * mib}, Nodes: 3, History: 2 * time.Hour}
	for _, tc := range []struct {
		name      string
		e         *Engine
		m         *Merged
		over      map[string]string
		wantNodes int
		state     string
	}{
		{"fresh merged under the same preset wins", e, merged, nil, 3, StateResize},
		{"another preset: the node's own", e, &Merged{Preset: "vpa", CPU: merged.CPU, Memory: merged.Memory, Nodes: 3, History: 2 * time.Hour}, nil, 0, StateResize},
		{"a pod's target saturation: the node's own", e, merged, ann(v1alpha1.AnnotationTargetSaturation, "0.5"), 0, StateResize},
		{"little local history, merged has enough", young, merged, nil, 3, StateResize},
		{"little history anywhere", young, &Merged{Preset: pol.Preset, CPU: merged.CPU, Memory: merged.Memory, Nodes: 1, History: 20 * time.Minute}, nil, 0, StateInsufficientHistory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := burstable(2, 4, 2048*mib, 4096*mib)
			c.Merged = tc.m
			d := Decide(tc.e, Pod{QoS: "Burstable", Containers: []Container{c}, Policies: []*Policy{pol}, Annotations: tc.over}, now)
			if d.State != tc.state {
				t.Fatalf("state %s (%s), want %s", d.State, d.Why, tc.state)
			}
			cd := d.Containers[0]
			if cd.Nodes != tc.wantNodes {
				t.Fatalf("nodes %d, want %d", cd.Nodes, tc.wantNodes)
			}
			if cd.Recommendation == nil {
				return
			}
			isMerged := cd.Recommendation.CPU.Target == 0.75 && cd.Recommendation.CPU.Explain.Mode == ExplainMerged
			if isMerged != (tc.wantNodes > 0) {
				t.Fatalf("recommendation %+v, merged expected %v", cd.Recommendation.CPU, tc.wantNodes > 0)
			}
			if tc.wantNodes > 0 && (cd.To.Requests.CPU != 0.75 || cd.To.Requests.Memory != 700*mib) {
				t.Fatalf("applied %+v, want the merged targets", cd.To.Requests)
			}
		})
	}
	// The usage floor holds under a merged target below usage.
	c := burstable(2, 4, 2048*mib, 4096*mib)
	c.Merged = &Merged{Preset: pol.Preset, CPU: merged.CPU, Memory: recommend.Estimate{Target: 50 * mib}, Nodes: 2, History: 2 * time.Hour}
	d := Decide(e, Pod{QoS: "Burstable", Containers: []Container{c}, Policies: []*Policy{pol}}, now)
	if got, floor := d.Containers[0].To.Requests.Memory, c.WorkingSet*(1+MemoryMargin); got < floor {
		t.Fatalf("memory %v MiB below the usage floor %v MiB", got/mib, floor/mib)
	}
}
