package policy

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/cgpilot/cgpilot/api/v1alpha1"
)

func example(t *testing.T) *v1alpha1.RightsizePolicy {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "..", "deploy", "examples", "rightsizepolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rp v1alpha1.RightsizePolicy
	if err := yaml.UnmarshalStrict(b, &rp); err != nil {
		t.Fatal(err)
	}
	return &rp
}

// TestCompileExample: the README's example compiles to the values it
// documents, and the pod-facing fields it leaves out get the API's
// defaults.
func TestCompileExample(t *testing.T) {
	rp := example(t)
	p, err := Compile(rp)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := p.Allowed()
	if p.Mode != ModeInPlace || p.Preset != "cgpilot-balanced" || p.Step != time.Hour || p.MinHistory != 24*time.Hour ||
		p.MaxChangePerStep != 0.5 || p.Limits != LimitsKeepRatio || len(p.Avoid) != 2 || p.Source != rp {
		t.Errorf("compiled %+v", p)
	}
	if lo != (Values{CPU: 0.05, Memory: 64 << 20}) || hi != (Values{CPU: 4, Memory: 8 << 30}) {
		t.Errorf("bounds %+v %+v", lo, hi)
	}
	if p.PodTargetSaturation != (Range{Min: 0.3, Max: 1}) || p.AllowPodModeOverride || p.MaxOOMBumpsPerDay != 3 {
		t.Errorf("pod-facing defaults: %+v %v %d", p.PodTargetSaturation, p.AllowPodModeOverride, p.MaxOOMBumpsPerDay)
	}
	if mh := p.Overrides.MinHistory; mh == nil || time.Duration(*mh) != 24*time.Hour {
		t.Errorf("overrides' minHistory %v", mh)
	}
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC) // the sales event
	if p.InWindow(at) == "" || p.InWindow(at.Add(24*time.Hour)) != "" {
		t.Errorf("avoid windows at %v: %q, a day later: %q", at, p.InWindow(at), p.InWindow(at.Add(24*time.Hour)))
	}
}

// TestCompileDefaults: a policy that did not come through the API server
// (no defaults filled) means what the CRD's defaults say. The agent read
// a missing minHistory as 24h and the aggregator as the preset's 1h, so
// a merged recommendation could exist before the agent's own would.
func TestCompileDefaults(t *testing.T) {
	p, err := Compile(&v1alpha1.RightsizePolicy{ObjectMeta: metav1.ObjectMeta{Name: "bare"}, Spec: v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeDryRun}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Preset != v1alpha1.DefaultPreset || p.Step != time.Hour || p.MinHistory != 24*time.Hour || p.Limits != LimitsKeepRatio ||
		p.Overrides.MinHistory == nil || time.Duration(*p.Overrides.MinHistory) != 24*time.Hour {
		t.Errorf("defaults %+v", p)
	}
	if p.PodTargetSaturation != (Range{Min: 0.3, Max: 1}) || p.MaxOOMBumpsPerDay != 3 || p.AllowPodModeOverride {
		t.Errorf("pod defaults %+v", p)
	}
	zero, half := int32(0), &v1alpha1.SaturationBounds{Max: 0.9}
	p, err = Compile(&v1alpha1.RightsizePolicy{Spec: v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeAuto, MaxOOMBumpsPerDay: &zero,
		PodTargetSaturation: half, AllowPodModeOverride: true}})
	if err != nil || p.MaxOOMBumpsPerDay != 0 || p.MayBumpOOM(0) || p.PodTargetSaturation != (Range{Min: 0.3, Max: 0.9}) || !p.AllowPodModeOverride {
		t.Errorf("stated values: %+v %v", p, err)
	}
}

// TestCompileQuantities: CPU bounds are whole millicores, exact, and
// saturate instead of wrapping. The agent read "1e20" cores through
// MilliValue as 0 (a maxAllowed of 0: every request clamped to nothing)
// and the aggregator read "300m" through AsApproximateFloat64 as
// 0.30000000000000004.
func TestCompileQuantities(t *testing.T) {
	for _, tc := range []struct {
		cpu, mem       string
		wantCPU, wantM float64
	}{
		{"300m", "1Gi", 0.3, 1 << 30},
		{"700m", "1500M", 0.7, 1.5e9},
		{"1e20", "1e20", MaxCPU, MaxMemory},
		{"9223372036854775807", "100Ei", MaxCPU, MaxMemory},
		{"1048576", "1152921504606846976", MaxCPU, MaxMemory},
	} {
		cpu, mem := resource.MustParse(tc.cpu), resource.MustParse(tc.mem)
		p, err := Compile(&v1alpha1.RightsizePolicy{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeInPlace,
			CPU: &v1alpha1.ResourcePolicy{MaxAllowed: &cpu}, Memory: &v1alpha1.ResourcePolicy{MaxAllowed: &mem}}})
		if err != nil {
			t.Errorf("%s %s: %v", tc.cpu, tc.mem, err)
			continue
		}
		if _, hi := p.Allowed(); hi.CPU != tc.wantCPU || hi.Memory != tc.wantM {
			t.Errorf("maxAllowed %s, %s: %v cores, %v bytes; want %v, %v", tc.cpu, tc.mem, hi.CPU, hi.Memory, tc.wantCPU, tc.wantM)
		}
	}
	// Below a unit: rounded up to what can be applied.
	tiny, half := resource.MustParse("1.5u"), resource.MustParse("0.5")
	p, err := Compile(&v1alpha1.RightsizePolicy{Spec: v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeInPlace,
		CPU: &v1alpha1.ResourcePolicy{MinAllowed: &tiny}, Memory: &v1alpha1.ResourcePolicy{MinAllowed: &half}}})
	if lo, _ := p.Allowed(); err != nil || lo != (Values{CPU: 0.001, Memory: 1}) {
		t.Errorf("minAllowed 1.5u, 0.5: %+v %v", lo, err)
	}
	neg := resource.MustParse("-1")
	if _, err := Compile(&v1alpha1.RightsizePolicy{ObjectMeta: metav1.ObjectMeta{Name: "neg"}, Spec: v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeInPlace,
		CPU: &v1alpha1.ResourcePolicy{MinAllowed: &neg}}}); !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "cpu.minAllowed") {
		t.Errorf("negative minAllowed: %v", err)
	}
}

// TestCompileRefuses: what the schema cannot check (or what reached us
// without the schema) is refused with the field named.
func TestCompileRefuses(t *testing.T) {
	one, two := resource.MustParse("1"), resource.MustParse("2")
	bad := []struct {
		field string
		spec  v1alpha1.RightsizePolicySpec
	}{
		{"namespaceSelector", v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeDryRun,
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}}},
		{"podSelector", v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeDryRun, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a b": "c"}}}},
		{"avoidWindows[0]", v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeDryRun, AvoidWindows: []v1alpha1.AvoidWindow{{Schedule: "61 * * * *", Duration: metav1.Duration{Duration: time.Hour}}}}},
		{"preset", v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeDryRun, Preset: "nope"}},
		{"mode", v1alpha1.RightsizePolicySpec{Mode: "Sometimes"}},
		{"cpu.minAllowed", v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeDryRun, CPU: &v1alpha1.ResourcePolicy{MinAllowed: &two, MaxAllowed: &one}}},
		{"podTargetSaturation", v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeDryRun, PodTargetSaturation: &v1alpha1.SaturationBounds{Min: 0.9, Max: 0.5}}},
		{"maxOOMBumpsPerDay", v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeDryRun, MaxOOMBumpsPerDay: ptr(int32(-1))}},
	}
	for _, tc := range bad {
		_, err := Compile(&v1alpha1.RightsizePolicy{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: tc.spec})
		if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), "bad") {
			t.Errorf("%s: %v", tc.field, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestDecode: an object that does not decode keeps its name and
// generation for the status, with the error.
func TestDecode(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cgpilot.io/v1alpha1", "kind": "RightsizePolicy",
		"metadata": map[string]any{"name": "broken", "generation": int64(4)}, "spec": map[string]any{"mode": "InPlace", "step": 12}}}
	rp, err := Decode(u)
	if !errors.Is(err, ErrInvalidPolicy) || rp.Name != "broken" || rp.Generation != 4 {
		t.Fatalf("%+v %v", rp, err)
	}
}

// TestQuantityRoundTrip: CPUQuantity and Bytes invert CPUCores and
// MemoryBytes on whole units, round up what lies between, and give 0 for
// what is no amount at all, whatever the float.
func TestQuantityRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in    float64
		milli int64
		b     int64
	}{
		{0.1, 100, 1}, {0.3, 300, 1}, {1.0001, 1001, 2}, {0.1 + 0.2, 300, 1}, {2.5e-7, 1, 1},
		{0, 0, 0}, {-1, 0, 0}, {math.NaN(), 0, 0}, {math.Inf(-1), 0, 0},
		{math.Inf(1), MaxCPU * 1000, MaxMemory}, {1e300, MaxCPU * 1000, MaxMemory},
	} {
		if q := CPUQuantity(tc.in); q.MilliValue() != tc.milli {
			t.Errorf("CPUQuantity(%v) = %s, want %dm", tc.in, q.String(), tc.milli)
		}
		if got := Bytes(tc.in); got != tc.b {
			t.Errorf("Bytes(%v) = %d, want %d", tc.in, got, tc.b)
		}
	}
	for _, s := range []string{"1m", "250m", "1", "3500m", "64"} {
		q := resource.MustParse(s)
		if back := CPUQuantity(CPUCores(q)); back.Cmp(q) != 0 {
			t.Errorf("cpu %s → %v → %s", s, CPUCores(q), back.String())
		}
	}
	for _, s := range []string{"1", "64Mi", "1Gi", "1500M"} {
		q := resource.MustParse(s)
		if back := MemoryQuantity(MemoryBytes(q)); back.Cmp(q) != 0 {
			t.Errorf("memory %s → %v → %s", s, MemoryBytes(q), back.String())
		}
	}
	type name string
	l := map[name]resource.Quantity{"cpu": resource.MustParse("1500m"), "memory": resource.MustParse("2Gi"), "nvidia.com/gpu": resource.MustParse("1")}
	if v := ValuesOf(l); v != (Values{CPU: 1.5, Memory: 2 << 30}) {
		t.Errorf("ValuesOf %+v", v)
	}
}
