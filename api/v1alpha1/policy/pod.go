package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cgpilot/cgpilot/api/v1alpha1"
)

// pod.go: what a pod's own cgpilot.io annotations may change under its
// policy. A tenant who can edit a pod can set them, so they may only ever
// narrow what the policy does: a weaker mode where the policy allows
// choosing one, a target saturation within the policy's bounds, a pause.

// maxAnnotationBytes bounds what is parsed of one value.
const maxAnnotationBytes = 256

// PodOverride is what a pod's right-sizing annotations ask.
type PodOverride struct {
	// Mode is "" (the policy's), or ModeOff, ModeDryRun, ModeInPlace.
	Mode             Mode
	TargetSaturation *float64
	PausedUntil      time.Time
}

// parseAnnotation reads one right-sizing annotation into o; it returns
// why the value does not parse ("" when it does).
func parseAnnotation(o *PodOverride, k, v string) string {
	if len(v) > maxAnnotationBytes {
		return fmt.Sprintf("%d bytes, at most %d", len(v), maxAnnotationBytes)
	}
	switch k {
	case v1alpha1.AnnotationResize:
		switch v {
		case v1alpha1.ResizeOff:
			o.Mode = ModeOff
		case v1alpha1.ResizeDryRun:
			o.Mode = ModeDryRun
		case v1alpha1.ResizeInPlace:
			o.Mode = ModeInPlace
		default:
			return "want off, dry-run or in-place"
		}
	case v1alpha1.AnnotationTargetSaturation:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && f <= 1) || v != strings.TrimSpace(v) {
			return "want a fraction in (0, 1]"
		}
		o.TargetSaturation = &f
	case v1alpha1.AnnotationResizePausedUntil:
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return "want an RFC 3339 time"
		}
		o.PausedUntil = t
	}
	return ""
}

// podAnnotations are the annotations a pod may set, in the order they are
// read.
var podAnnotations = []string{v1alpha1.AnnotationResize, v1alpha1.AnnotationTargetSaturation, v1alpha1.AnnotationResizePausedUntil}

// ParsePodOverride reads a pod's right-sizing annotations strictly: the
// first value that does not parse is an error wrapping
// ErrInvalidAnnotation, naming it. It says what the pod asks, not what its
// policy lets it have (ForPod).
func ParsePodOverride(ann map[string]string) (PodOverride, error) {
	var o PodOverride
	for _, k := range podAnnotations {
		if v, ok := ann[k]; ok {
			if why := parseAnnotation(&o, k, v); why != "" {
				if len(v) > 64 {
					v = v[:64] + "…"
				}
				return PodOverride{}, fmt.Errorf("%w: %s=%q: %s", ErrInvalidAnnotation, k, v, why)
			}
		}
	}
	return o, nil
}

// Refusal is one annotation a pod may not use, and why.
type Refusal struct{ Annotation, Value, Reason string }

func (r Refusal) String() string {
	v := r.Value
	if len(v) > 64 {
		v = v[:64] + "…"
	}
	return fmt.Sprintf("%s=%q: %s", r.Annotation, v, r.Reason)
}

// Effective is what a pod gets under its policy: the mode, the target
// saturation and the pause in force, and each annotation refused (for a
// Warning Event: the policy's value applies instead).
type Effective struct {
	Mode Mode
	// TargetSaturation is the pod's, for both resources; nil: the
	// policy's.
	TargetSaturation *float64
	// PausedUntil is the pod's own pause (the policy's is p.PausedUntil).
	PausedUntil time.Time
	Refused     []Refusal
}

// Why joins the refusals into one message ("" when there is none).
func (e Effective) Why() string {
	parts := make([]string, len(e.Refused))
	for i, r := range e.Refused {
		parts[i] = r.String()
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ") + "; the policy's values apply"
}

// ForPod decides what a pod's annotations may do under p. Each
// annotation is judged alone: one that does not parse or that would widen
// the policy is refused and the policy's value applies; the others keep
// their effect. A mode stronger than the policy's, or any other mode
// where the policy does not set allowPodModeOverride, is refused (the
// policy's own mode, asked again, is not); a target saturation outside
// the policy's podTargetSaturation, or under the vpa preset (which has
// none), is refused; a pause is always accepted.
func (p *Policy) ForPod(ann map[string]string) Effective {
	e := Effective{Mode: p.Mode}
	refuse := func(k, why string) { e.Refused = append(e.Refused, Refusal{Annotation: k, Value: ann[k], Reason: why}) }
	for _, k := range podAnnotations {
		v, ok := ann[k]
		if !ok {
			continue
		}
		var o PodOverride
		if why := parseAnnotation(&o, k, v); why != "" {
			refuse(k, why)
			continue
		}
		switch k {
		case v1alpha1.AnnotationResize:
			switch {
			case o.Mode == p.Mode:
			case !p.AllowPodModeOverride:
				refuse(k, fmt.Sprintf("policy %s does not let pods choose their mode (allowPodModeOverride)", p.Name))
			case !o.Mode.AtMost(p.Mode):
				refuse(k, fmt.Sprintf("mode %s is stronger than policy %s's %s", o.Mode, p.Name, p.Mode))
			default:
				e.Mode = o.Mode
			}
		case v1alpha1.AnnotationTargetSaturation:
			switch r := p.PodTargetSaturation; {
			case p.Preset == "vpa":
				refuse(k, "the vpa preset has no target saturation")
			case !r.Contains(*o.TargetSaturation):
				refuse(k, fmt.Sprintf("outside policy %s's podTargetSaturation [%v, %v]", p.Name, r.Min, r.Max))
			default:
				e.TargetSaturation = o.TargetSaturation
			}
		case v1alpha1.AnnotationResizePausedUntil:
			e.PausedUntil = o.PausedUntil
		}
	}
	return e
}
