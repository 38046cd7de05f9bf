package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/test/deploy"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

// TestCRDOnAPIServer applies the generated CRD to a real kube-apiserver
// and shows what its schema accepts and refuses: the README's example
// is accepted, a minimal policy gets the documented defaults and reads back
// into the Go types, and each bad policy is refused with the field and the
// reason.
func TestCRDOnAPIServer(t *testing.T) {
	bins := tier.E2E(t)
	cp := harness.MustStart(t, bins, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	crd, err := deploy.Decode(repoFile(t, crdFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := deploy.Apply(ctx, cp.Config, crd, deploy.ApplyOptions{FieldManager: "cgpilot-test"}); err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	rsp := dc.Resource(v1alpha1.SchemeGroupVersion.WithResource("rightsizepolicies"))

	example, err := deploy.Decode(repoFile(t, "deploy/examples/rightsizepolicy.yaml"))
	if err != nil || len(example) != 1 {
		t.Fatalf("example: %v", err)
	}
	created, err := rsp.Create(ctx, example[0], metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the README example is refused: %v", err)
	}
	var ex v1alpha1.RightsizePolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(created.Object, &ex); err != nil {
		t.Fatalf("the stored example does not decode into the Go types: %v", err)
	}
	if ex.Spec.Mode != v1alpha1.ModeInPlace || ex.Spec.CPU.MinAllowed.String() != "50m" || ex.Spec.Step.Duration != time.Hour || len(ex.Spec.AvoidWindows) != 2 {
		t.Errorf("the example read back as %+v", ex.Spec)
	}

	// A minimal policy gets the defaults.
	min := object(t, "min", `{mode: DryRun}`)
	got, err := rsp.Create(ctx, min, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var p v1alpha1.RightsizePolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.Preset != v1alpha1.DefaultPreset || p.Spec.Step == nil || p.Spec.Step.Duration != time.Hour ||
		p.Spec.MinHistory == nil || p.Spec.MinHistory.Duration != 24*time.Hour || p.Spec.Limits != v1alpha1.LimitsKeepRatio {
		t.Errorf("defaults: preset %q step %v minHistory %v limits %q", p.Spec.Preset, p.Spec.Step, p.Spec.MinHistory, p.Spec.Limits)
	}
	if ts := p.Spec.PodTargetSaturation; ts == nil || ts.Min != 0.3 || ts.Max != 1 || p.Spec.MaxOOMBumpsPerDay == nil ||
		*p.Spec.MaxOOMBumpsPerDay != 3 || p.Spec.AllowPodModeOverride {
		t.Errorf("pod-facing defaults: podTargetSaturation %+v maxOOMBumpsPerDay %v allowPodModeOverride %v", ts, p.Spec.MaxOOMBumpsPerDay, p.Spec.AllowPodModeOverride)
	}
	// A partial range gets the other end's default.
	half, err := rsp.Create(ctx, object(t, "half", `{mode: DryRun, podTargetSaturation: {max: 0.8}}`), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lo, _, _ := unstructured.NestedFloat64(half.Object, "spec", "podTargetSaturation", "min"); lo != 0.3 {
		t.Errorf("podTargetSaturation {max: 0.8} got min %v, want 0.3", lo)
	}
	// Status through its subresource only; the printer columns read it.
	p.Status = v1alpha1.RightsizePolicyStatus{ObservedGeneration: p.Generation, MatchedPods: 3, AdjustedPods: 2, NotAdjustable: map[string]int32{"ExclusiveCPUs": 1}}
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rsp.UpdateStatus(ctx, &unstructured.Unstructured{Object: st}, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("status update: %v", err)
	}
	if after, err := rsp.Get(ctx, "min", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if n, _, _ := unstructured.NestedInt64(after.Object, "status", "matchedPods"); n != 3 || after.GetGeneration() != got.GetGeneration() {
		t.Errorf("after the status update: matchedPods %d generation %d (was %d)", n, after.GetGeneration(), got.GetGeneration())
	}

	for i, c := range []struct {
		name, spec string
		want       []string // in the error
	}{
		{"bad mode", `{mode: Sometimes}`, []string{"spec.mode", "Unsupported value"}},
		{"no mode", `{preset: vpa}`, []string{"spec.mode", "Required"}},
		{"unquoted Off is a boolean", `{mode: Off}`, []string{"spec.mode", "string"}},
		{"percentile 1.5", `{mode: InPlace, cpu: {percentile: 1.5}}`, []string{"spec.cpu.percentile", "less than or equal to 1"}},
		{"saturation 0", `{mode: InPlace, memory: {targetSaturation: 0}}`, []string{"spec.memory.targetSaturation", "greater than 0"}},
		{"maxChangePerStep 2", `{mode: InPlace, maxChangePerStep: 2}`, []string{"spec.maxChangePerStep"}},
		{"oomFactor 0", `{mode: InPlace, oomFactor: 0}`, []string{"spec.oomFactor"}},
		{"minAllowed > maxAllowed", `{mode: InPlace, memory: {minAllowed: 2Gi, maxAllowed: 1Gi}}`, []string{"spec.memory", "minAllowed must not be greater than maxAllowed"}},
		{"minAllowed > maxAllowed, mixed units", `{mode: InPlace, cpu: {minAllowed: 1500m, maxAllowed: 1}}`, []string{"spec.cpu", "minAllowed must not be greater than maxAllowed"}},
		{"negative minAllowed", `{mode: InPlace, cpu: {minAllowed: -1}}`, []string{"spec.cpu.minAllowed", "must not be negative"}},
		{"zero maxAllowed", `{mode: InPlace, cpu: {maxAllowed: "0"}}`, []string{"spec.cpu.maxAllowed", "must be positive"}},
		{"not a quantity", `{mode: InPlace, cpu: {maxAllowed: lots}}`, []string{"spec.cpu.maxAllowed"}},
		{"bad duration", `{mode: InPlace, step: 1.5h}`, []string{"spec.step", "should match"}},
		{"days", `{mode: InPlace, minHistory: 1d}`, []string{"spec.minHistory", "should match"}},
		{"step 0s", `{mode: InPlace, step: 0s}`, []string{"spec.step", "between 1s and 720h"}},
		{"step too long", `{mode: InPlace, step: 721h}`, []string{"spec.step", "between 1s and 720h"}},
		{"overflowing duration", `{mode: InPlace, minHistory: 999999999999h}`, []string{"spec.minHistory"}},
		{"bad preset", `{mode: InPlace, preset: aggressive}`, []string{"spec.preset", "Unsupported value"}},
		{"bad limits", `{mode: InPlace, limits: Drop}`, []string{"spec.limits", "Unsupported value"}},
		{"bad pausedUntil", `{mode: InPlace, pausedUntil: tomorrow}`, []string{"spec.pausedUntil", "date-time"}},
		{"bad schedule", `{mode: InPlace, avoidWindows: [{schedule: "every night", duration: 1h}]}`, []string{"spec.avoidWindows[0].schedule", "should match"}},
		{"four-field schedule", `{mode: InPlace, avoidWindows: [{schedule: "0 2 * *", duration: 1h}]}`, []string{"spec.avoidWindows[0].schedule"}},
		{"window without duration", `{mode: InPlace, avoidWindows: [{schedule: "@daily"}]}`, []string{"spec.avoidWindows[0].duration", "Required"}},
		{"zero window", `{mode: InPlace, avoidWindows: [{schedule: "@daily", duration: 0s}]}`, []string{"spec.avoidWindows[0].duration", "between 1s and 720h"}},
		{"saturation range reversed", `{mode: InPlace, podTargetSaturation: {min: 0.9, max: 0.5}}`, []string{"spec.podTargetSaturation", "min must not be greater than max"}},
		{"saturation range 0", `{mode: InPlace, podTargetSaturation: {min: 0}}`, []string{"spec.podTargetSaturation.min", "greater than 0"}},
		{"saturation range above 1", `{mode: InPlace, podTargetSaturation: {max: 1.5}}`, []string{"spec.podTargetSaturation.max", "less than or equal to 1"}},
		{"negative bumps", `{mode: InPlace, maxOOMBumpsPerDay: -1}`, []string{"spec.maxOOMBumpsPerDay", "greater than or equal to 0"}},
		{"bumps above one an hour", `{mode: InPlace, maxOOMBumpsPerDay: 25}`, []string{"spec.maxOOMBumpsPerDay", "less than or equal to 24"}},
		{"too many windows", `{mode: InPlace, avoidWindows: [` + strings.Repeat(`{schedule: "@daily", duration: 1h},`, 17) + `]}`, []string{"spec.avoidWindows", "17"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := rsp.Create(ctx, object(t, fmt.Sprintf("bad-%d", i), c.spec), metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("spec %s: %v, want Invalid", c.spec, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("spec %s: error %q lacks %q", c.spec, err, w)
				}
			}
		})
	}
	// Accepted edge values: the bounds themselves.
	for i, spec := range []string{
		`{mode: "Off"}`,
		`{mode: Auto, allowPodModeOverride: true, maxOOMBumpsPerDay: 0, podTargetSaturation: {min: 1, max: 1}}`,
		`{mode: Auto, cpu: {percentile: 1, targetSaturation: 1, minAllowed: 0, maxAllowed: 1}, maxChangePerStep: 1, oomFactor: 4}`,
		`{mode: InPlace, step: 1s, minHistory: 0s, avoidWindows: [{schedule: "*/15 9-17 * * MON-FRI", duration: 720h}, {schedule: "@hourly", duration: 20s}]}`,
		`{mode: DryRun, step: 1h30m, minHistory: 720h, pausedUntil: "2030-01-02T03:04:05Z", namespaceSelector: {}, podSelector: {matchLabels: {a: b}}}`,
	} {
		if _, err := rsp.Create(ctx, object(t, fmt.Sprintf("ok-%d", i), spec), metav1.CreateOptions{}); err != nil {
			t.Errorf("spec %s refused: %v", spec, err)
		}
	}
}

func object(t *testing.T, name, spec string) *unstructured.Unstructured {
	t.Helper()
	var s map[string]any
	if err := yaml.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatalf("spec %s: %v", spec, err)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "RightsizePolicy",
		"metadata": map[string]any{"name": name}, "spec": s,
	}}
}
