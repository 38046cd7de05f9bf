package rightsize

import (
	"fmt"
	"math"
	"time"

	"github.com/cgpilot/cgpilot/recommend"
)

// Resources of one container, in cores and bytes; 0 is unset.
type Resources struct{ CPU, Memory float64 }

// Requirements are a container's requests and limits.
type Requirements struct{ Requests, Limits Resources }

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
	QoS                  string // Guaranteed | Burstable | BestEffort
	Containers           []Container
	// Policies are the RightsizePolicies whose selectors match the pod.
	Policies    []*Policy
	Override    PodOverride
	OverrideErr error
	// Resize is the kubelet's word on the pod's last resize: "" (done or
	// none), "InProgress", "Deferred" or "Infeasible"; ResizeMessage says why.
	Resize        string
	ResizeMessage string
}

// States of a decision (the annotation's "state").
const (
	StateOff                 = "Off"
	StateConflict            = "Conflict"
	StateInvalid             = "InvalidAnnotation"
	StateNotAdjustable       = "NotAdjustable"
	StateInsufficientHistory = "InsufficientHistory"
	StatePaused              = "Paused"
	StateAvoidWindow         = "AvoidWindow"
	StateDryRun              = "DryRun"
	StateResizePending       = "ResizePending"
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
	// Warning: the pod's input is wrong (two policies, a bad annotation);
	// the agent reports it with a Warning Event.
	Warning    bool
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

// effective is the policy in force for a pod and the mode after the pod's
// own annotation.
func effective(p Pod) (*Policy, Mode, string, bool) {
	switch {
	case p.OverrideErr != nil:
		return nil, ModeOff, StateInvalid, true
	case len(p.Policies) > 1:
		return nil, ModeOff, StateConflict, true
	case len(p.Policies) == 0:
		return nil, ModeOff, StateOff, false
	}
	pol := p.Policies[0]
	mode := pol.Mode
	if p.Override.Mode != "" {
		mode = p.Override.Mode
	}
	return pol, mode, "", false
}

// overrides are the policy's overrides with the pod's target saturation.
func overrides(pol *Policy, o PodOverride) recommend.Overrides {
	over := pol.Overrides
	if ts := o.TargetSaturation; ts != nil && pol.Preset != "vpa" { // the vpa engine has no saturation
		over.CPU.TargetSaturation, over.Memory.TargetSaturation = ts, ts
	}
	return over
}

// Decide decides for one pod at now, reading the engine at most once per
// step per workload container.
func Decide(e *Engine, p Pod, now time.Time) Decision {
	pol, mode, state, warn := effective(p)
	d := Decision{Mode: mode, State: state, Warning: warn}
	switch state {
	case StateInvalid:
		d.Why = p.OverrideErr.Error() + "; nothing changes"
		return d
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
	if mode == ModeOff {
		d.State, d.Why = StateOff, "mode Off"
		return d
	}
	if p.QoS == "BestEffort" {
		d.State, d.Why = StateNotAdjustable, "BestEffort: the pod has no requests to size, and adding any would change its QoS class"
		return d
	}
	over := overrides(pol, p.Override)
	haveAll := true
	for _, c := range p.Containers {
		cd := ContainerDecision{Name: c.Name, Key: c.Key, From: c.Spec, To: c.Spec}
		rec, ok, err := e.Recommendation(pol.Preset, over, c.Key, now, pol.Step)
		if err != nil {
			d.State, d.Why, d.Warning = StateInvalid, err.Error(), true
			return d
		}
		enough := ok && time.Duration(rec.CPU.Explain.History) >= pol.MinHistory && time.Duration(rec.Memory.Explain.History) >= pol.MinHistory
		if m := c.Merged; m != nil && m.Preset == pol.Preset && p.Override.TargetSaturation == nil && (enough || m.History >= pol.MinHistory) {
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
	if guardQoS(p, d.Containers) {
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
	case !changed:
		d.State, d.Why = StateUnchanged, "requests are within the tolerance of the recommendation"
	case !mode.Applies():
		d.State, d.Why = StateDryRun, "dry run: recommended, not applied"
	case now.Before(pol.PausedUntil):
		d.State, d.Why = StatePaused, "policy paused until "+pol.PausedUntil.UTC().Format(time.RFC3339)
	case now.Before(p.Override.PausedUntil):
		d.State, d.Why = StatePaused, "pod paused until "+p.Override.PausedUntil.UTC().Format(time.RFC3339)
	case pol.InWindow(now) != "":
		d.State, d.Why = StateAvoidWindow, "in avoid window "+pol.InWindow(now)
	case p.Resize != "":
		d.State, d.Why = StateResizePending, "the last resize is "+p.Resize
		if p.ResizeMessage != "" {
			d.Why += ": " + p.ResizeMessage
		}
	default:
		d.State, d.Why, d.Apply = StateResize, "applying the recommendation", true
	}
	return d
}

// target sets cd.To from the recommendation under the safety rules.
func target(cd *ContainerDecision, c Container, qos string, pol *Policy) {
	rec := cd.Recommendation
	guaranteed := qos == "Guaranteed"
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

// roundCPU rounds up to whole millicores, roundMemory to whole MiB: the
// units requests are written in.
func roundCPU(v float64) float64 {
	if v <= 0 {
		return 0
	}
	return math.Ceil(v*1000-1e-6) / 1000
}

func roundMemory(v float64) float64 {
	const mib = 1 << 20
	if v <= 0 {
		return 0
	}
	return math.Ceil(v/mib-1e-9) * mib
}

// guardQoS says whether the changes would change the pod's QoS class.
func guardQoS(p Pod, cds []ContainerDecision) bool {
	after := make([]Requirements, len(cds))
	for i, cd := range cds {
		after[i] = cd.To
	}
	return qosOf(after) != p.QoS
}

// qosOf is the Kubernetes QoS rule over a pod's containers.
func qosOf(cs []Requirements) string {
	any, guaranteed := false, true
	for _, c := range cs {
		for _, r := range [][2]float64{{c.Requests.CPU, c.Limits.CPU}, {c.Requests.Memory, c.Limits.Memory}} {
			req, lim := r[0], r[1]
			if req > 0 || lim > 0 {
				any = true
			}
			if lim == 0 || (req > 0 && req != lim) {
				guaranteed = false
			}
		}
	}
	switch {
	case !any:
		return "BestEffort"
	case guaranteed:
		return "Guaranteed"
	}
	return "Burstable"
}
