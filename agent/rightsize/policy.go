package rightsize

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/cgpilot/cgpilot/recommend"
)

// Sentinels.
var (
	ErrInvalidPolicy     = errors.New("invalid rightsize policy")
	ErrInvalidAnnotation = errors.New("invalid rightsize annotation")
)

// Mode is what the agent does for a pod.
type Mode string

const (
	ModeOff     Mode = "Off"
	ModeDryRun  Mode = "DryRun"
	ModeInPlace Mode = "InPlace"
	ModeAuto    Mode = "Auto" // InPlace on running pods; new pods through a webhook
)

// applies says whether the mode changes running pods.
func (m Mode) applies() bool { return m == ModeInPlace || m == ModeAuto }

// Limits is what happens to limits when requests change.
type Limits string

const (
	LimitsKeepRatio Limits = "KeepRatio"
	LimitsUnset     Limits = "Unset"
	LimitsKeep      Limits = "Keep"
)

// Policy is a RightsizePolicy as the agent acts on it.
type Policy struct {
	Name       string
	Generation int64
	Mode       Mode
	Preset     string
	Overrides  recommend.Overrides
	// OOMFactor raises memory after an OOM kill (see OOMLimit); nil: the
	// preset's.
	OOMFactor *float64
	// MaxChangePerStep bounds a change as a fraction of the current value
	// (0: no bound beyond the recommender's own).
	MaxChangePerStep float64
	Step             time.Duration
	MinHistory       time.Duration
	Limits           Limits
	PausedUntil      time.Time
	Avoid            []Window
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

// covers says whether t falls in one of the window's occurrences.
func (w Window) covers(t time.Time) bool {
	// A start in (t − Duration, t] covers t; Next is strictly after its
	// argument, so the first start after t − Duration is the one to check.
	s := w.Schedule.Next(t.UTC().Add(-w.Duration))
	return !s.IsZero() && !s.After(t.UTC())
}

// Defaults of a policy's fields that are left out.
const (
	DefaultStep       = time.Hour
	DefaultMinHistory = 24 * time.Hour
)

// Check validates what the CRD schema cannot (the preset exists, the
// overrides fit it), filling defaults.
func (p *Policy) Check() error {
	if p.Preset == "" {
		p.Preset = recommend.DefaultPreset
	}
	base, err := recommend.Preset(p.Preset)
	if err != nil {
		return fmt.Errorf("%w: %s: preset: %v", ErrInvalidPolicy, p.Name, err)
	}
	if _, err := base.WithOverrides(p.Overrides); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidPolicy, p.Name, err)
	}
	switch p.Mode {
	case ModeOff, ModeDryRun, ModeInPlace, ModeAuto:
	default:
		return fmt.Errorf("%w: %s: mode %q", ErrInvalidPolicy, p.Name, p.Mode)
	}
	switch p.Limits {
	case "":
		p.Limits = LimitsKeepRatio
	case LimitsKeepRatio, LimitsUnset, LimitsKeep:
	default:
		return fmt.Errorf("%w: %s: limits %q", ErrInvalidPolicy, p.Name, p.Limits)
	}
	if p.Step == 0 {
		p.Step = DefaultStep
	}
	if p.Step < time.Second {
		return fmt.Errorf("%w: %s: step %v below 1s", ErrInvalidPolicy, p.Name, p.Step)
	}
	if p.MinHistory < 0 {
		return fmt.Errorf("%w: %s: minHistory %v", ErrInvalidPolicy, p.Name, p.MinHistory)
	}
	if p.MaxChangePerStep < 0 || p.MaxChangePerStep > 1 {
		return fmt.Errorf("%w: %s: maxChangePerStep %v not in [0, 1]", ErrInvalidPolicy, p.Name, p.MaxChangePerStep)
	}
	if f := p.OOMFactor; f != nil && !(*f > 0 && *f <= 4) {
		return fmt.Errorf("%w: %s: oomFactor %v not in (0, 4]", ErrInvalidPolicy, p.Name, *f)
	}
	return nil
}

// PodOverride is what a pod's own annotations ask.
type PodOverride struct {
	// Mode is "" (the policy's), or ModeOff, ModeDryRun, ModeInPlace.
	Mode             Mode
	TargetSaturation *float64
	PausedUntil      time.Time
}

// Pod annotations (api/v1alpha1 names them; values here).
const (
	annResize           = "cgpilot.io/resize"
	annTargetSaturation = "cgpilot.io/target-saturation"
	annPausedUntil      = "cgpilot.io/resize-paused-until"
)

// maxAnnotationBytes bounds what is parsed of one value.
const maxAnnotationBytes = 256

// ParsePodOverride reads a pod's right-sizing annotations strictly.
func ParsePodOverride(ann map[string]string) (PodOverride, error) {
	var o PodOverride
	bad := func(k, v, why string) error {
		if len(v) > 64 {
			v = v[:64] + "…"
		}
		return fmt.Errorf("%w: %s=%q: %s", ErrInvalidAnnotation, k, v, why)
	}
	for _, k := range []string{annResize, annTargetSaturation, annPausedUntil} {
		if v, ok := ann[k]; ok && len(v) > maxAnnotationBytes {
			return PodOverride{}, bad(k, v, fmt.Sprintf("%d bytes, at most %d", len(v), maxAnnotationBytes))
		}
	}
	if v, ok := ann[annResize]; ok {
		switch v {
		case "off":
			o.Mode = ModeOff
		case "dry-run":
			o.Mode = ModeDryRun
		case "in-place":
			o.Mode = ModeInPlace
		default:
			return PodOverride{}, bad(annResize, v, "want off, dry-run or in-place")
		}
	}
	if v, ok := ann[annTargetSaturation]; ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(f > 0 && f <= 1) || v != strings.TrimSpace(v) {
			return PodOverride{}, bad(annTargetSaturation, v, "want a fraction in (0, 1]")
		}
		o.TargetSaturation = &f
	}
	if v, ok := ann[annPausedUntil]; ok {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return PodOverride{}, bad(annPausedUntil, v, "want an RFC 3339 time")
		}
		o.PausedUntil = t
	}
	return o, nil
}
