package rightsize

import (
	"time"

	"github.com/cgpilot/cgpilot/recommend"
)

// OOMWindow is how long kills count toward the next bump's exponent.
const OOMWindow = 24 * time.Hour

// OOMBump is the memory a container gets after its kth OOM kill within
// OOMWindow: the limit becomes recommend.OOMLimit(limit, usage at the
// kill, factor, k, maxAllowed) (max(limit, usage) × (1+factor)^k, capped),
// rounded up to MiB; a Guaranteed pod's request moves with it. ok is false
// when there is nothing to raise: no container limit (the kill came from
// the pod or the node) or the limit is at maxAllowed already.
func OOMBump(c Container, qos string, usageAtKill, factor float64, kills int, maxAllowed float64) (Requirements, bool) {
	cur := c.Spec.Limits.Memory
	if cur <= 0 {
		return c.Spec, false
	}
	lim := roundMemory(recommend.OOMLimit(cur, usageAtKill, factor, kills, maxAllowed))
	if lim <= cur {
		return c.Spec, false
	}
	to := c.Spec
	to.Limits.Memory = lim
	if qos == "Guaranteed" {
		to.Requests.Memory = lim
	}
	return to, true
}
