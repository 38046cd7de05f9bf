package policy

import (
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/recommend"
)

// policy.go: a RightsizePolicy as the agent, the aggregator and the
// webhook act on it, its defaults and the checks the CRD schema cannot
// make.

// Sentinels.
var (
	ErrInvalidPolicy     = errors.New("invalid rightsize policy")
	ErrInvalidAnnotation = errors.New("invalid rightsize annotation")
)

// Mode is what is done for the pods a policy selects.
type Mode string

const (
	ModeOff     Mode = Mode(v1alpha1.ModeOff)
	ModeDryRun  Mode = Mode(v1alpha1.ModeDryRun)
	ModeInPlace Mode = Mode(v1alpha1.ModeInPlace)
	ModeAuto    Mode = Mode(v1alpha1.ModeAuto) // InPlace on running pods; new pods through the webhook
)

// Applies says whether the mode changes running pods.
func (m Mode) Applies() bool { return m == ModeInPlace || m == ModeAuto }

// strength orders the modes by what they do: Off < DryRun < InPlace <
// Auto (Auto is InPlace and, besides, the webhook's admission). An
// unknown mode is weaker than Off.
func (m Mode) strength() int {
	switch m {
	case ModeOff:
		return 0
	case ModeDryRun:
		return 1
	case ModeInPlace:
		return 2
	case ModeAuto:
		return 3
	}
	return -1
}

// AtMost says whether m does no more than n.
func (m Mode) AtMost(n Mode) bool { return m.strength() >= 0 && m.strength() <= n.strength() }

// Limits is what happens to limits when requests change.
type Limits string

const (
	LimitsKeepRatio Limits = Limits(v1alpha1.LimitsKeepRatio)
	LimitsUnset     Limits = Limits(v1alpha1.LimitsUnset)
	LimitsKeep      Limits = Limits(v1alpha1.LimitsKeep)
)

// Defaults of a policy's fields that are left out: the CRD's defaults,
// which the API server fills in; a policy that did not come through it
// (a test, an object read from a file) gets the same from Check.
const (
	DefaultStep       = time.Hour
	DefaultMinHistory = 24 * time.Hour
)

// Range is a closed interval.
type Range struct{ Min, Max float64 }

// Contains says whether v is in [Min, Max] (never for NaN).
func (r Range) Contains(v float64) bool { return v >= r.Min && v <= r.Max }

// Policy is one RightsizePolicy, compiled: quantities are cores and bytes,
// defaults filled, everything the schema cannot check checked.
type Policy struct {
	Name       string
	Generation int64
	Mode       Mode
	Preset     string
	// Overrides are the preset's overrides, CPU in cores and memory in
	// bytes; MinHistory is always set (to MinHistory).
	Overrides recommend.Overrides
	// OOMFactor raises memory after an OOM kill; nil: the preset's.
	OOMFactor *float64
	// MaxChangePerStep bounds a change as a fraction of the current value
	// (0: no bound beyond the recommender's own).
	MaxChangePerStep float64
	Step             time.Duration
	MinHistory       time.Duration
	Limits           Limits
	PausedUntil      time.Time
	Avoid            []Window
	// PodTargetSaturation is the range a pod's target-saturation
	// annotation may choose in.
	PodTargetSaturation Range
	// AllowPodModeOverride lets a pod's resize annotation choose a mode
	// at most as strong as Mode.
	AllowPodModeOverride bool
	// MaxOOMBumpsPerDay bounds the OOM bumps of one container in 24 h.
	// Compile fills the API's default (3); a Policy built in Go states
	// it (0: no bumps).
	MaxOOMBumpsPerDay int

	// Source is the object this was compiled from (nil for a policy
	// built in Go); read only.
	Source *v1alpha1.RightsizePolicy
	// nsSel and podSel are the selectors (nil: everything); nsKeys are
	// the label keys nsSel reads (for a namespace not cached yet).
	nsSel, podSel labels.Selector
	nsKeys        []string
}

// Window is a recurring time without changes.
type Window struct {
	Spec     string
	Schedule cron.Schedule
	Duration time.Duration
}

// ParseWindow reads a cron schedule (five fields or a @descriptor, UTC)
// and a duration.
func ParseWindow(spec string, d time.Duration) (Window, error) {
	if d <= 0 || d > 720*time.Hour {
		return Window{}, fmt.Errorf("%w: avoid window %q: duration %v not in (0, 720h]", ErrInvalidPolicy, spec, d)
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return Window{}, fmt.Errorf("%w: avoid window schedule %q: %v", ErrInvalidPolicy, spec, err)
	}
	return Window{Spec: spec, Schedule: s, Duration: d}, nil
}

// Covers says whether t falls in one of the window's occurrences.
func (w Window) Covers(t time.Time) bool {
	// A start in (t − Duration, t] covers t; Next is strictly after its
	// argument, so the first start after t − Duration is the one to check.
	s := w.Schedule.Next(t.UTC().Add(-w.Duration))
	return !s.IsZero() && !s.After(t.UTC())
}

// InWindow names the avoid window covering now ("" when none does).
func (p *Policy) InWindow(now time.Time) string {
	for _, w := range p.Avoid {
		if w.Covers(now) {
			return fmt.Sprintf("%q for %v", w.Spec, w.Duration)
		}
	}
	return ""
}

// Check validates what the CRD schema cannot (the preset exists, the
// overrides fit it, bounds are finite and ordered) and fills defaults.
// Compile calls it; a Policy built in Go must pass it before use.
func (p *Policy) Check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidPolicy, p.Name, fmt.Sprintf(format, args...))
	}
	if p.Preset == "" {
		p.Preset = recommend.DefaultPreset
	}
	switch p.Mode {
	case ModeOff, ModeDryRun, ModeInPlace, ModeAuto:
	default:
		return bad("mode %q", p.Mode)
	}
	switch p.Limits {
	case "":
		p.Limits = LimitsKeepRatio
	case LimitsKeepRatio, LimitsUnset, LimitsKeep:
	default:
		return bad("limits %q", p.Limits)
	}
	if p.Step == 0 {
		p.Step = DefaultStep
	}
	if p.Step < time.Second {
		return bad("step %v below 1s", p.Step)
	}
	if p.MinHistory < 0 {
		return bad("minHistory %v", p.MinHistory)
	}
	if mh := p.Overrides.MinHistory; mh == nil || time.Duration(*mh) != p.MinHistory {
		// The recommender reads minHistory from its overrides: one value.
		v := recommend.Duration(p.MinHistory)
		p.Overrides.MinHistory = &v
	}
	if !(p.MaxChangePerStep >= 0 && p.MaxChangePerStep <= 1) {
		return bad("maxChangePerStep %v not in [0, 1]", p.MaxChangePerStep)
	}
	if f := p.OOMFactor; f != nil && !(*f > 0 && *f <= 4) {
		return bad("oomFactor %v not in (0, 4]", *f)
	}
	if p.PodTargetSaturation == (Range{}) {
		p.PodTargetSaturation = Range{Min: v1alpha1.DefaultPodTargetSaturationMin, Max: v1alpha1.DefaultPodTargetSaturationMax}
	}
	if r := p.PodTargetSaturation; !(r.Min > 0 && r.Min <= r.Max && r.Max <= 1) {
		return bad("podTargetSaturation [%v, %v] not within (0, 1] and ordered", r.Min, r.Max)
	}
	if p.MaxOOMBumpsPerDay < 0 || p.MaxOOMBumpsPerDay > 24 {
		return bad("maxOOMBumpsPerDay %d not in [0, 24]", p.MaxOOMBumpsPerDay)
	}
	for _, r := range []struct {
		name string
		o    recommend.ResourceOverrides
		max  float64
	}{{"cpu", p.Overrides.CPU, MaxCPU}, {"memory", p.Overrides.Memory, MaxMemory}} {
		lo, hi := 0.0, r.max
		if v := r.o.MinAllowed; v != nil {
			if !(*v >= 0 && *v <= r.max) {
				return bad("%s.minAllowed %v not in [0, %v]", r.name, *v, r.max)
			}
			lo = *v
		}
		if v := r.o.MaxAllowed; v != nil {
			if !(*v > 0 && *v <= r.max) {
				return bad("%s.maxAllowed %v not in (0, %v]", r.name, *v, r.max)
			}
			hi = *v
		}
		if lo > hi {
			return bad("%s.minAllowed %v above maxAllowed %v", r.name, lo, hi)
		}
	}
	base, err := recommend.Preset(p.Preset)
	if err != nil {
		return bad("preset: %v", err)
	}
	if _, err := base.WithOverrides(p.Overrides); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidPolicy, p.Name, err)
	}
	return nil
}

// Allowed are the policy's bounds on a request: minAllowed and maxAllowed
// (0 and the package's ceilings, MaxCPU and MaxMemory, when unset).
func (p *Policy) Allowed() (lo, hi Values) {
	hi = Values{CPU: MaxCPU, Memory: MaxMemory}
	if v := p.Overrides.CPU.MinAllowed; v != nil {
		lo.CPU = *v
	}
	if v := p.Overrides.CPU.MaxAllowed; v != nil {
		hi.CPU = *v
	}
	if v := p.Overrides.Memory.MinAllowed; v != nil {
		lo.Memory = *v
	}
	if v := p.Overrides.Memory.MaxAllowed; v != nil {
		hi.Memory = *v
	}
	return lo, hi
}

// OOMFactorOr is the policy's OOM factor, or the preset's.
func (p *Policy) OOMFactorOr() float64 {
	if p.OOMFactor != nil {
		return *p.OOMFactor
	}
	if base, err := recommend.Preset(p.Preset); err == nil {
		return base.OOMFactor
	}
	return 0
}

// MayBumpOOM says whether one more OOM bump is allowed after bumped
// bumps of the same container in the last 24 hours.
func (p *Policy) MayBumpOOM(bumped int) bool { return bumped < p.MaxOOMBumpsPerDay }
