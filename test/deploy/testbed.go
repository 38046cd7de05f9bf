package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestBed is what differs between a real cluster and the test bed's
// single-node cluster (test/harness) for the agent's manifests. The same
// differences are rendered two ways, so that the demo and the node-tier
// tests deploy exactly what users do: a kustomize overlay of the base for
// `kubectl apply -k` (WriteOverlay) and a values file for `helm install`
// (HelmValues). Notes says what changes and why, for the demo's output.
type TestBed struct {
	// Image is the agent image ("docker.io/local/cgpilot-agent:demo"),
	// imported into the node's containerd (pulled never).
	Image string
	// APIHost and APIPort reach the API server from the host network: the
	// test bed runs no kube-proxy, so the kubernetes Service IP does not
	// route.
	APIHost, APIPort string
	// HealthPort replaces 9464, which another agent on a shared machine may
	// hold (the agent uses the host network).
	HealthPort int
	// KubeletDir is the test bed kubelet's --root-dir: its PodResources
	// socket is below it, not below /var/lib/kubelet.
	KubeletDir string
	// StateDir holds the agent's host directories (lib for the state, run
	// for the socket), so that removing the test bed removes them.
	StateDir string
	// SampleInterval, when set, replaces the config's
	// rightsizing.sampleInterval (the demo's short right-sizing windows).
	SampleInterval time.Duration
	// Aggregator, when set, adds the aggregator component with the test
	// bed's changes (AggregatorBed); the overlay only (not HelmValues).
	Aggregator *AggregatorBed
	// ExtraArgs are appended to the agent's arguments (the churn soak's
	// --profiling); the overlay only.
	ExtraArgs []string
	// Components of deploy/kustomize/components the overlay adds, as a
	// user of such a node would (ComponentCgroupV2 on a cgroup v2 node);
	// the overlay only.
	Components []string
}

// HostPaths maps the base's host paths to where the test bed puts them.
func (b TestBed) HostPaths() map[string]string {
	return map[string]string{
		"/var/lib/kubelet/pod-resources": filepath.Join(b.KubeletDir, "pod-resources"),
		"/var/lib/cgpilot":               filepath.Join(b.StateDir, "lib"),
		"/run/cgpilot":                   filepath.Join(b.StateDir, "run"),
	}
}

// Socket is the agent's local API socket on the host.
func (b TestBed) Socket() string { return filepath.Join(b.StateDir, "run", "agent.sock") }

func (b TestBed) validate() error {
	repo, tag := b.imageParts()
	switch {
	case repo == "" || tag == "":
		return fmt.Errorf("%w: test bed image %q: want repository:tag", ErrRender, b.Image)
	case b.APIHost == "" || b.APIPort == "":
		return fmt.Errorf("%w: test bed API server address %q:%q", ErrRender, b.APIHost, b.APIPort)
	case b.HealthPort <= 0 || b.HealthPort > 65535:
		return fmt.Errorf("%w: test bed health port %d", ErrRender, b.HealthPort)
	case !filepath.IsAbs(b.KubeletDir) || !filepath.IsAbs(b.StateDir):
		return fmt.Errorf("%w: test bed directories %q, %q: want absolute paths", ErrRender, b.KubeletDir, b.StateDir)
	}
	if b.Aggregator != nil {
		return b.Aggregator.validate()
	}
	return nil
}

// imageParts splits Image at the tag's colon (not a registry port's).
func (b TestBed) imageParts() (repo, tag string) {
	i := strings.LastIndex(b.Image, ":")
	if i < 0 || strings.Contains(b.Image[i:], "/") {
		return b.Image, ""
	}
	return b.Image[:i], b.Image[i+1:]
}

// Notes lists each change with its reason.
func (b TestBed) Notes() []string {
	var moved []string
	paths := b.HostPaths()
	for _, from := range unionKeys(paths, nil) {
		moved = append(moved, from+" -> "+paths[from])
	}
	n := []string{
		"image " + b.Image + " (built from ./cmd/cgpilot-agent, imported into the node's containerd with ctr), imagePullPolicy Never",
		"env KUBERNETES_SERVICE_HOST/PORT=" + b.APIHost + ":" + b.APIPort + ": the test bed runs no kube-proxy, so the kubernetes Service IP does not route",
		"health port " + strconv.Itoa(b.HealthPort) + " instead of 9464: another agent on this shared machine may hold 9464",
		"hostPath " + strings.Join(moved, ", ") + ": the kubelet's PodResources socket is below the test bed kubelet's --root-dir, " +
			"and the agent's state stays in the test bed's directory, which its teardown removes",
	}
	if b.SampleInterval > 0 {
		n = append(n, "config rightsizing.sampleInterval "+b.SampleInterval.String()+" instead of 10s: the demo's policies decide every few seconds")
	}
	for _, c := range b.Components {
		what := "its cgroup mounts"
		if c == ComponentEBPFOOM {
			what = "CAP_BPF and CAP_PERFMON for the eBPF OOM watcher"
		}
		n = append(n, "component "+c+" of deploy/kustomize/components: what a user of this node adds ("+what+")")
	}
	if b.Aggregator != nil {
		n = append(n, b.Aggregator.notes()...)
	}
	return n
}

// HelmValues are the chart values of the same changes.
func (b TestBed) HelmValues() (map[string]any, error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	if b.Aggregator != nil {
		return nil, fmt.Errorf("%w: the test bed's aggregator is rendered as a kustomize overlay only", ErrRender)
	}
	repo, tag := b.imageParts()
	p := b.HostPaths()
	v := map[string]any{
		"image":      map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"},
		"healthPort": b.HealthPort,
		"extraEnv": []any{
			map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": b.APIHost},
			map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": b.APIPort},
		},
		"hostPaths": map[string]any{
			"kubeletPodResources": p["/var/lib/kubelet/pod-resources"],
			"state":               p["/var/lib/cgpilot"],
			"run":                 p["/run/cgpilot"],
		},
	}
	if b.SampleInterval > 0 {
		// Helm merges a values file into the chart's values key by key.
		v["config"] = map[string]any{"rightsizing": map[string]any{"sampleInterval": b.SampleInterval.String()}}
	}
	return v, nil
}

// WriteOverlay writes a kustomize overlay of root's deploy/kustomize into
// dir (created if missing): `kubectl apply -k dir` then deploys the base
// with the test bed's changes. The DaemonSet patch names every argument
// (a strategic merge replaces a list of strings whole), so the base is
// rendered first to copy its arguments.
func (b TestBed) WriteOverlay(dir, root string) error {
	if err := b.validate(); err != nil {
		return err
	}
	components := append([]string{}, b.Components...)
	if b.Aggregator != nil {
		components = append(components, ComponentAggregator)
	}
	rendered, err := Kustomize(root, components...)
	if err != nil {
		return err
	}
	objs, err := Decode(rendered)
	if err != nil {
		return err
	}
	ds, cm := Find(objs, "DaemonSet", AgentName), Find(objs, "ConfigMap", AgentName)
	if ds == nil || cm == nil {
		return fmt.Errorf("%w: deploy/kustomize in %s renders no DaemonSet or ConfigMap %s", ErrRender, root, AgentName)
	}
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		return fmt.Errorf("%w: daemonset %s: want 1 container, have %d", ErrRender, AgentName, len(containers))
	}
	c, _ := containers[0].(map[string]any)
	baseArgs, _, _ := unstructured.NestedStringSlice(c, "args")
	baseImage, _, _ := unstructured.NestedString(c, "image")
	var args []string
	found := false
	for _, a := range baseArgs {
		switch {
		case strings.HasPrefix(a, "--health-addr="):
			a, found = "--health-addr=127.0.0.1:"+strconv.Itoa(b.HealthPort), true
		case b.Aggregator != nil && strings.HasPrefix(a, "--aggregator-url="):
			a = "--aggregator-url=" + b.Aggregator.URL()
		case b.Aggregator != nil && strings.HasPrefix(a, "--aggregator-report-period="):
			a = "--aggregator-report-period=" + b.Aggregator.ReportPeriod.String()
		}
		args = append(args, a)
	}
	if !found {
		return fmt.Errorf("%w: daemonset %s: no --health-addr argument to move", ErrRender, AgentName)
	}
	args = append(args, b.ExtraArgs...)
	byPath := map[string]string{} // host path -> volume name
	vols, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "volumes")
	for _, v := range vols {
		m, _ := v.(map[string]any)
		if p, ok, _ := unstructured.NestedString(m, "hostPath", "path"); ok {
			byPath[p], _, _ = unstructured.NestedString(m, "name")
		}
	}
	var volumes []any
	moves := b.HostPaths()
	for _, from := range unionKeys(moves, nil) {
		name, ok := byPath[from]
		if !ok {
			return fmt.Errorf("%w: daemonset %s has no hostPath volume %s to move", ErrRender, AgentName, from)
		}
		volumes = append(volumes, map[string]any{"name": name, "hostPath": map[string]any{"path": moves[from]}})
	}
	probe := map[string]any{"httpGet": map[string]any{"port": b.HealthPort}}
	docs := []any{map[string]any{
		"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": AgentName, "namespace": Namespace},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{
				"name": c["name"], "args": args, "imagePullPolicy": "Never",
				"env": []any{
					map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": b.APIHost},
					map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": b.APIPort},
				},
				"readinessProbe": probe, "livenessProbe": probe,
			}},
			"volumes": volumes,
		}}},
	}}
	if b.SampleInterval > 0 {
		data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
		var cfg map[string]any
		if err := yaml.Unmarshal([]byte(data), &cfg); err != nil {
			return fmt.Errorf("%w: configmap %s config.yaml: %v", ErrRender, AgentName, err)
		}
		rs, _ := cfg["rightsizing"].(map[string]any)
		if rs == nil {
			rs = map[string]any{}
		}
		rs["sampleInterval"] = b.SampleInterval.String()
		cfg["rightsizing"] = rs
		out, err := yaml.Marshal(cfg)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRender, err)
		}
		docs = append(docs, map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": AgentName, "namespace": Namespace},
			"data":     map[string]any{"config.yaml": string(out)},
		})
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRender, err)
	}
	if err := os.MkdirAll(absDir, 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrRender, err)
	}
	var extra, webhookPatch, generators string
	if a := b.Aggregator; a != nil {
		agg := Find(objs, "Deployment", aggregatorName)
		if agg == nil {
			return fmt.Errorf("%w: the aggregator component renders no Deployment %s", ErrRender, aggregatorName)
		}
		actrs, _, _ := unstructured.NestedSlice(agg.Object, "spec", "template", "spec", "containers")
		if len(actrs) != 1 {
			return fmt.Errorf("%w: deployment %s: want 1 container", ErrRender, aggregatorName)
		}
		ac, _ := actrs[0].(map[string]any)
		aggArgs, _, _ := unstructured.NestedStringSlice(ac, "args")
		aggImage, _, _ := unstructured.NestedString(ac, "image")
		aggDocs, wp, gens, err := a.aggregatorOverlay(absDir, aggArgs, b.APIHost, b.APIPort)
		if err != nil {
			return err
		}
		docs = append(docs, aggDocs...)
		webhookPatch, generators = wp, gens
		aggRepo, _ := TestBed{Image: aggImage}.imageParts()
		newRepo, newTag := TestBed{Image: a.Image}.imageParts()
		extra = fmt.Sprintf("  - name: %s\n    newName: %s\n    newTag: %q\n", aggRepo, newRepo, newTag)
	}
	var patch strings.Builder
	patch.WriteString("# The test bed's changes to deploy/kustomize (test/deploy.TestBed).\n")
	for _, d := range docs {
		y, err := yaml.Marshal(d)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRender, err)
		}
		patch.WriteString("---\n")
		patch.Write(y)
	}
	// kustomize takes a base only by a relative path.
	base, err := filepath.Rel(absDir, filepath.Join(root, "deploy", "kustomize"))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRender, err)
	}
	repo, tag := b.imageParts()
	baseRepo, _ := TestBed{Image: baseImage}.imageParts()
	k := fmt.Sprintf(`# deploy/kustomize on the test bed (test/deploy.TestBed): kubectl apply -k %s
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
images:
  - name: %s
    newName: %s
    newTag: %q
%spatches:
  - path: %s
`, absDir, base, baseRepo, repo, tag, extra, OverlayPatch)
	files := map[string]string{OverlayPatch: patch.String()}
	if b.Aggregator != nil {
		k += fmt.Sprintf("  - path: %s\n    target: {group: admissionregistration.k8s.io, version: v1, kind: MutatingWebhookConfiguration, name: %s}\n",
			webhookPatchFile, aggregatorName)
		files[webhookPatchFile] = webhookPatch
	}
	if len(components) > 0 {
		k += "components:\n"
		for _, c := range components {
			rel, err := filepath.Rel(absDir, filepath.Join(root, "deploy", "kustomize", "components", c))
			if err != nil {
				return fmt.Errorf("%w: %v", ErrRender, err)
			}
			k += "  - " + rel + "\n"
		}
	}
	k += generators
	files["kustomization.yaml"] = k
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(absDir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("%w: %v", ErrRender, err)
		}
	}
	return nil
}

// OverlayPatch is the file of WriteOverlay's patches; webhookPatchFile
// its JSON patch of the aggregator's webhook.
const (
	OverlayPatch     = "testbed-patch.yaml"
	webhookPatchFile = "testbed-webhook-patch.yaml"
)

// AgentName names the agent's DaemonSet, ConfigMap and ServiceAccount.
const AgentName = "cgpilot-agent"
