package rightsize

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	apipolicy "github.com/cgpilot/cgpilot/api/v1alpha1/policy"
	"github.com/cgpilot/cgpilot/recommend"
)

// oomInputOf is the OOM input of container name of a decision's pod: what
// the OOM path built from one before it had an input of its own.
func oomInputOf(p Pod, name string) OOMInput {
	in := OOMInput{Container: name, QoS: p.QoS, LimitRange: p.LimitRange, Allocatable: p.Allocatable}
	for _, c := range p.Containers {
		in.Specs = append(in.Specs, ContainerSpec{Name: c.Name, Spec: c.Spec})
		if c.Name == name {
			in.RefusedMemoryLimit = c.RefusedMemoryLimit
		}
	}
	return in
}

// oomBumpOfPod is OOMBump as it was when it took a decision's Pod (its
// comments left out): the reference TestOOMBumpInputMatchesPod holds the
// narrow input to. It calls the same clamp (bound).
func oomBumpOfPod(p Pod, pol *Policy, name string, usageAtKill float64, kills, bumps int) (to Requirements, clamped []apipolicy.Binding, why string) {
	at := -1
	for i, c := range p.Containers {
		if c.Name == name {
			at = i
		}
	}
	if at < 0 {
		return Requirements{}, nil, "the container is not in the pod's spec"
	}
	c := p.Containers[at]
	cur := c.Spec.Limits.Memory
	switch {
	case cur <= 0:
		return c.Spec, nil, "no container memory limit to raise"
	case !pol.MayBumpOOM(bumps):
		return c.Spec, nil, fmt.Sprintf("%d bump(s) in %v already, policy %s's maxOOMBumpsPerDay is %d", bumps, OOMWindow, pol.Name, pol.MaxOOMBumpsPerDay)
	}
	maxAllowed := 0.0
	if m := pol.Overrides.Memory.MaxAllowed; m != nil {
		maxAllowed = *m
	}
	lim := recommend.OOMLimit(cur, usageAtKill, pol.OOMFactorOr(), kills, maxAllowed)
	if !(lim <= apipolicy.MaxMemory) {
		lim = apipolicy.MaxMemory
	}
	lim = roundMemory(lim)
	if r := c.RefusedMemoryLimit; r > 0 && lim >= r {
		lim = math.Floor((r-1)/oneMiB) * oneMiB
	}
	p.Containers = append([]Container(nil), p.Containers...)
	cds := make([]ContainerDecision, len(p.Containers))
	for i, x := range p.Containers {
		p.Containers[i].Usage, p.Containers[i].WorkingSet = 0, 0
		cds[i] = ContainerDecision{Name: x.Name, From: x.Spec, To: x.Spec}
	}
	want := &cds[at].To
	want.Limits.Memory = lim
	if p.QoS == apipolicy.QoSGuaranteed {
		want.Requests.Memory = lim
	}
	clamped = bound(cds, p, pol)
	to = cds[at].To
	if to.Limits.Memory <= cur {
		why = "the limit is at its ceiling"
		if len(clamped) > 0 {
			why += ": " + apipolicy.Bindings(clamped)
		} else if c.RefusedMemoryLimit > 0 {
			q := apipolicy.MemoryQuantity(c.RefusedMemoryLimit)
			why += ": pods/resize refused " + q.String()
		} else if maxAllowed > 0 && cur >= maxAllowed {
			why += ": the policy's maxAllowed"
		}
		return c.Spec, clamped, why
	}
	return to, clamped, ""
}

// TestOOMBumpInputMatchesPod: over random pods, policies and kills, the
// bump of the narrow OOMInput is the bump the decision's Pod gave (the
// same limit and request, bindings and reason), whatever the Pod held
// that the input leaves out: usage, keys, merged recommendations, other
// containers' refused limits, policies, annotations, resize state.
func TestOOMBumpInputMatchesPod(t *testing.T) {
	rng := rand.New(rand.NewSource(20))
	bumped, clamped := 0, 0
	const runs = 20000
	for run := range runs {
		p, name := randomOOMPod(rng)
		pol := randomOOMPolicy(t, rng)
		usage := randomMemory(rng, 0.2)
		kills, bumps := 1+rng.Intn(20), rng.Intn(5)
		wantTo, wantClamped, wantWhy := oomBumpOfPod(p, pol, name, usage, kills, bumps)
		to, cl, why := OOMBump(oomInputOf(p, name), pol, usage, kills, bumps)
		// %#v: NaN equals NaN, and every field and binding is compared.
		if got, want := fmt.Sprintf("%#v %#v %q", to, cl, why), fmt.Sprintf("%#v %#v %q", wantTo, wantClamped, wantWhy); got != want {
			t.Fatalf("run %d, container %q of %+v, policy %+v, usage %v, kills %d, bumps %d:\n got %s\nwant %s", run, name, p, pol, usage, kills, bumps, got, want)
		}
		if why == "" {
			bumped++
		}
		if len(cl) > 0 {
			clamped++
		}
	}
	// The cases must reach the clamp and both outcomes, or they show little.
	if bumped < runs/10 || clamped < runs/20 || bumped > runs*9/10 {
		t.Fatalf("%d of %d runs bumped, %d clamped: the random cases miss a path", bumped, runs, clamped)
	}
	t.Logf("%d runs: %d bumped, %d clamped", runs, bumped, clamped)
}

// randomMemory is an amount of memory: 0 with probability zero, else from
// 1 MiB to 64 GiB, sometimes not in whole MiB, rarely NaN or infinite.
func randomMemory(rng *rand.Rand, zero float64) float64 {
	switch x := rng.Float64(); {
	case x < zero:
		return 0
	case x < zero+0.005:
		return math.NaN()
	case x < zero+0.01:
		return math.Inf(1)
	}
	v := math.Exp2(20 + 16*rng.Float64())
	if rng.Intn(2) == 0 {
		v = math.Ceil(v/mib) * mib
	}
	return math.Floor(v)
}

// randomOOMPod is a pod of one to four containers with random specs, usage
// and refused limits, its bounds, and the name of a container of it (now
// and then one that is not in its spec).
func randomOOMPod(rng *rand.Rand) (Pod, string) {
	qos := []string{apipolicy.QoSGuaranteed, apipolicy.QoSBurstable, apipolicy.QoSBestEffort}[rng.Intn(3)]
	p := Pod{UID: "uid", Namespace: "ns", Name: "pod", QoS: qos, Resize: "Deferred", Annotations: ann("a", "b"),
		Policies: []*Policy{{Name: "other"}}}
	n := 1 + rng.Intn(4)
	for i := range n {
		c := Container{Name: fmt.Sprintf("c%d", i), Key: fmt.Sprintf("ns/Deployment/web/c%d", i), ExclusiveCPUs: rng.Intn(4) == 0,
			Usage: randomMemory(rng, 0.2), WorkingSet: randomMemory(rng, 0.2), RefusedMemoryLimit: randomMemory(rng, 0.7)}
		c.Spec.Requests = Resources{CPU: float64(rng.Intn(4000)) / 1000, Memory: randomMemory(rng, 0.1)}
		c.Spec.Limits = Resources{CPU: float64(rng.Intn(8000)) / 1000, Memory: randomMemory(rng, 0.2)}
		if qos == apipolicy.QoSGuaranteed && rng.Intn(4) > 0 {
			c.Spec.Limits = c.Spec.Requests
		}
		if rng.Intn(3) == 0 {
			c.Merged = &Merged{Preset: "default", Memory: recommend.Estimate{Target: randomMemory(rng, 0)}, Nodes: 2}
		}
		p.Containers = append(p.Containers, c)
	}
	if rng.Intn(2) == 0 {
		p.Allocatable = Resources{CPU: float64(1 + rng.Intn(64)), Memory: randomMemory(rng, 0)}
	}
	if rng.Intn(2) == 0 {
		lr := &p.LimitRange
		lr.Min.Memory, lr.Max.Memory = randomMemory(rng, 0.6), randomMemory(rng, 0.4)
		lr.MaxLimitRequestRatio.Memory = []float64{0, 0, 0.5, 1, 1.5, 2, 4}[rng.Intn(7)]
		lr.PodMin.Memory, lr.PodMax.Memory = randomMemory(rng, 0.7), randomMemory(rng, 0.4)
		lr.Max.CPU = float64(rng.Intn(8))
	}
	name := fmt.Sprintf("c%d", rng.Intn(n))
	if rng.Intn(50) == 0 {
		name = "ghost"
	}
	return p, name
}

// randomOOMPolicy is a valid policy with a random OOM factor, daily bumps,
// memory bounds and limits rule.
func randomOOMPolicy(t *testing.T, rng *rand.Rand) *Policy {
	return policy(t, func(p *Policy) {
		if rng.Intn(4) > 0 {
			f := []float64{0.05, 0.2, 0.5, 1}[rng.Intn(4)]
			p.OOMFactor = &f
		}
		p.MaxOOMBumpsPerDay = rng.Intn(5)
		p.Limits = []Limits{LimitsKeep, LimitsKeepRatio, LimitsUnset}[rng.Intn(3)]
		if rng.Intn(3) == 0 {
			v := math.Exp2(28 + 8*rng.Float64())
			p.Overrides.Memory.MaxAllowed = &v
		}
		if rng.Intn(4) == 0 {
			v := math.Exp2(20 + 6*rng.Float64())
			p.Overrides.Memory.MinAllowed = &v
		}
	})
}
