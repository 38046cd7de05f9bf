package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/api/v1alpha1"
)

func checked(t *testing.T, p Policy) *Policy {
	t.Helper()
	if p.Name == "" {
		p.Name = "p"
	}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	return &p
}

// TestForPodSaturation: a tenant's target saturation counts only within
// the policy's bounds. Before, any float in (0, 1] counted: 0.001 gave a
// 377-core request, 1e-300 +Inf memory and a CPU request of
// -9223372036854775808m (issue 19).
func TestForPodSaturation(t *testing.T) {
	def := checked(t, Policy{Mode: ModeInPlace})
	narrow := checked(t, Policy{Mode: ModeInPlace, PodTargetSaturation: Range{Min: 0.6, Max: 0.9}})
	vpa := checked(t, Policy{Mode: ModeInPlace, Preset: "vpa"})
	for _, tc := range []struct {
		pol     *Policy
		value   string
		want    float64 // 0: refused
		refusal string
	}{
		{def, "0.001", 0, "outside policy p's podTargetSaturation [0.3, 1]"},
		{def, "1e-300", 0, "outside"},
		{def, "0.29999", 0, "outside"},
		{def, "0.3", 0.3, ""},
		{def, "0.7", 0.7, ""},
		{def, "1", 1, ""},
		{def, "1.5", 0, "want a fraction in (0, 1]"},
		{def, "NaN", 0, "want a fraction"},
		{def, "-0.5", 0, "want a fraction"},
		{def, " 0.7", 0, "want a fraction"},
		{def, strings.Repeat("0", 300), 0, "at most 256"},
		{narrow, "0.5", 0, "[0.6, 0.9]"},
		{narrow, "0.95", 0, "[0.6, 0.9]"},
		{narrow, "0.8", 0.8, ""},
		{vpa, "0.7", 0, "vpa preset"},
	} {
		e := tc.pol.ForPod(map[string]string{v1alpha1.AnnotationTargetSaturation: tc.value})
		switch {
		case tc.want == 0 && (e.TargetSaturation != nil || len(e.Refused) != 1 || !strings.Contains(e.Refused[0].Reason, tc.refusal)):
			t.Errorf("%s under %+v: %v %+v, want refused (%s)", tc.value, tc.pol.PodTargetSaturation, e.TargetSaturation, e.Refused, tc.refusal)
		case tc.want != 0 && (e.TargetSaturation == nil || *e.TargetSaturation != tc.want || len(e.Refused) != 0):
			t.Errorf("%s: %v %+v, want %v", tc.value, e.TargetSaturation, e.Refused, tc.want)
		}
		if e.Mode != tc.pol.Mode {
			t.Errorf("%s changed the mode to %s", tc.value, e.Mode)
		}
		if len(e.Refused) > 0 && (!strings.Contains(e.Why(), v1alpha1.AnnotationTargetSaturation) || len(e.Why()) > 300) {
			t.Errorf("why: %q", e.Why())
		}
	}
}

// TestForPodMode: a pod's resize annotation never widens its policy:
// Off and DryRun policies stay so whatever the pod says (before,
// cgpilot.io/resize: in-place turned them into applied resizes, issue
// 19), and a weaker mode counts only where the policy allows pods to
// choose.
func TestForPodMode(t *testing.T) {
	modes := []Mode{ModeOff, ModeDryRun, ModeInPlace, ModeAuto}
	values := map[string]Mode{v1alpha1.ResizeOff: ModeOff, v1alpha1.ResizeDryRun: ModeDryRun, v1alpha1.ResizeInPlace: ModeInPlace}
	for _, allow := range []bool{false, true} {
		for _, pm := range modes {
			p := checked(t, Policy{Mode: pm, AllowPodModeOverride: allow})
			for value, asked := range values {
				e := p.ForPod(map[string]string{v1alpha1.AnnotationResize: value})
				var want Mode
				switch {
				case asked == pm:
					want = pm
				case !allow:
					want = pm
				case asked.AtMost(pm):
					want = asked
				default:
					want = pm
				}
				if e.Mode != want {
					t.Errorf("policy %s allow=%v, pod %s: mode %s, want %s", pm, allow, value, e.Mode, want)
				}
				if refused := len(e.Refused) == 1; refused != (want != asked) {
					t.Errorf("policy %s allow=%v, pod %s: refusals %+v", pm, allow, value, e.Refused)
				}
				if !e.Mode.AtMost(pm) {
					t.Errorf("policy %s widened to %s by %s", pm, e.Mode, value)
				}
			}
		}
	}
	// The finding's two cases, named.
	for _, pm := range []Mode{ModeOff, ModeDryRun} {
		for _, allow := range []bool{false, true} {
			e := checked(t, Policy{Mode: pm, AllowPodModeOverride: allow}).ForPod(map[string]string{v1alpha1.AnnotationResize: v1alpha1.ResizeInPlace})
			if e.Mode != pm || e.Mode.Applies() || len(e.Refused) != 1 {
				t.Errorf("%s policy (allow=%v) with resize: in-place: %+v", pm, allow, e)
			}
		}
	}
	e := checked(t, Policy{Mode: ModeInPlace}).ForPod(map[string]string{v1alpha1.AnnotationResize: "InPlace"})
	if e.Mode != ModeInPlace || len(e.Refused) != 1 || !strings.Contains(e.Refused[0].Reason, "want off, dry-run or in-place") {
		t.Errorf("malformed: %+v", e)
	}
}

// TestForPodAlone: each annotation is judged alone, and a pause always
// counts.
func TestForPodAlone(t *testing.T) {
	p := checked(t, Policy{Mode: ModeAuto})
	e := p.ForPod(map[string]string{v1alpha1.AnnotationResize: "dry-run", v1alpha1.AnnotationTargetSaturation: "0.5",
		v1alpha1.AnnotationResizePausedUntil: "2026-12-24T00:00:00Z", "cgpilot.io/cpu-pool": "exclusive"})
	if e.Mode != ModeAuto || e.TargetSaturation == nil || *e.TargetSaturation != 0.5 || !e.PausedUntil.Equal(time.Date(2026, 12, 24, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("%+v", e)
	}
	if len(e.Refused) != 1 || e.Refused[0].Annotation != v1alpha1.AnnotationResize {
		t.Errorf("refused %+v", e.Refused)
	}
	if e := p.ForPod(map[string]string{v1alpha1.AnnotationResizePausedUntil: "soon"}); len(e.Refused) != 1 || !e.PausedUntil.IsZero() {
		t.Errorf("bad pause %+v", e)
	}
	if e := p.ForPod(nil); e.Mode != ModeAuto || len(e.Refused) != 0 || e.Why() != "" {
		t.Errorf("no annotations: %+v", e)
	}
}
