package policy

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/recommend"
)

// The tests of ParsePodOverride, ParseWindow and Check came with the code
// from agent/rightsize.

func TestParsePodOverride(t *testing.T) {
	o, err := ParsePodOverride(map[string]string{v1alpha1.AnnotationResize: "dry-run", v1alpha1.AnnotationTargetSaturation: "0.7", v1alpha1.AnnotationResizePausedUntil: "2026-12-24T00:00:00Z"})
	if err != nil || o.Mode != ModeDryRun || *o.TargetSaturation != 0.7 || o.PausedUntil.Day() != 24 {
		t.Fatalf("%+v %v", o, err)
	}
	for _, bad := range []map[string]string{
		{v1alpha1.AnnotationResize: "yes"}, {v1alpha1.AnnotationResize: "InPlace"}, {v1alpha1.AnnotationTargetSaturation: "0"}, {v1alpha1.AnnotationTargetSaturation: "1.5"}, {v1alpha1.AnnotationTargetSaturation: " 0.5"},
		{v1alpha1.AnnotationTargetSaturation: "NaN"}, {v1alpha1.AnnotationResizePausedUntil: "tomorrow"}, {v1alpha1.AnnotationResize: strings.Repeat("x", 1<<18)},
	} {
		if _, err := ParsePodOverride(bad); !errors.Is(err, ErrInvalidAnnotation) || len(err.Error()) > 300 {
			t.Errorf("%.60v: %v", bad, err)
		}
	}
}

func TestWindow(t *testing.T) {
	w, err := ParseWindow("30 22 * * 5", 3*time.Hour) // Fridays 22:30 UTC for 3 h
	if err != nil {
		t.Fatal(err)
	}
	fri := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC) // a Friday
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{
		{fri.Add(22*time.Hour + 29*time.Minute), false},
		{fri.Add(22*time.Hour + 30*time.Minute), true},
		{fri.Add(25*time.Hour + 29*time.Minute), true}, // Saturday 01:29
		{fri.Add(25*time.Hour + 30*time.Minute), false},
		{fri.Add(-24 * time.Hour).Add(23 * time.Hour), false}, // Thursday
	} {
		if got := w.Covers(tc.at); got != tc.want {
			t.Errorf("Covers(%v) = %v, want %v", tc.at, got, tc.want)
		}
	}
	for _, bad := range []struct {
		spec string
		d    time.Duration
	}{{"61 * * * *", time.Hour}, {"* * *", time.Hour}, {"@daily", 0}, {"@daily", 721 * time.Hour}} {
		if _, err := ParseWindow(bad.spec, bad.d); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%q %v: %v", bad.spec, bad.d, err)
		}
	}
}

func TestPolicyCheck(t *testing.T) {
	p99, p5 := 0.99, 0.5
	nan, inf, one, two := math.NaN(), math.Inf(1), 1.0, 2.0
	for _, bad := range []Policy{
		{Name: "a", Mode: "Sometimes"},
		{Name: "b", Mode: ModeInPlace, Preset: "nope"},
		{Name: "c", Mode: ModeInPlace, Overrides: recommend.Overrides{CPU: recommend.ResourceOverrides{Percentile: &p99, Objective: &p5}}},
		{Name: "d", Mode: ModeInPlace, Preset: "vpa", Overrides: recommend.Overrides{CPU: recommend.ResourceOverrides{TargetSaturation: &p5}}},
		{Name: "e", Mode: ModeInPlace, MaxChangePerStep: 2},
		{Name: "f", Mode: ModeInPlace, Step: time.Millisecond},
		{Name: "g", Mode: ModeInPlace, PodTargetSaturation: Range{Min: 0.8, Max: 0.5}},
		{Name: "h", Mode: ModeInPlace, PodTargetSaturation: Range{Min: 0, Max: 1.5}},
		{Name: "i", Mode: ModeInPlace, MaxOOMBumpsPerDay: 25},
		{Name: "j", Mode: ModeInPlace, Overrides: recommend.Overrides{CPU: recommend.ResourceOverrides{MaxAllowed: &nan}}},
		{Name: "k", Mode: ModeInPlace, Overrides: recommend.Overrides{Memory: recommend.ResourceOverrides{MinAllowed: &two, MaxAllowed: &one}}},
		{Name: "l", Mode: ModeInPlace, Overrides: recommend.Overrides{CPU: recommend.ResourceOverrides{MaxAllowed: &inf}}},
		{Name: "m", Mode: ModeInPlace, OOMFactor: &nan},
	} {
		if err := bad.Check(); !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), bad.Name) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	good := Policy{Name: "g", Mode: ModeDryRun}
	if err := good.Check(); err != nil || good.Preset != recommend.DefaultPreset || good.Step != DefaultStep || good.Limits != LimitsKeepRatio ||
		good.PodTargetSaturation != (Range{Min: 0.3, Max: 1}) || good.Overrides.MinHistory == nil || *good.Overrides.MinHistory != 0 {
		t.Fatalf("defaults: %+v %v", good, err)
	}
}
