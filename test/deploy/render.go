package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// ErrRender is wrapped by every error of this package.
var ErrRender = errors.New("deploy")

// Components of deploy/kustomize/components.
const (
	ComponentMetrics         = "metrics"
	ComponentCgroupV2        = "cgroup-v2"
	ComponentCgroupV2Systemd = "cgroup-v2-systemd"
	ComponentCgroupV1Systemd = "cgroup-v1-systemd"
	ComponentAggregator      = "aggregator"
	ComponentRescheduling    = "rescheduling"
	// ComponentEBPFOOM adds EBPFOOMCapabilities to the agent (Helm:
	// ebpfOOM.enabled).
	ComponentEBPFOOM = "ebpf-oom"
)

// EBPFOOMCapabilities are what ComponentEBPFOOM and the chart's
// ebpfOOM.enabled add to the agent's container, which still drops ALL:
// what agent/oomwatch's eBPF backend needs on Linux 5.11+.
var EBPFOOMCapabilities = []string{"BPF", "PERFMON"}

// Namespace is where the kustomize base puts the agent.
const Namespace = "cgpilot-system"

// KubeVersion is what `helm template` is told the cluster runs: the test
// bed's version (test/k8sbins), inside the chart's kubeVersion range.
const KubeVersion = "v1.36.3"

// Kustomize renders deploy/kustomize of the checkout at root, with the
// named components on top, as multi-document YAML in kubectl kustomize's
// (legacy) order. It reads only deploy/kustomize and deploy/crds, copied
// into memory, so nothing is written to the checkout.
func Kustomize(root string, components ...string) ([]byte, error) {
	mem := filesys.MakeFsInMemory()
	for _, dir := range []string{"deploy/kustomize", "deploy/crds"} {
		if err := copyTree(mem, filepath.Join(root, dir), "/"+dir); err != nil {
			return nil, err
		}
	}
	target := "/deploy/kustomize"
	if len(components) > 0 {
		var k strings.Builder
		k.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../deploy/kustomize]\ncomponents:\n")
		for _, c := range components {
			if c == "" || strings.ContainsAny(c, "/\\") {
				return nil, fmt.Errorf("%w: bad component name %q", ErrRender, c)
			}
			fmt.Fprintf(&k, "  - ../deploy/kustomize/components/%s\n", c)
		}
		if err := mem.WriteFile("/overlay/kustomization.yaml", []byte(k.String())); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRender, err)
		}
		target = "/overlay"
	}
	out, err := build(mem, target)
	if err != nil {
		return nil, fmt.Errorf("%w: kustomize build %s/deploy/kustomize (components %v): %v", ErrRender, root, components, err)
	}
	return out, nil
}

// KustomizeDir renders the kustomization in dir on disk (an overlay such
// as TestBed.WriteOverlay's) as `kubectl kustomize dir` does.
func KustomizeDir(dir string) ([]byte, error) {
	out, err := build(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("%w: kustomize build %s: %v", ErrRender, dir, err)
	}
	return out, nil
}

func build(fs filesys.FileSystem, dir string) ([]byte, error) {
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy // as kubectl kustomize and kubectl apply -k
	rm, err := krusty.MakeKustomizer(opts).Run(fs, dir)
	if err != nil {
		return nil, err
	}
	return rm.AsYaml()
}

// copyTree copies the regular files below dir on disk to at in mem.
func copyTree(mem filesys.FileSystem, dir, at string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRender, err)
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRender, err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRender, err)
		}
		if err := mem.WriteFile(path.Join(at, filepath.ToSlash(rel)), b); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrRender, p, err)
		}
		return nil
	})
}

// Tool returns the path of a pinned tool built by hack/tool.sh (helm,
// controller-gen), building it on first use; the script's progress goes
// to progress (nil: discarded).
func Tool(ctx context.Context, root, name string, progress io.Writer) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "tool.sh"), name)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if progress != nil {
		cmd.Stderr = io.MultiWriter(&stderr, progress)
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: hack/tool.sh %s: %v: %s", ErrRender, name, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// Helm renders deploy/helm/cgpilot of the checkout at root with `helm
// template` as release "cgpilot" in namespace, with values (nil: the
// chart's defaults). Helm's own state directories go to a temporary one.
func Helm(ctx context.Context, helm, root, namespace string, values map[string]any) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "cgpilot-helm-")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRender, err)
	}
	defer os.RemoveAll(tmp)
	args := []string{"template", "cgpilot", filepath.Join(root, "deploy", "helm", "cgpilot"),
		"--namespace", namespace, "--kube-version", KubeVersion}
	if values != nil {
		b, err := json.Marshal(values) // JSON is YAML
		if err != nil {
			return nil, fmt.Errorf("%w: values: %v", ErrRender, err)
		}
		f := filepath.Join(tmp, "values.json")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRender, err)
		}
		args = append(args, "--values", f)
	}
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+tmp, "HELM_CONFIG_HOME="+tmp, "HELM_DATA_HOME="+tmp)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: helm %s: %v: %s", ErrRender, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// Decode splits multi-document YAML into objects, skipping empty
// documents (a template that rendered nothing, comments only). Numbers
// decode as the API machinery does (int64 where integral).
func Decode(b []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var objs []*unstructured.Unstructured
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: document %d: %v", ErrRender, i, err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%w: document %d: %v", ErrRender, i, err)
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" || string(t) == "{}" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("%w: document %d: %v", ErrRender, i, err)
		}
		if u.GetName() == "" {
			return nil, fmt.Errorf("%w: document %d (%s) has no name", ErrRender, i, u.GetKind())
		}
		objs = append(objs, u)
	}
}

// Key names an object as kubectl does: kind.group/namespace/name (no
// namespace for cluster-scoped objects).
func Key(u *unstructured.Unstructured) string {
	gvk := u.GroupVersionKind()
	k := gvk.Kind
	if gvk.Group != "" {
		k += "." + gvk.Group
	}
	if ns := u.GetNamespace(); ns != "" {
		return k + "/" + ns + "/" + u.GetName()
	}
	return k + "/" + u.GetName()
}

// Find returns the object of the given kind and name (any namespace).
func Find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}
