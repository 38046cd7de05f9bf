package policy

import (
	"fmt"
	"math"
	"strings"

	"github.com/cgpilot/cgpilot/internal/millicpu"
)

// clamp.go: the one clamp. Every CPU and memory value that reaches a
// pod's resources (a step decision, an OOM bump, the webhook's admission)
// passes Clamp last, whatever computed it: a recommendation forged by a
// compromised node, an annotation a tenant chose, an overflowing product.

// Reason is why a bound moved a value.
type Reason string

const (
	// ReasonNonFinite: the proposed value was NaN, infinite or negative;
	// the current value is kept.
	ReasonNonFinite Reason = "NonFinite"
	// ReasonUsageFloor: raised to what the container uses (memory).
	ReasonUsageFloor Reason = "UsageFloor"
	// ReasonPolicyMin, ReasonPolicyMax: the policy's minAllowed and
	// maxAllowed (requests; a Guaranteed container's limit follows).
	ReasonPolicyMin Reason = "PolicyMinAllowed"
	ReasonPolicyMax Reason = "PolicyMaxAllowed"
	// ReasonLimitRangeMin, ReasonLimitRangeMax, ReasonLimitRangeRatio:
	// the namespace's LimitRange for a container (min, max,
	// maxLimitRequestRatio).
	ReasonLimitRangeMin   Reason = "LimitRangeMin"
	ReasonLimitRangeMax   Reason = "LimitRangeMax"
	ReasonLimitRangeRatio Reason = "LimitRangeMaxLimitRequestRatio"
	// ReasonLimitRangePodMax, ReasonLimitRangePodMin: the LimitRange's
	// bounds of a whole pod's sums.
	ReasonLimitRangePodMax Reason = "LimitRangePodMax"
	ReasonLimitRangePodMin Reason = "LimitRangePodMin"
	// ReasonNodeAllocatable: the node's allocatable (the pod's requests
	// together, each limit alone).
	ReasonNodeAllocatable Reason = "NodeAllocatable"
	// ReasonCeiling: MaxCPU or MaxMemory, where nothing else bounds.
	ReasonCeiling Reason = "Ceiling"
	// ReasonFloorAboveCeiling: a floor (usage, minimum) above a ceiling:
	// the value moves toward the ceiling only as far as the floor lets
	// it, and is never raised past the ceiling.
	ReasonFloorAboveCeiling Reason = "FloorAboveCeiling"
)

// LimitRange are a namespace's LimitRange constraints on CPU and memory,
// merged over all its LimitRange objects (the tightest of each); 0 is no
// constraint. AddLimitRangeItem fills it from the API objects.
type LimitRange struct {
	// Min, Max and MaxLimitRequestRatio of each container (type
	// Container): requests and limits in [Min, Max], limit ≤ ratio ×
	// request.
	Min, Max, MaxLimitRequestRatio Values
	// PodMin and PodMax bound the sums of a pod's requests and of its
	// limits (type Pod; its maxLimitRequestRatio is not read).
	PodMin, PodMax Values
}

// Bounds is what bounds a pod's values besides its usage: the policy's
// request bounds (Policy.Bounds), the namespace's LimitRange and the
// node's allocatable (0: unknown; the webhook, before scheduling, passes
// the largest node's).
type Bounds struct {
	MinAllowed, MaxAllowed Values
	LimitRange             LimitRange
	Allocatable            Values
}

// Bounds are p's request bounds with lr and allocatable.
func (p *Policy) Bounds(lr LimitRange, allocatable Values) Bounds {
	lo, hi := p.Allowed()
	return Bounds{MinAllowed: lo, MaxAllowed: hi, LimitRange: lr, Allocatable: allocatable}
}

// ClampContainer is one container of a Clamp: 0 is unset throughout.
type ClampContainer struct {
	Name string
	// Current are the values in force: what a non-finite proposal falls
	// back to, and what a floor above a ceiling keeps.
	Current Requirements
	// Want are the values proposed. An unset value stays unset and a set
	// one stays set (a request or limit is never added or removed here).
	Want Requirements
	// Floor are the least values the container may get: for memory, its
	// usage with the margin the kernel needs (requests: the working set,
	// limits: the usage); usually 0 for CPU.
	Floor Requirements
}

// ClampPod is the pod a Clamp applies to.
type ClampPod struct {
	Containers []ClampContainer
	// Guaranteed keeps each limit equal to its request (the QoS class
	// must not change).
	Guaranteed bool
	// KeepRatio scales a limit with its request (the policy's limits
	// KeepRatio): when a bound moves a request, the limit proposed with
	// it moves in proportion before its own bounds apply. Otherwise
	// limits are bounded as proposed.
	KeepRatio bool
}

// Binding is one bound that moved one value.
type Binding struct {
	Container string
	Resource  string // "cpu" or "memory"
	Field     string // "request" or "limit"
	Reason    Reason
	// Want is the value proposed, Got the value after the clamp (cores or
	// bytes).
	Want, Got float64
}

func (b Binding) String() string {
	return fmt.Sprintf("%s %s %s %s→%s (%s)", b.Container, b.Resource, b.Field, format(b.Resource, b.Want), format(b.Resource, b.Got), b.Reason)
}

// format prints an amount the way requests are written.
func format(resource string, v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || v < 0:
		return fmt.Sprint(v)
	case resource == "cpu":
		q := CPUQuantity(v)
		return q.String()
	}
	q := MemoryQuantity(v)
	return q.String()
}

// Bindings joins bindings into one message (for an Event or annotation).
func Bindings(bs []Binding) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = b.String()
	}
	return strings.Join(parts, "; ")
}

// res reads and writes one resource of Values, and rounds it to the
// unit values are applied in (whole millicores, whole bytes).
type res struct {
	name    string
	ceiling float64
	unit    float64
	get     func(Values) float64
	set     func(*Values, float64)
	// up and down round a value ≥ 0 to whole units.
	up, down func(float64) float64
}

var resources = []res{
	{"cpu", MaxCPU, 0.001, func(v Values) float64 { return v.CPU }, func(v *Values, x float64) { v.CPU = x },
		millicpu.Cores,
		func(v float64) float64 { return float64(millicpu.Floor(v)) / 1000 }},
	{"memory", MaxMemory, 1, func(v Values) float64 { return v.Memory }, func(v *Values, x float64) { v.Memory = x },
		func(v float64) float64 { return float64(Bytes(v)) },
		func(v float64) float64 { return math.Floor(min(v, MaxMemory)) }},
}

// amount is v when it is a usable amount (finite, ≥ 0), else 0.
func amount(v float64) float64 {
	if v >= 0 && !math.IsInf(v, 1) {
		return v
	}
	return 0
}

// bound is one floor or ceiling and the reason it binds with ("" for one
// that is not reported, such as a limit's floor at its request).
type bound struct {
	v      float64
	reason Reason
}

// Clamp bounds a pod's proposed values. Each value is, in this order:
// finite (a NaN, infinite or negative proposal keeps the current value);
// for requests within the policy's [minAllowed, maxAllowed]; within the
// LimitRange's [min, max] and, for limits, at most maxLimitRequestRatio
// × the request and at least the request; at least the usage floor; the
// pod's requests together at most the node's allocatable and the
// LimitRange's pod max, its limits together at most the pod max, each
// limit at most the allocatable (pod totals cut only increases, in
// proportion); never above MaxCPU or MaxMemory; in whole millicores and
// bytes, rounded up but never across a ceiling. A floor above a ceiling
// (a container using more than a maximum allows) moves the value toward
// the ceiling as far as the floor lets it and never raises it past the
// ceiling, so nothing goes below usage and nothing is raised beyond a
// bound. It returns the values in the order of pod.Containers, and every
// bound that moved one.
func Clamp(pod ClampPod, b Bounds) ([]Requirements, []Binding) {
	out := make([]Requirements, len(pod.Containers))
	var binds []Binding
	for _, r := range resources {
		c := clamper{pod: pod, r: r, out: out}
		c.bounds(b)
		c.run()
		binds = append(binds, c.binds...)
	}
	return out, binds
}

// clamper clamps one resource of a pod.
type clamper struct {
	pod   ClampPod
	r     res
	out   []Requirements
	binds []Binding

	// The bounds, rounded to whole units (floors up, ceilings down).
	ceiling              bound // MaxCPU/MaxMemory, or the allocatable when lower
	alloc                float64
	policyMin, policyMax float64
	lrMin, lrMax, ratio  float64
	podMin, podMax       float64
	// Per container: the proposed and current values and floors, in
	// whole units; request k=0, limit k=1.
	want, cur, floor [][2]float64
	// base are the values the pod-level cuts may not go below.
	base [][2]float64
	// moved and cutBy are the reasons a container's request moved (its
	// own bounds, the pod's), for its limit under KeepRatio.
	moved, cutBy []Reason
	// paired: a Guaranteed pod's container with request and limit set,
	// which keeps one value for both.
	paired []bool
	// reqHi is the highest a container's request may go.
	reqHi []float64
}

func (c *clamper) bounds(b Bounds) {
	r := c.r
	c.ceiling = bound{r.ceiling, ReasonCeiling}
	if a := r.down(amount(r.get(b.Allocatable))); a > 0 {
		c.alloc = a
		if a < c.ceiling.v {
			c.ceiling = bound{a, ReasonNodeAllocatable}
		}
	}
	c.policyMin = r.up(amount(r.get(b.MinAllowed)))
	c.policyMax = r.down(amount(r.get(b.MaxAllowed)))
	lr := b.LimitRange
	c.lrMin, c.lrMax = r.up(amount(r.get(lr.Min))), r.down(amount(r.get(lr.Max)))
	if c.ratio = amount(r.get(lr.MaxLimitRequestRatio)); c.ratio > 0 && c.ratio < 1 {
		c.ratio = 1 // the API refuses a ratio below 1; a limit is never below its request
	}
	c.podMin, c.podMax = r.up(amount(r.get(lr.PodMin))), r.down(amount(r.get(lr.PodMax)))
	n := len(c.pod.Containers)
	c.want, c.cur, c.floor, c.base = make([][2]float64, n), make([][2]float64, n), make([][2]float64, n), make([][2]float64, n)
	c.moved, c.cutBy, c.paired, c.reqHi = make([]Reason, n), make([]Reason, n), make([]bool, n), make([]float64, n)
	for i, ct := range c.pod.Containers {
		for k, field := range []string{"request", "limit"} {
			pick := func(q Requirements) float64 { return r.get([]Values{q.Requests, q.Limits}[k]) }
			cur := c.whole(amount(pick(ct.Current)))
			w := pick(ct.Want)
			v := w
			if !(w >= 0) || math.IsInf(w, 1) {
				v = cur
				c.bind(i, field, ReasonNonFinite, w, cur)
			}
			if v > r.ceiling {
				c.bind(i, field, ReasonCeiling, w, r.ceiling)
			}
			c.want[i][k], c.cur[i][k] = c.whole(v), cur
			c.floor[i][k] = r.up(amount(pick(ct.Floor)))
		}
		if c.cur[i][1] > 0 {
			// A limit is never below its request, the current one either.
			c.cur[i][1] = max(c.cur[i][1], c.cur[i][0])
		}
		c.paired[i] = c.pod.Guaranteed && c.want[i][0] > 0 && c.want[i][1] > 0
	}
}

// whole rounds v up to whole units, keeping a set value (> 0) set.
func (c *clamper) whole(v float64) float64 {
	if !(v > 0) {
		return 0
	}
	return max(c.r.up(v), c.r.unit)
}

func (c *clamper) bind(i int, field string, reason Reason, want, got float64) {
	c.binds = append(c.binds, Binding{Container: c.pod.Containers[i].Name, Resource: c.r.name, Field: field, Reason: reason, Want: want, Got: got})
}

func (c *clamper) get(i, k int) float64 {
	return c.r.get([]Values{c.out[i].Requests, c.out[i].Limits}[k])
}

func (c *clamper) set(i int, req, lim float64) {
	c.r.set(&c.out[i].Requests, req)
	c.r.set(&c.out[i].Limits, lim)
}

func (c *clamper) run() {
	// Requests (a Guaranteed container's one value: the tighter bounds
	// of request and limit), each container alone.
	for i := range c.pod.Containers {
		req := c.want[i][0]
		if req == 0 {
			continue
		}
		g := c.paired[i]
		lo := []bound{{c.floor[i][0], ReasonUsageFloor}, {c.policyMin, ReasonPolicyMin}, {c.lrMin, ReasonLimitRangeMin}}
		hi := []bound{c.ceiling, {c.policyMax, ReasonPolicyMax}, {c.lrMax, ReasonLimitRangeMax}}
		cur := c.cur[i][0]
		if g {
			lo = append(lo, bound{c.floor[i][1], ReasonUsageFloor})
			cur = max(cur, c.cur[i][1])
		}
		v, reason := between(req, cur, lo, hi)
		if reason != "" {
			c.bind(i, "request", reason, req, v)
		}
		c.moved[i] = reason
		c.reqHi[i] = max(v, lowest(hi))
		c.base[i][0] = base(v, req, cur, lo)
		c.set(i, v, 0)
		if g {
			c.set(i, v, v)
			c.base[i][1] = c.base[i][0]
		}
	}
	// The pod's requests together.
	podCap, reason := c.podMax, ReasonLimitRangePodMax
	if c.alloc > 0 && (podCap == 0 || c.alloc < podCap) {
		podCap, reason = c.alloc, ReasonNodeAllocatable
	}
	c.cut(0, podCap, reason)
	c.lift(0, c.podMin)
	c.raiseForRatio(podCap)
	// Limits, each container alone, over the requests now fixed.
	for i := range c.pod.Containers {
		req, want := c.get(i, 0), c.want[i][1]
		if want == 0 || c.paired[i] {
			continue
		}
		lim, scaled := want, Reason("")
		if w := c.want[i][0]; c.pod.KeepRatio && w > 0 && req != w {
			lim = c.whole(want * req / w)
			if scaled = c.moved[i]; scaled == "" {
				scaled = c.cutBy[i]
			}
		}
		lo := []bound{{c.floor[i][1], ReasonUsageFloor}, {c.lrMin, ReasonLimitRangeMin}, {req, ""}}
		hi := []bound{c.ceiling, {c.lrMax, ReasonLimitRangeMax}}
		if c.ratio > 0 && req > 0 {
			hi = append(hi, bound{c.r.down(c.ratio * req), ReasonLimitRangeRatio})
		}
		v, reason := between(lim, c.cur[i][1], lo, hi)
		if reason == "" && v != want {
			reason = scaled
		}
		if reason != "" {
			c.bind(i, "limit", reason, want, v)
		}
		c.base[i][1] = base(v, lim, c.cur[i][1], lo)
		c.set(i, req, v)
	}
	c.cut(1, c.podMax, ReasonLimitRangePodMax)
	c.lift(1, c.podMin)
	// A request the floor holds above a ceiling takes its limit along: a
	// limit is never below its request.
	for i := range c.out {
		if req, lim := c.get(i, 0), c.get(i, 1); lim > 0 && req > lim {
			c.set(i, req, req)
			c.bind(i, "limit", ReasonFloorAboveCeiling, c.want[i][1], req)
		}
	}
}

// raiseForRatio: where limits are meant to stay (policies other than
// KeepRatio), a request the LimitRange's maxLimitRequestRatio would make
// too small for its limit is raised to limit/ratio instead of the limit
// being cut, as far as the request's own ceilings and the pod's cap
// (podCap, 0: none) allow; what remains is the limit's to give.
func (c *clamper) raiseForRatio(podCap float64) {
	if c.ratio == 0 || c.pod.KeepRatio {
		return
	}
	sum := 0.0
	for i := range c.out {
		sum += c.get(i, 0)
	}
	for i := range c.out {
		req, lim := c.get(i, 0), c.want[i][1]
		if c.paired[i] || req == 0 || lim == 0 || lim <= c.ratio*req {
			continue
		}
		nv := min(c.r.up(lim/c.ratio), c.r.down(c.reqHi[i]))
		if podCap > 0 {
			nv = min(nv, c.r.down(req+podCap-sum))
		}
		if nv > req {
			sum += nv - req
			c.set(i, nv, c.get(i, 1))
			c.bind(i, "request", ReasonLimitRangeRatio, c.want[i][0], nv)
		}
	}
}

// lowest is the lowest positive bound of hi (+Inf when none).
func lowest(hi []bound) float64 {
	c := math.Inf(1)
	for _, b := range hi {
		if b.v > 0 && b.v < c {
			c = b.v
		}
	}
	return c
}

// lift raises field k of the containers so that their sum is at least
// floor (0: none): only values that went down are raised, toward their
// current value, in proportion, rounded up.
func (c *clamper) lift(k int, floor float64) {
	if floor <= 0 {
		return
	}
	sum, room := c.sumRoom(k, func(i int, v float64) float64 { return c.cur[i][k] - v })
	if sum >= floor || room <= 0 {
		return
	}
	share := min(1, (floor-sum)/room)
	for i := range c.out {
		v, cur := c.get(i, k), c.cur[i][k]
		if v == 0 || v >= cur {
			continue
		}
		c.setField(i, k, min(cur, c.r.up(v+(cur-v)*share)), ReasonLimitRangePodMin)
	}
}

// sumRoom returns the sum of field k over the containers and the room of
// its set values (roomOf each, at least 0): what lift and cut spread a
// pod-level bound over, measured alike.
func (c *clamper) sumRoom(k int, roomOf func(i int, v float64) float64) (sum, room float64) {
	for i := range c.out {
		v := c.get(i, k)
		sum += v
		if v > 0 {
			room += max(0, roomOf(i, v))
		}
	}
	return sum, room
}

// setField sets field k of container i to v for a pod-level bound (both
// fields of a paired container; a limit never below its request) and
// records why.
func (c *clamper) setField(i, k int, v float64, reason Reason) {
	req, lim := c.get(i, 0), c.get(i, 1)
	switch {
	case c.paired[i]:
		req, lim = v, v
	case k == 0:
		req = v
		if lim > 0 && lim < req {
			lim = req
		}
	default:
		lim = v
	}
	c.set(i, req, lim)
	c.bind(i, []string{"request", "limit"}[k], reason, c.want[i][k], v)
	if k == 0 {
		c.cutBy[i] = reason
	}
}

// cut lowers field k (0 requests, 1 limits) of the containers so that
// their sum is at most cap (0: none): only what lies above each value's
// base (its floors, and its current value when it did not rise) is cut,
// in proportion, rounded down.
func (c *clamper) cut(k int, cap float64, reason Reason) {
	if cap <= 0 {
		return
	}
	sum, room := c.sumRoom(k, func(i int, v float64) float64 { return v - max(c.base[i][k], c.r.unit) })
	if sum <= cap || room <= 0 {
		return
	}
	share := min(1, (sum-cap)/room)
	for i := range c.out {
		v, b := c.get(i, k), max(c.base[i][k], c.r.unit) // a set value stays set
		if v <= b {
			continue
		}
		nv := max(b, c.r.down(v-(v-b)*share))
		if share == 1 {
			nv = b
		}
		c.setField(i, k, nv, reason)
	}
}

// between bounds v by the floors lo and the ceilings hi (0: none) and says
// which bound moved it ("" if none, or one without a reason). When the
// highest floor is above the lowest ceiling, v goes toward the ceiling
// only as far as the floor allows, starting from the current value cur.
func between(v, cur float64, lo, hi []bound) (float64, Reason) {
	f := bound{0, ""}
	for _, b := range lo {
		if b.v > f.v {
			f = b
		}
	}
	c := bound{math.Inf(1), ""}
	for _, b := range hi {
		if b.v > 0 && b.v < c.v {
			c = b
		}
	}
	switch {
	case f.v > c.v:
		if got := max(c.v, min(f.v, cur)); got != v {
			return got, ReasonFloorAboveCeiling
		}
	case v < f.v:
		return f.v, f.reason
	case v > c.v:
		return c.v, c.reason
	}
	return v, ""
}

// base is what the pod-level cuts may not take v below: its floors, and
// its current value unless the value rose above it (only increases are
// cut).
func base(v, want, cur float64, lo []bound) float64 {
	f := 0.0
	for _, b := range lo {
		f = max(f, b.v)
	}
	return min(v, max(f, min(want, cur)))
}
