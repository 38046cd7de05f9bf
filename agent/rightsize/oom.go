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

// OOMBump is the memory container name of pod p gets after an OOM kill,
// the kills-th within OOMWindow, under policy pol which has allowed bumps
// bumps of it in that window already. The limit becomes
// recommend.OOMLimit(limit, usage at the kill, factor, kills, maxAllowed)
// (max(limit, usage) × (1+factor)^kills), rounded up to MiB, below any
// limit pods/resize refused for the container, and then passes the one
// clamp (apipolicy.Clamp: finite, the LimitRange, the node's allocatable;
// a Guaranteed pod's request moves with its limit and is held to the
// policy's bounds too). why says, when there is no bump, why not: no
// container limit (the kill came from the pod or the node), the
// policy's maxOOMBumpsPerDay reached, or the limit at its ceiling.
func OOMBump(p Pod, pol *Policy, name string, usageAtKill float64, kills, bumps int) (to Requirements, clamped []apipolicy.Binding, why string) {
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
	// The product may overflow any integer (16 kills in a day at 0.2:
	// ×1.2^136): held at the largest amount before it is rounded.
	lim := recommend.OOMLimit(cur, usageAtKill, pol.OOMFactorOr(), kills, maxAllowed)
	if !(lim <= apipolicy.MaxMemory) {
		lim = apipolicy.MaxMemory
	}
	lim = roundMemory(lim)
	if r := c.RefusedMemoryLimit; r > 0 && lim >= r {
		lim = math.Floor((r-1)/oneMiB) * oneMiB // whole MiB below what was refused
	}
	// A bump only raises: the usage floors have nothing to hold up, and
	// one raising an untouched request would move a KeepRatio limit.
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

const oneMiB = 1 << 20
