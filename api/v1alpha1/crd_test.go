package v1alpha1_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/recommend"
	"github.com/cgpilot/cgpilot/test/tier"
)

func repoFile(t testing.TB, rel string) []byte {
	t.Helper()
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const crdFile = "deploy/crds/cgpilot.io_rightsizepolicies.yaml"

// specSchema returns the properties of spec in the generated CRD.
func specSchema(t testing.TB) map[string]any {
	t.Helper()
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema struct {
						Properties struct {
							Spec struct {
								Properties map[string]any
							}
						}
					} `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(repoFile(t, crdFile), &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1alpha1" {
		t.Fatalf("CRD versions %+v, want v1alpha1 only", crd.Spec.Versions)
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties.Spec.Properties
}

func field(t testing.TB, props map[string]any, name, key string) any {
	t.Helper()
	f, ok := props[name].(map[string]any)
	if !ok {
		t.Fatalf("spec.%s not in the CRD schema", name)
	}
	return f[key]
}

// TestCRDDefaults: the schema's defaults are the ones the Go API
// documents (a policy that names none gets them from the API server).
func TestCRDDefaults(t *testing.T) {
	props := specSchema(t)
	for name, want := range map[string]string{
		"preset":     v1alpha1.DefaultPreset,
		"step":       "1h",
		"minHistory": "24h",
		"limits":     string(v1alpha1.LimitsKeepRatio),
	} {
		if got := field(t, props, name, "default"); got != want {
			t.Errorf("spec.%s default %v, want %q", name, got, want)
		}
	}
	if got := field(t, props, "maxOOMBumpsPerDay", "default"); got != float64(v1alpha1.DefaultMaxOOMBumpsPerDay) {
		t.Errorf("spec.maxOOMBumpsPerDay default %v, want %d", got, v1alpha1.DefaultMaxOOMBumpsPerDay)
	}
	if got, _ := field(t, props, "podTargetSaturation", "default").(map[string]any); got["min"] != v1alpha1.DefaultPodTargetSaturationMin ||
		got["max"] != v1alpha1.DefaultPodTargetSaturationMax {
		t.Errorf("spec.podTargetSaturation default %v", got)
	}
	for _, name := range []string{"mode", "cpu", "memory", "oomFactor", "maxChangePerStep", "pausedUntil", "avoidWindows", "allowPodModeOverride"} {
		if d := field(t, props, name, "default"); d != nil {
			t.Errorf("spec.%s has default %v, want none", name, d)
		}
	}
}

func enum(t testing.TB, props map[string]any, name string) []string {
	t.Helper()
	var out []string
	for _, v := range field(t, props, name, "enum").([]any) {
		out = append(out, v.(string))
	}
	sort.Strings(out)
	return out
}

// TestCRDEnums: the schema's enums are the Go constants, and its presets
// are exactly the recommender's (a preset added to recommend needs
// make generate here, or policies naming it would be refused).
func TestCRDEnums(t *testing.T) {
	props := specSchema(t)
	for name, want := range map[string][]string{
		"mode":   {string(v1alpha1.ModeAuto), string(v1alpha1.ModeDryRun), string(v1alpha1.ModeInPlace), string(v1alpha1.ModeOff)},
		"limits": {string(v1alpha1.LimitsKeep), string(v1alpha1.LimitsKeepRatio), string(v1alpha1.LimitsUnset)},
		"preset": recommend.PresetNames(),
	} {
		sort.Strings(want)
		if got := enum(t, props, name); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("spec.%s enum %v, want %v", name, got, want)
		}
	}
	if v1alpha1.DefaultPreset != recommend.DefaultPreset {
		t.Errorf("API default preset %q, recommender's %q", v1alpha1.DefaultPreset, recommend.DefaultPreset)
	}
}

// TestREADMEExample: the README shows deploy/examples/rightsizepolicy.yaml
// verbatim (the e2e test applies that file).
func TestREADMEExample(t *testing.T) {
	example := strings.TrimSpace(string(repoFile(t, "deploy/examples/rightsizepolicy.yaml")))
	if !strings.Contains(string(repoFile(t, "README.md")), example) {
		t.Error("README.md does not show deploy/examples/rightsizepolicy.yaml verbatim")
	}
}
