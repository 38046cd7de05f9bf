package v1alpha1

import (
	"encoding/json"
	"math"
	"math/big"
	"math/rand"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"
	"k8s.io/apimachinery/pkg/api/resource"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// TestRoundTrip: random RightsizePolicy objects survive encode, decode and
// deep copy unchanged (the apimachinery round-trip suite, JSON; the types
// have no protobuf encoding).
func TestRoundTrip(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(scheme)
	seed := time.Now().UnixNano()
	t.Logf("fuzzer seed %d", seed)
	f := fuzzer.FuzzerFor(metafuzzer.Funcs, rand.NewSource(seed), codecs)
	var kinds []string
	for gvk := range scheme.AllKnownTypes() {
		if gvk.Group == GroupName && strings.HasPrefix(gvk.Kind, "Rightsize") {
			kinds = append(kinds, gvk.Kind)
		}
	}
	if len(kinds) != 2 {
		t.Fatalf("the scheme knows %v of %s, want RightsizePolicy and its List", kinds, GroupName)
	}
	for i := 0; i < 50; i++ {
		for _, kind := range []string{"RightsizePolicy", "RightsizePolicyList"} {
			roundtrip.RoundTripSpecificKindWithoutProtobuf(t, SchemeGroupVersion.WithKind(kind), scheme, codecs, f, nil)
		}
	}
}

func TestRegister(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	gvks, _, err := scheme.ObjectKinds(&RightsizePolicy{})
	if err != nil || len(gvks) != 1 || gvks[0] != (schema.GroupVersionKind{Group: "cgpilot.io", Version: "v1alpha1", Kind: "RightsizePolicy"}) {
		t.Errorf("RightsizePolicy kinds %v (%v)", gvks, err)
	}
	if r := Resource("rightsizepolicies"); r.String() != "rightsizepolicies.cgpilot.io" {
		t.Errorf("Resource = %s", r)
	}
}

// TestJSONFieldNames: the field names are the API of issue 12, exactly.
func TestJSONFieldNames(t *testing.T) {
	q := resource.MustParse("1")
	f := 0.5
	d := &metav1.Duration{Duration: time.Hour}
	now := metav1.NewTime(time.Unix(1e9, 0))
	bumps := int32(3)
	p := RightsizePolicy{
		Spec: RightsizePolicySpec{
			NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{}, Mode: ModeInPlace, Preset: DefaultPreset,
			CPU:    &ResourcePolicy{TargetSaturation: &f, Percentile: &f, MinAllowed: &q, MaxAllowed: &q},
			Memory: &ResourcePolicy{TargetSaturation: &f}, OOMFactor: &f, MaxChangePerStep: &f, Step: d, MinHistory: d,
			Limits: LimitsKeepRatio, PausedUntil: &now, AvoidWindows: []AvoidWindow{{Schedule: "@daily", Duration: *d}},
			PodTargetSaturation: &SaturationBounds{Min: 0.5, Max: 0.9}, AllowPodModeOverride: true, MaxOOMBumpsPerDay: &bumps,
		},
		Status: RightsizePolicyStatus{ObservedGeneration: 1, MatchedPods: 1, AdjustedPods: 1, NotAdjustable: map[string]int32{"x": 1},
			LastUpdateTime: &now, Conditions: []metav1.Condition{{Type: "Valid"}}},
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for part, want := range map[string]string{
		"spec": "allowPodModeOverride avoidWindows cpu limits maxChangePerStep maxOOMBumpsPerDay memory minHistory mode namespaceSelector " +
			"oomFactor pausedUntil podSelector podTargetSaturation preset step",
		"status": "adjustedPods conditions lastUpdateTime matchedPods notAdjustable observedGeneration",
	} {
		if got := strings.Join(sortedKeys(m[part]), " "); got != want {
			t.Errorf("%s fields: %s\nwant %s", part, got, want)
		}
	}
	cpu, _ := m["spec"]["cpu"].(map[string]any)
	if got := strings.Join(sortedKeys(cpu), " "); got != "maxAllowed minAllowed percentile targetSaturation" {
		t.Errorf("cpu fields: %s", got)
	}
	if ts, _ := m["spec"]["podTargetSaturation"].(map[string]any); ts["min"] != 0.5 || ts["max"] != 0.9 {
		t.Errorf("podTargetSaturation %v", ts)
	}
	if w := m["spec"]["avoidWindows"].([]any)[0].(map[string]any); w["schedule"] != "@daily" || w["duration"] != "1h0m0s" {
		t.Errorf("avoid window %v", w)
	}
}

func sortedKeys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

// durationPattern is the schema's pattern for step, minHistory and a
// window's duration (the +kubebuilder:validation:Pattern markers).
var durationPattern = regexp.MustCompile(`^([0-9]{1,6}(h|m|s)){1,3}$`)

// TestDurationPatternParses: every string the schema's duration pattern
// accepts parses with time.ParseDuration unless its sum overflows a
// time.Duration (which the schema's CEL bound refuses; an agent reports
// such a policy invalid, it never breaks the list), and a parsed value
// within the schema's bounds prints back to a string the pattern accepts
// (so a client that reads and writes a policy back is not refused).
func TestDurationPatternParses(t *testing.T) {
	r := rand.New(rand.NewSource(time.Now().UnixNano()))
	units := []string{"h", "m", "s"}
	for i := 0; i < 20000; i++ {
		var s strings.Builder
		for g := 0; g < 1+r.Intn(3); g++ {
			digits := 1 + r.Intn(6)
			for d := 0; d < digits; d++ {
				s.WriteByte(byte('0' + r.Intn(10)))
			}
			s.WriteString(units[r.Intn(3)])
		}
		in := s.String()
		if !durationPattern.MatchString(in) {
			t.Fatalf("generator made %q, which the pattern refuses", in)
		}
		d, err := time.ParseDuration(in)
		if err != nil {
			// Only a sum past time.Duration's range (about 2,562,047h)
			// may fail: the schema's CEL bound (duration(self) <=
			// 720h) refuses those, as CEL cannot parse them either.
			if !overflows(in) {
				t.Fatalf("pattern accepts %q, time.ParseDuration refuses it: %v", in, err)
			}
			continue
		}
		if d <= 720*time.Hour && !durationPattern.MatchString(d.String()) {
			t.Fatalf("%q parses to %v, which prints as %q: the pattern refuses it", in, d, d.String())
		}
	}
	// The case a random run once drew: past the range, and only that.
	if _, err := time.ParseDuration("969894h800657h873178h"); err == nil || !overflows("969894h800657h873178h") || overflows("999999h999999h562049h") {
		t.Errorf("overflow check: ParseDuration %v, overflows %v / %v", err, overflows("969894h800657h873178h"), overflows("999999h999999h562049h"))
	}
	for _, bad := range []string{"", "1", "1.5h", "-1h", "1d", "1h1m1s1h", "1ms", "1µs", "1000000h", " 1h"} {
		if durationPattern.MatchString(bad) {
			t.Errorf("the pattern accepts %q", bad)
		}
	}
}

// overflows says whether the groups of a pattern-shaped duration sum past
// time.Duration's range, in exact integer arithmetic.
func overflows(s string) bool {
	unit := map[byte]*big.Int{'h': big.NewInt(int64(time.Hour)), 'm': big.NewInt(int64(time.Minute)), 's': big.NewInt(int64(time.Second))}
	sum, n := new(big.Int), new(big.Int)
	start := 0
	for i := 0; i < len(s); i++ {
		if u, ok := unit[s[i]]; ok {
			n.SetString(s[start:i], 10)
			sum.Add(sum, new(big.Int).Mul(n, u))
			start = i + 1
		}
	}
	return sum.Cmp(big.NewInt(math.MaxInt64)) > 0
}
