package rightsize

import (
	"fmt"
	"math"
	"time"

	apipolicy "github.com/cgpilot/cgpilot/api/v1alpha1/policy"
	"github.com/cgpilot/cgpilot/recommend"
)

// OOMWindow is how long kills count toward the next bump's exponent, and
// bumps toward the policy's maxOOMBumpsPerDay.
const OOMWindow = 24 * time.Hour

// OOMInput is what an OOM bump needs, all the kill's path builds
// (agent/rightsize/runner): the killed container and its refused limit,
// and of its pod only what the one clamp bounds a raise by. A decision's
// Pod holds far more (every container's usage, workload key, merged
// recommendation, the pod's resize state), none of which a bump reads.
type OOMInput struct {
	// Container is the killed container's name, RefusedMemoryLimit its
	// Container.RefusedMemoryLimit.
	Container          string
	RefusedMemoryLimit float64
	// Specs are the requirements in force of every container of the pod,
	// in its order (Container.Spec): the clamp bounds the pod's sums.
	Specs []ContainerSpec
	// QoS, LimitRange and Allocatable are the pod's, as in Pod.
	QoS         string
	LimitRange  apipolicy.LimitRange
	Allocatable Resources
}

// ContainerSpec is one container's name and requirements in force.
type ContainerSpec struct {
	Name string
	Spec Requirements
}

// Spec is the killed container's requirements in force; false when the
// pod's spec has no such container.
func (in OOMInput) Spec() (Requirements, bool) {
	if at := in.at(); at >= 0 {
		return in.Specs[at].Spec, true
	}
	return Requirements{}, false
}

// at is the killed container's index in Specs (-1: none).
func (in OOMInput) at() int {
	at := -1
	for i, c := range in.Specs {
		if c.Name == in.Container {
			at = i
		}
	}
	return at
}

// OOMBump is the memory the container in.Container gets after an OOM
// kill, the kills-th within OOMWindow, under policy pol which has allowed
// bumps bumps of it in that window already. The limit becomes
// recommend.OOMLimit(limit, usage at the kill, factor, kills, maxAllowed)
// (max(limit, usage) × (1+factor)^kills), rounded up to MiB, below any
// limit pods/resize refused for the container, and then passes the one
// clamp (apipolicy.Clamp: finite, the LimitRange, the node's allocatable;
// a Guaranteed pod's request moves with its limit and is held to the
// policy's bounds too). why says, when there is no bump, why not: no
// container limit (the kill came from the pod or the node), the
// policy's maxOOMBumpsPerDay reached, or the limit at its ceiling.
func OOMBump(in OOMInput, pol *Policy, usageAtKill float64, kills, bumps int) (to Requirements, clamped []apipolicy.Binding, why string) {
	at := in.at()
	if at < 0 {
		return Requirements{}, nil, "the container is not in the pod's spec"
	}
	spec := in.Specs[at].Spec
	cur := spec.Limits.Memory
	switch {
	case cur <= 0:
		return spec, nil, "no container memory limit to raise"
	case !pol.MayBumpOOM(bumps):
		return spec, nil, fmt.Sprintf("%d bump(s) in %v already, policy %s's maxOOMBumpsPerDay is %d", bumps, OOMWindow, pol.Name, pol.MaxOOMBumpsPerDay)
	}
	maxAllowed := 0.0
	if m := pol.Overrides.Memory.MaxAllowed; m != nil {
		maxAllowed = *m
	}
	// The product may overflow any integer (16 kills in a day at 0.2:
	// ×1.2^136): held at the largest amount before it is rounded.
	lim := recommend.OOMLimit(cur, usageAtKill, pol.OOMFactorOr(), kills, maxAllowed)
	if !(lim <= apipolicy.MaxMemory) {
		lim = apipolicy.MaxMemory
	}
	lim = roundMemory(lim)
	if r := in.RefusedMemoryLimit; r > 0 && lim >= r {
		lim = math.Floor((r-1)/oneMiB) * oneMiB // whole MiB below what was refused
	}
	// The clamp's view of the pod is the specs without usage: a bump only
	// raises, so the usage floors have nothing to hold up, and one raising
	// an untouched request would move a KeepRatio limit.
	p := Pod{QoS: in.QoS, LimitRange: in.LimitRange, Allocatable: in.Allocatable, Containers: make([]Container, len(in.Specs))}
	cds := make([]ContainerDecision, len(in.Specs))
	for i, x := range in.Specs {
		p.Containers[i] = Container{Name: x.Name, Spec: x.Spec}
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
		} else if in.RefusedMemoryLimit > 0 {
			q := apipolicy.MemoryQuantity(in.RefusedMemoryLimit)
			why += ": pods/resize refused " + q.String()
		} else if maxAllowed > 0 && cur >= maxAllowed {
			why += ": the policy's maxAllowed"
		}
		return spec, clamped, why
	}
	return to, clamped, ""
}

const oneMiB = 1 << 20
