package deploy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

var bed = TestBed{Image: "docker.io/local/cgpilot-agent:demo", APIHost: "127.0.0.1", APIPort: "6443", HealthPort: 12345,
	KubeletDir: "/bed/node/kubelet", StateDir: "/bed/agent", SampleInterval: time.Second}

func overlayObjects(t *testing.T, b TestBed) (*appsv1.DaemonSet, *corev1.ConfigMap, map[string]map[string]any) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "overlay")
	if err := b.WriteOverlay(dir, repoRoot(t)); err != nil {
		t.Fatal(err)
	}
	out, err := KustomizeDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	norm, err := Normalize(objs)
	if err != nil {
		t.Fatal(err)
	}
	return agentDaemonSet(t, objs), typed(t, Find(objs, "ConfigMap", AgentName), &corev1.ConfigMap{}), norm
}

// helmObjects is helm template with values, decoded.
func helmObjects(t *testing.T, helm, root string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	b, err := Helm(context.Background(), helm, root, Namespace, values)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// helmNormalized is helm template with values, Normalized.
func helmNormalized(t *testing.T, helm, root string, values map[string]any) map[string]map[string]any {
	t.Helper()
	h, err := Normalize(helmObjects(t, helm, root, values))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestTestBedOverlay: the overlay changes exactly what TestBed says, and
// keeps every other argument, mount and setting of the base.
func TestTestBedOverlay(t *testing.T) {
	ds, cm, _ := overlayObjects(t, bed)
	base := agentDaemonSet(t, render(t))
	c, bc := ds.Spec.Template.Spec.Containers[0], base.Spec.Template.Spec.Containers[0]
	if c.Image != bed.Image || c.ImagePullPolicy != corev1.PullNever {
		t.Errorf("image %s %s, want %s Never", c.Image, c.ImagePullPolicy, bed.Image)
	}
	if len(c.Args) != len(bc.Args) {
		t.Errorf("args %v, base %v: want the same flags", c.Args, bc.Args)
	}
	for i, a := range bc.Args {
		want := a
		if strings.HasPrefix(a, "--health-addr=") {
			want = "--health-addr=127.0.0.1:12345"
		}
		if i >= len(c.Args) || c.Args[i] != want {
			t.Errorf("arg %d: %v, want %s", i, c.Args, want)
		}
	}
	if c.ReadinessProbe.HTTPGet.Port.IntValue() != 12345 || c.LivenessProbe.HTTPGet.Port.IntValue() != 12345 ||
		c.ReadinessProbe.InitialDelaySeconds != bc.ReadinessProbe.InitialDelaySeconds || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("probes %+v %+v: want port 12345, the rest of the base's", c.ReadinessProbe, c.LivenessProbe)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["KUBERNETES_SERVICE_HOST"] != "127.0.0.1" || env["KUBERNETES_SERVICE_PORT"] != "6443" || len(c.Env) != len(bc.Env)+2 {
		t.Errorf("env %v: want the base's plus the API server's address", c.Env)
	}
	paths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			paths[v.Name] = v.HostPath.Path
		}
	}
	for _, v := range base.Spec.Template.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		want := v.HostPath.Path
		if to, ok := bed.HostPaths()[want]; ok {
			want = to
		}
		if paths[v.Name] != want {
			t.Errorf("volume %s: host path %q, want %q", v.Name, paths[v.Name], want)
		}
	}
	if !reflect.DeepEqual(c.VolumeMounts, bc.VolumeMounts) || !reflect.DeepEqual(c.SecurityContext, bc.SecurityContext) {
		t.Errorf("mounts or security context changed")
	}
	var cfg, baseCfg map[string]any
	baseCM := typed(t, Find(render(t), "ConfigMap", AgentName), &corev1.ConfigMap{})
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(baseCM.Data["config.yaml"]), &baseCfg); err != nil {
		t.Fatal(err)
	}
	baseCfg["rightsizing"].(map[string]any)["sampleInterval"] = "1s"
	if !reflect.DeepEqual(cfg, baseCfg) {
		t.Errorf("config %v, want the base's with sampleInterval 1s: %v", cfg, baseCfg)
	}
	if len(bed.Notes()) != 5 {
		t.Errorf("notes %q: want one per change", bed.Notes())
	}
}

// TestTestBedHelmMatchesOverlay: helm template with HelmValues renders the
// same objects as the overlay, so the node-tier tests of both installers
// deploy the same agent.
func TestTestBedHelmMatchesOverlay(t *testing.T) {
	helm := helmBinary(t)
	_, _, k := overlayObjects(t, bed)
	v, err := bed.HelmValues()
	if err != nil {
		t.Fatal(err)
	}
	v["createNamespace"] = true
	if d := Diff("overlay", k, "helm", helmNormalized(t, helm, repoRoot(t), v)); d != "" {
		t.Errorf("helm with the test bed's values differs from the overlay:\n%s", d)
	}
}

func TestTestBedErrors(t *testing.T) {
	root := repoRoot(t)
	for name, b := range map[string]TestBed{
		"no tag":        {Image: "local/agent", APIHost: "h", APIPort: "1", HealthPort: 1, KubeletDir: "/k", StateDir: "/s"},
		"registry port": {Image: "reg:5000/agent", APIHost: "h", APIPort: "1", HealthPort: 1, KubeletDir: "/k", StateDir: "/s"},
		"no api":        {Image: "a:b", HealthPort: 1, KubeletDir: "/k", StateDir: "/s"},
		"port":          {Image: "a:b", APIHost: "h", APIPort: "1", HealthPort: 70000, KubeletDir: "/k", StateDir: "/s"},
		"relative":      {Image: "a:b", APIHost: "h", APIPort: "1", HealthPort: 1, KubeletDir: "k", StateDir: "/s"},
	} {
		dir := t.TempDir()
		if err := b.WriteOverlay(dir, root); !errors.Is(err, ErrRender) {
			t.Errorf("%s: WriteOverlay = %v, want ErrRender", name, err)
		}
		if _, err := b.HelmValues(); !errors.Is(err, ErrRender) {
			t.Errorf("%s: HelmValues = %v, want ErrRender", name, err)
		}
	}
	if err := bed.WriteOverlay(t.TempDir(), t.TempDir()); !errors.Is(err, ErrRender) {
		t.Errorf("no deploy/ in root: %v, want ErrRender", err)
	}
}

// TestTestBedAggregatorOverlay: with the aggregator, the overlay renders
// the component on the host network at the test bed's ports, with the
// demo's certificate in the Secret cert-manager would write (and no
// cert-manager object), the agents and the webhook pointed at it, and
// still nothing of the agent's reads a Secret.
func TestTestBedAggregatorOverlay(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"tls.crt", "tls.key", "ca.crt", "client-ca.crt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := bed
	b.Aggregator = &AggregatorBed{Image: "docker.io/local/cgpilot-aggregator:demo", SecurePort: 20443, HTTPPort: 20080,
		CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), CAFile: filepath.Join(dir, "ca.crt"),
		ClientCAFile: filepath.Join(dir, "client-ca.crt"), ReportPeriod: 10 * time.Second, SampleInterval: time.Second}
	out := filepath.Join(t.TempDir(), "overlay")
	if err := b.WriteOverlay(out, repoRoot(t)); err != nil {
		t.Fatal(err)
	}
	rendered, err := KustomizeDir(out)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(rendered)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"Certificate", "Issuer"} {
		if Find(objs, k, aggregatorName) != nil {
			t.Errorf("the overlay keeps the %s (no cert-manager on the test bed)", k)
		}
	}
	if Find(objs, "Secret", aggregatorName+"-tls") == nil || Find(objs, "ConfigMap", aggregatorName+"-ca") == nil || Find(objs, "ConfigMap", aggregatorName+"-client-ca") == nil {
		t.Error("the serving Secret, the agents' CA ConfigMap or the client CA ConfigMap is missing")
	}
	d := typed(t, Find(objs, "Deployment", aggregatorName), &appsv1.Deployment{})
	c := d.Spec.Template.Spec.Containers[0]
	got := flags(t, c.Args)
	if !d.Spec.Template.Spec.HostNetwork || *d.Spec.Replicas != 1 || got["--secure-addr"] != "127.0.0.1:20443" || got["--http-addr"] != "127.0.0.1:20080" ||
		got["--report-period"] != "10s" || got["--agent-sample-interval"] != "1s" || c.Image != "docker.io/local/cgpilot-aggregator:demo" ||
		c.ImagePullPolicy != corev1.PullNever || len(c.Ports) != 2 || c.ReadinessProbe.HTTPGet.Host != "127.0.0.1" {
		t.Errorf("aggregator: hostNetwork %v, replicas %d, flags %v, image %s %s, ports %v, probe %+v", d.Spec.Template.Spec.HostNetwork, *d.Spec.Replicas,
			got, c.Image, c.ImagePullPolicy, c.Ports, c.ReadinessProbe.HTTPGet)
	}
	// In-cluster configuration must reach the API server where the agents
	// do: the Service IP does not route on the test bed (the demo's
	// aggregator never became ready without this).
	aggEnv := map[string]string{}
	for _, e := range c.Env {
		aggEnv[e.Name] = e.Value
	}
	if aggEnv["KUBERNETES_SERVICE_HOST"] != b.APIHost || aggEnv["KUBERNETES_SERVICE_PORT"] != b.APIPort {
		t.Errorf("aggregator env %v, want KUBERNETES_SERVICE_HOST/PORT %s:%s", aggEnv, b.APIHost, b.APIPort)
	}
	for name, v := range AggregatorFlags {
		if _, ok := got[name]; !ok {
			t.Errorf("the overlay drops the aggregator's flag %s=%s", name, v)
		}
	}
	agent := flags(t, agentDaemonSet(t, objs).Spec.Template.Spec.Containers[0].Args)
	if agent["--aggregator-url"] != "https://127.0.0.1:20443" || agent["--aggregator-report-period"] != "10s" {
		t.Errorf("agent flags %v", agent)
	}
	wh := Find(objs, "MutatingWebhookConfiguration", aggregatorName)
	whs, _, _ := unstructured.NestedSlice(wh.Object, "webhooks")
	url, _, _ := unstructured.NestedString(whs[0].(map[string]any), "clientConfig", "url")
	bundle, _, _ := unstructured.NestedString(whs[0].(map[string]any), "clientConfig", "caBundle")
	if url != "https://127.0.0.1:20443/admission/mutate" || bundle == "" {
		t.Errorf("webhook clientConfig url %q caBundle %q", url, bundle)
	}
	// What agentReportProblems checks but the test bed's URL (the Service
	// does not route here) holds.
	for _, p := range agentReportProblems(objs) {
		if !strings.Contains(p, "--aggregator-url") {
			t.Error(p)
		}
	}
	if _, err := b.HelmValues(); err == nil {
		t.Error("HelmValues rendered the aggregator it does not render")
	}
}
