package rightsize

import (
	"fmt"
	"math"
	"time"

	apipolicy "github.com/cgpilot/cgpilot/api/v1alpha1/policy"
	"github.com/cgpilot/cgpilot/internal/millicpu"
	"github.com/cgpilot/cgpilot/recommend"
)

// Resources of one container, in cores and bytes; 0 is unset (the
// policy compiler's Values, which Clamp takes).
type Resources = apipolicy.Values

// Requirements are a container's requests and limits.
type Requirements = apipolicy.Requirements

// Container is what a decision needs of one container.
type Container struct {
	Name string
	// Key is the workload container the histograms are kept for.
	Key string
	// Spec are the requests and limits the pod spec asks.
	Spec Requirements
	// ExclusiveCPUs: the container runs on cores of its own (the agent's
	// exclusive pool or the kubelet's static CPU manager): its CPU request
	// is what placed it there and must not move.
	ExclusiveCPUs bool
	// Usage and WorkingSet are the memory it uses now, in bytes (0 when
	// not sampled yet): the floor below which memory never goes.
	Usage, WorkingSet float64
	// Merged, when set, is the cluster aggregator's recommendation for
	// the workload container, merged from every node's samples and still
	// fresh: it replaces the node's own when it was computed under the
	// same preset and the pod sets no target saturation of its own.
	Merged *Merged
	// RefusedMemoryLimit is the lowest memory limit the API server
	// refused to this container through pods/resize (0: none): an OOM
	// bump stays below it.
	RefusedMemoryLimit float64
}

// Merged is a recommendation merged from the samples of every node.
type Merged struct {
	Preset string
	CPU    recommend.Estimate
	Memory recommend.Estimate
	// Nodes it rests on; History the span of samples it rests on, in one
	// container's sampling time (the samples of every node and pod
	// count), for the policy's minHistory.
	Nodes   int
	History time.Duration
}

// Pod is what a decision needs of one pod.
type Pod struct {
	UID, Namespace, Name string
	// QoS is the pod's class (apipolicy.QoSGuaranteed, QoSBurstable or
	// QoSBestEffort), init containers counted (agent/podspec.QoS).
	QoS        string
	Containers []Container
	// Policies are the RightsizePolicies whose selectors match the pod.
	Policies []*Policy
	// Annotations are the pod's own: what they may change is the
	// policy's to say (Policy.ForPod).
	Annotations map[string]string
	// LimitRange are the namespace's LimitRange bounds and Allocatable
	// the node's (0: unknown): with the policy's, what every applied
	// value is clamped to (apipolicy.Clamp).
	LimitRange  apipolicy.LimitRange
	Allocatable Resources
	// LastResize is when the agent last asked a step resize of the pod
	// (zero: never): the next waits a step, whatever triggers it.
	LastResize time.Time
	// Resize is the kubelet's word on the pod's last resize: "" (done or
	// none), "InProgress", "Deferred" or "Infeasible"; ResizeMessage says why.
	Resize        string
	ResizeMessage string
}

// States of a decision (the annotation's "state").
const (
	StateOff                 = "Off"
	StateConflict            = "Conflict"
	StateInvalid             = "InvalidPolicy" // the recommender refuses the policy's overrides
	StateNotAdjustable       = "NotAdjustable"
	StateInsufficientHistory = "InsufficientHistory"
	StatePaused              = "Paused"
	StateAvoidWindow         = "AvoidWindow"
	StateDryRun              = "DryRun"
	StateResizePending       = "ResizePending"
	StateStepWait            = "StepWait"
	StateUnchanged           = "Unchanged"
	StateResize              = "Resize"
)

// Notes on one resource of one container: why it does not change as the
// recommendation says.
const (
	NoteExclusiveCPUs      = "ExclusiveCPUs"
	NoteNoRequest          = "NoRequest" // requests cannot be added in place
	NoteWithinTolerance    = "WithinTolerance"
	NoteStepBounded        = "StepBounded"
	NoteUsageFloor         = "RaisedToUsageFloor"
	NoteLimitsNotRemovable = "LimitsNotRemovable"
	NoteCappedAtLimit      = "CappedAtLimit"
	NoteWouldChangeQoS     = "WouldChangeQoS"
	// NoteClamped prefixes the reason of the bound that moved a value
	// (apipolicy.Reason): "ClampedBy" + "PolicyMaxAllowed".
	NoteClamped = "ClampedBy"
)

// ExplainMerged is the explanation mode of a merged recommendation: how
// its target was chosen is the aggregator's to explain.
const ExplainMerged = "merged"

// Tunables of the safety rules.
const (
	// MemoryMargin is the head room memory keeps above usage (cgroup's
	// default refusal margin: v1 answers EBUSY below usage, v2 OOM-kills).
	MemoryMargin = 0.10
	// Tolerance: a request within this fraction of the recommendation is
	// left alone, so a recommendation wandering around a value costs no
	// resizes (the recommender's own hysteresis holds its target; this
	// band covers the distance between that target and the pod spec).
	Tolerance = 0.05
)

// Decision is what to do with one pod now, and why.
type Decision struct {
	Mode   Mode
	Policy string
	Preset string
	State  string
	Why    string
	// Apply: send the new requirements now (Containers[i].Changed).
	Apply bool
	// Warning: the pod's input is wrong (two policies, a recommender that
	// refuses the policy); the agent reports it with a Warning Event.
	Warning bool
	// Refused says which of the pod's annotations its policy does not
	// let it use ("" when none): the policy's values apply instead, and
	// the agent reports it with a Warning Event.
	Refused string
	// Clamped are the bounds (apipolicy.Clamp) that moved a value of
	// Containers[i].To: the policy's, the namespace's LimitRange, the
	// node's allocatable, the usage floor.
	Clamped    []apipolicy.Binding
	Containers []ContainerDecision
}

// ContainerDecision is one container's part of a Decision.
type ContainerDecision struct {
	Name, Key string
	// Recommendation is nil while the container has too little history.
	Recommendation *recommend.Recommendation
	// Nodes is how many nodes' samples the recommendation rests on: 0 for
	// the node's own, more when it is the aggregator's merged one.
	Nodes      int
	From, To   Requirements
	Changed    bool
	CPUNote    string
	MemoryNote string
}

// policyOf is the one policy of those selecting a pod, or the state when
// there is none or more than one (a Warning for two).
func policyOf(policies []*Policy) (*Policy, string, bool) {
	switch {
	case len(policies) > 1:
		return nil, StateConflict, true
	case len(policies) == 0:
		return nil, StateOff, false
	}
	return policies[0], "", false
}

// Effective is the one policy of those selecting a pod (nil: none, or
// more than one) and what the pod's annotations may change under it: the
// one rule of the policy compiler (Policy.ForPod), for the step decisions
// and the OOM path alike. It takes the two fields of Pod it reads, so
// that the OOM path needs no Pod.
func Effective(policies []*Policy, annotations map[string]string) (*Policy, apipolicy.Effective) {
	pol, _, _ := policyOf(policies)
	if pol == nil {
		return nil, apipolicy.Effective{Mode: ModeOff}
	}
	return pol, pol.ForPod(annotations)
}

// overrides are the policy's overrides with the pod's target saturation
// (already within the policy's podTargetSaturation: ForPod).
func overrides(pol *Policy, ts *float64) recommend.Overrides {
	over := pol.Overrides
	if ts != nil && pol.Preset != "vpa" { // the vpa engine has no saturation
		over.CPU.TargetSaturation, over.Memory.TargetSaturation = ts, ts
	}
	return over
}

// Decide decides for one pod at now, reading the engine at most once per
// step per workload container.
func Decide(e *Engine, p Pod, now time.Time) Decision {
	pol, state, warn := policyOf(p.Policies)
	d := Decision{Mode: ModeOff, State: state, Warning: warn}
	switch state {
	case StateConflict:
		names := ""
		for i, q := range p.Policies {
			if i > 0 {
				names += ", "
			}
			names += q.Name
		}
		d.Why = fmt.Sprintf("matched by %d RightsizePolicies (%s): neither applies until only one selects the pod", len(p.Policies), names)
		return d
	case StateOff:
		d.Why = "no RightsizePolicy selects the pod"
		return d
	}
	d.Policy, d.Preset = pol.Name, pol.Preset
	eff := pol.ForPod(p.Annotations)
	mode := eff.Mode
	d.Mode, d.Refused = mode, eff.Why()
	if mode == ModeOff {
		d.State, d.Why = StateOff, "mode Off"
		return d
	}
	if p.QoS == apipolicy.QoSBestEffort {
		d.State, d.Why = StateNotAdjustable, "BestEffort: the pod has no requests to size, and adding any would change its QoS class"
		return d
	}
	over := overrides(pol, eff.TargetSaturation)
	haveAll := true
	for _, c := range p.Containers {
		cd := ContainerDecision{Name: c.Name, Key: c.Key, From: c.Spec, To: c.Spec}
		rec, ok, err := e.Recommendation(pol.Preset, over, c.Key, now, pol.Step)
		if err != nil {
			d.State, d.Why, d.Warning = StateInvalid, err.Error(), true
			return d
		}
		enough := ok && time.Duration(rec.CPU.Explain.History) >= pol.MinHistory && time.Duration(rec.Memory.Explain.History) >= pol.MinHistory
		if m := c.Merged; m != nil && m.Preset == pol.Preset && eff.TargetSaturation == nil && (enough || m.History >= pol.MinHistory) {
			rec = recommend.Recommendation{Time: now, CPU: m.CPU, Memory: m.Memory}
			rec.CPU.Explain, rec.Memory.Explain = recommend.Explanation{Mode: ExplainMerged}, recommend.Explanation{Mode: ExplainMerged}
			enough, cd.Nodes = true, m.Nodes
		}
		if enough {
			cd.Recommendation = &rec
		} else {
			haveAll = false
		}
		d.Containers = append(d.Containers, cd)
	}
	if !haveAll {
		d.State, d.Why = StateInsufficientHistory, fmt.Sprintf("less than minHistory %v of usage for some container", pol.MinHistory)
		return d
	}
	for i, c := range p.Containers {
		target(&d.Containers[i], c, p.QoS, pol)
	}
	d.Clamped = bound(d.Containers, p, pol)
	qosGuarded := guardQoS(p, d.Containers)
	if qosGuarded {
		for i := range d.Containers {
			cd := &d.Containers[i]
			if cd.Changed {
				cd.To, cd.Changed = cd.From, false
				cd.CPUNote, cd.MemoryNote = NoteWouldChangeQoS, NoteWouldChangeQoS
			}
		}
	}
	changed := false
	for _, cd := range d.Containers {
		changed = changed || cd.Changed
	}
	switch {
	case !changed && qosGuarded:
		d.State, d.Why = StateUnchanged, "the recommendation would change the pod's QoS class: nothing changes"
		if len(d.Clamped) > 0 {
			d.Why += " (clamped: " + apipolicy.Bindings(d.Clamped) + ")"
		}
	case !changed && len(d.Clamped) > 0:
		d.State, d.Why = StateUnchanged, "the recommendation, clamped, is what the pod has: "+apipolicy.Bindings(d.Clamped)
	case !changed:
		d.State, d.Why = StateUnchanged, "requests are within the tolerance of the recommendation"
	case !mode.Applies():
		d.State, d.Why = StateDryRun, "dry run: recommended, not applied"
	case now.Before(pol.PausedUntil):
		d.State, d.Why = StatePaused, "policy paused until "+pol.PausedUntil.UTC().Format(time.RFC3339)
	case now.Before(eff.PausedUntil):
		d.State, d.Why = StatePaused, "pod paused until "+eff.PausedUntil.UTC().Format(time.RFC3339)
	case pol.InWindow(now) != "":
		d.State, d.Why = StateAvoidWindow, "in avoid window "+pol.InWindow(now)
	case p.Resize != "":
		d.State, d.Why = StateResizePending, "the last resize is "+p.Resize
		if p.ResizeMessage != "" {
			d.Why += ": " + p.ResizeMessage
		}
	case !p.LastResize.IsZero() && now.Before(p.LastResize.Add(pol.Step)):
		// Whatever made this decision come early (a policy, label or
		// annotation change), a pod is resized at most once a step.
		d.State, d.Why = StateStepWait, fmt.Sprintf("resized at %s: the next resize waits for the policy's step (%v)", p.LastResize.UTC().Format(time.RFC3339), pol.Step)
	default:
		d.State, d.Why, d.Apply = StateResize, "applying the recommendation", true
	}
	if len(d.Clamped) > 0 && (d.Apply || d.State == StateDryRun) {
		d.Why += "; clamped: " + apipolicy.Bindings(d.Clamped)
	}
	return d
}

// field is one of a container's four values, as apipolicy.Binding names
// it.
type field struct {
	resource, name string
	get            func(Requirements) float64
	set            func(*Requirements, float64)
}

var fields = []field{
	{"cpu", "request", func(r Requirements) float64 { return r.Requests.CPU }, func(r *Requirements, v float64) { r.Requests.CPU = v }},
	{"cpu", "limit", func(r Requirements) float64 { return r.Limits.CPU }, func(r *Requirements, v float64) { r.Limits.CPU = v }},
	{"memory", "request", func(r Requirements) float64 { return r.Requests.Memory }, func(r *Requirements, v float64) { r.Requests.Memory = v }},
	{"memory", "limit", func(r Requirements) float64 { return r.Limits.Memory }, func(r *Requirements, v float64) { r.Limits.Memory = v }},
}

// tidyMemoryLimit rounds a memory limit the clamp scaled with its request
// (KeepRatio: 3242493Mi × 512Mi / 1621247Mi is 1073741493 bytes) to
// whole MiB, the unit target() writes: to the nearest where that crosses
// no ceiling (the LimitRange's max and ratio, the node's allocatable),
// else down where that keeps it at or above its floors (usage, the
// request, the LimitRange's min).
func tidyMemoryLimit(cd *ContainerDecision, c Container, p Pod) {
	lim := cd.To.Limits.Memory
	if lim <= 0 || lim == cd.From.Limits.Memory || lim == cd.To.Requests.Memory || math.Mod(lim, oneMiB) == 0 {
		return // unset, unchanged, paired with its request (Guaranteed), or whole
	}
	lr := p.LimitRange
	if up := math.Ceil(lim/oneMiB) * oneMiB; up-lim < lim-math.Floor(lim/oneMiB)*oneMiB {
		fits := func(ceiling float64) bool { return ceiling <= 0 || up <= ceiling }
		if fits(lr.Max.Memory) && fits(p.Allocatable.Memory) && fits(lr.MaxLimitRequestRatio.Memory*cd.To.Requests.Memory) && up <= apipolicy.MaxMemory {
			cd.To.Limits.Memory = up
			return
		}
	}
	down := math.Floor(lim/oneMiB) * oneMiB
	if down >= floorOf(c).Limits.Memory && down >= cd.To.Requests.Memory && down >= lr.Min.Memory && down > 0 {
		cd.To.Limits.Memory = down
	}
}

// floorOf is the least memory a container may get: its working set (the
// request) and its usage (the limit) with the kernel's margin, in the
// MiB target() rounds to.
func floorOf(c Container) Requirements {
	return Requirements{Requests: Resources{Memory: roundMemory(c.WorkingSet * (1 + MemoryMargin))},
		Limits: Resources{Memory: roundMemory(max(c.Usage, c.WorkingSet) * (1 + MemoryMargin))}}
}

// bound passes the values decided for the pod's containers (cds[i].To,
// in p.Containers' order) through the one clamp, apipolicy.Clamp: finite,
// at least the usage floor, within the policy's bounds, the namespace's
// LimitRange and the node's allocatable. Only the values the decision
// changes take the clamp's result: one it leaves as the spec has it
// (exclusive CPUs, a request that cannot be added) stays. It returns the
// bounds that moved a changed value, and notes them on the container.
func bound(cds []ContainerDecision, p Pod, pol *Policy) []apipolicy.Binding {
	cp := apipolicy.ClampPod{Guaranteed: p.QoS == apipolicy.QoSGuaranteed, KeepRatio: pol.Limits == LimitsKeepRatio}
	changes := false
	for i, c := range p.Containers {
		cp.Containers = append(cp.Containers, apipolicy.ClampContainer{Name: c.Name, Current: c.Spec, Want: cds[i].To, Floor: floorOf(c)})
		changes = changes || cds[i].To != cds[i].From
	}
	if !changes {
		return nil
	}
	out, binds := apipolicy.Clamp(cp, pol.Bounds(p.LimitRange, p.Allocatable))
	moved := map[[3]string]bool{}
	for i := range cds {
		cd := &cds[i]
		for _, f := range fields {
			if f.get(cd.To) == f.get(cd.From) {
				continue
			}
			moved[[3]string{cd.Name, f.resource, f.name}] = true
			f.set(&cd.To, f.get(out[i]))
		}
		tidyMemoryLimit(cd, p.Containers[i], p)
		cd.Changed = cd.To != cd.From
	}
	var kept []apipolicy.Binding
	for _, b := range binds {
		if !moved[[3]string{b.Container, b.Resource, b.Field}] {
			continue
		}
		kept = append(kept, b)
		for i := range cds {
			if cds[i].Name != b.Container {
				continue
			}
			if b.Resource == "cpu" {
				cds[i].CPUNote = NoteClamped + string(b.Reason)
			} else {
				cds[i].MemoryNote = NoteClamped + string(b.Reason)
			}
		}
	}
	return kept
}

// target sets cd.To from the recommendation under the safety rules.
func target(cd *ContainerDecision, c Container, qos string, pol *Policy) {
	rec := cd.Recommendation
	guaranteed := qos == apipolicy.QoSGuaranteed
	// CPU.
	switch {
	case c.ExclusiveCPUs:
		cd.CPUNote = NoteExclusiveCPUs
	case c.Spec.Requests.CPU == 0:
		cd.CPUNote = NoteNoRequest
	default:
		req, note := step(c.Spec.Requests.CPU, rec.CPU.Target, pol.MaxChangePerStep)
		cd.CPUNote = note
		if within(c.Spec.Requests.CPU, req) {
			cd.CPUNote = NoteWithinTolerance
			break
		}
		lim, req, lnote := limitFor(c.Spec.Requests.CPU, c.Spec.Limits.CPU, req, pol.Limits, guaranteed)
		if lnote != "" {
			cd.CPUNote = lnote
		}
		if within(c.Spec.Requests.CPU, req) && lim == c.Spec.Limits.CPU {
			cd.CPUNote = NoteWithinTolerance
			break
		}
		cd.To.Requests.CPU, cd.To.Limits.CPU, cd.Changed = roundCPU(req), roundCPU(lim), true
	}
	// Memory: never below what the container uses now.
	if c.Spec.Requests.Memory == 0 {
		cd.MemoryNote = NoteNoRequest
		return
	}
	req, note := step(c.Spec.Requests.Memory, rec.Memory.Target, pol.MaxChangePerStep)
	if floor := c.WorkingSet * (1 + MemoryMargin); req < floor {
		req, note = floor, NoteUsageFloor
	}
	if within(c.Spec.Requests.Memory, req) {
		cd.MemoryNote = NoteWithinTolerance
		return
	}
	lim, req, lnote := limitFor(c.Spec.Requests.Memory, c.Spec.Limits.Memory, req, pol.Limits, guaranteed)
	if lnote != "" {
		note = lnote
	}
	if floor := math.Max(c.Usage, c.WorkingSet) * (1 + MemoryMargin); lim > 0 && lim < floor {
		// The kernel (or the kubelet, which skips it) would not take a
		// limit below usage: keep the limit at the floor.
		lim, note = floor, NoteUsageFloor
		if guaranteed {
			req = lim
		}
	}
	cd.MemoryNote = note
	if within(c.Spec.Requests.Memory, req) && roundMemory(lim) == c.Spec.Limits.Memory {
		cd.MemoryNote = NoteWithinTolerance
		return
	}
	cd.To.Requests.Memory, cd.To.Limits.Memory, cd.Changed = roundMemory(req), roundMemory(lim), true
}

// step bounds a change of cur toward want by maxChange (a fraction; 0: no
// bound).
func step(cur, want, maxChange float64) (float64, string) {
	if maxChange <= 0 || cur <= 0 {
		return want, ""
	}
	lo, hi := cur*(1-maxChange), cur*(1+maxChange)
	switch {
	case want < lo:
		return lo, NoteStepBounded
	case want > hi:
		return hi, NoteStepBounded
	}
	return want, ""
}

func within(cur, want float64) bool {
	return cur > 0 && math.Abs(want-cur) <= Tolerance*cur
}

// limitFor is the limit for a new request under the limits policy, and the
// request once the limit bounds it. A Guaranteed pod's limit is its
// request, whatever the policy says: its QoS class must not change.
func limitFor(curReq, curLim, req float64, lp Limits, guaranteed bool) (lim, newReq float64, note string) {
	switch {
	case guaranteed:
		return req, req, ""
	case curLim == 0:
		return 0, req, "" // no limit: none is added
	case lp == LimitsKeepRatio:
		return req * curLim / curReq, req, ""
	}
	// Keep, or Unset (in place a limit cannot be removed: the API refuses
	// it), so the limit stays and bounds the request.
	if lp == LimitsUnset {
		note = NoteLimitsNotRemovable
	}
	if req > curLim {
		return curLim, curLim, NoteCappedAtLimit
	}
	return curLim, req, note
}

// roundCPU rounds up to whole millicores (internal/millicpu), roundMemory
// to whole MiB: the units requests are written in.
var roundCPU = millicpu.Cores

func roundMemory(v float64) float64 {
	const mib = 1 << 20
	if v <= 0 {
		return 0
	}
	return math.Ceil(v/mib-1e-9) * mib
}

// guardQoS says whether the changes would change the pod's QoS class.
// p.QoS counts the init containers, whose resources are not in the
// decision; their class does not change. The pod's class stays when its
// app containers' stays, or when theirs after is the pod's (Guaranteed
// only when the pod was; Burstable app containers make a Burstable pod
// whatever the init containers set). Compared with p.QoS alone, a pod
// whose Guaranteed app containers stay Guaranteed, made Burstable only by
// an init container, read as "would change QoS" at every step and was
// never resized.
func guardQoS(p Pod, cds []ContainerDecision) bool {
	before, after := make([]Requirements, len(cds)), make([]Requirements, len(cds))
	for i, cd := range cds {
		before[i], after[i] = cd.From, cd.To
	}
	to := apipolicy.QoSOf(after)
	return to != apipolicy.QoSOf(before) && to != p.QoS
}
