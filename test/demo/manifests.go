package demo

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
)

// ErrDemo is wrapped by every error of the demo.
var ErrDemo = errors.New("demo")

// AgentImage is the locally built agent image the demo imports into the
// node's containerd.
const AgentImage = "docker.io/local/cgpilot-agent:demo"

// docSeparator splits multi-document YAML on lines that are exactly "---".
var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// loadManifests decodes every document of deploy/*.yaml (in file name
// order) into typed objects.
func loadManifests(dir string) ([]runtime.Object, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no manifests in %s", ErrDemo, dir)
	}
	sort.Strings(files)
	var objs []runtime.Object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrDemo, err)
		}
		for i, doc := range docSeparator.Split(string(b), -1) {
			if len(bytes.TrimSpace(stripComments([]byte(doc)))) == 0 {
				continue
			}
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
			if err != nil {
				return nil, fmt.Errorf("%w: %s document %d: %v", ErrDemo, f, i+1, err)
			}
			objs = append(objs, obj)
		}
	}
	return objs, nil
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// localSetup is what differs between a real cluster and the test bed.
type localSetup struct {
	APIHost, APIPort string // the apiserver, reached on the host network
	HealthPort       int    // free port for /healthz, /readyz, /metrics
	KubeletDir       string // the harness kubelet's --root-dir
	StateDir         string // host dir for the checkpoint and the socket
}

// Overrides lists, for the demo's output, each change localize makes to
// the DaemonSet of deploy/, and why.
func (l localSetup) Overrides() []string {
	return []string{
		"image " + AgentImage + " (built from ./cmd/cgpilot-agent, imported with ctr), imagePullPolicy Never",
		"KUBERNETES_SERVICE_HOST/PORT=" + l.APIHost + ":" + l.APIPort + ": the test bed runs no kube-proxy, so the kubernetes Service IP does not route",
		"health port " + strconv.Itoa(l.HealthPort) + " instead of 9464: other agents on this shared machine may hold 9464",
		"hostPath /var/lib/kubelet -> " + l.KubeletDir + " (the test bed kubelet's --root-dir)",
		"hostPath /var/lib/cgpilot, /run/cgpilot -> " + filepath.Join(l.StateDir, "{lib,run}") + " so make demo-down removes them with the test bed",
	}
}

// localize adapts the deploy/ DaemonSet to the test bed; every change is
// one of Overrides.
func (l localSetup) localize(ds *appsv1.DaemonSet) error {
	spec := &ds.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		return fmt.Errorf("%w: daemonset %s: want 1 container, have %d", ErrDemo, ds.Name, len(spec.Containers))
	}
	c := &spec.Containers[0]
	c.Image, c.ImagePullPolicy = AgentImage, corev1.PullNever
	c.Env = append(c.Env,
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: l.APIHost},
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: l.APIPort})
	found := false
	for i, a := range c.Args {
		if strings.HasPrefix(a, "--health-addr=") {
			c.Args[i] = "--health-addr=127.0.0.1:" + strconv.Itoa(l.HealthPort)
			found = true
		}
	}
	if !found {
		return fmt.Errorf("%w: daemonset %s: no --health-addr argument to move", ErrDemo, ds.Name)
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p != nil && p.HTTPGet != nil {
			p.HTTPGet.Port = intstr.FromInt(l.HealthPort)
		}
	}
	paths := map[string]string{
		"/var/lib/kubelet": l.KubeletDir,
		"/var/lib/cgpilot": filepath.Join(l.StateDir, "lib"),
		"/run/cgpilot":     filepath.Join(l.StateDir, "run"),
	}
	moved := 0
	for i := range spec.Volumes {
		hp := spec.Volumes[i].HostPath
		if hp == nil {
			continue
		}
		if to, ok := paths[hp.Path]; ok {
			hp.Path = to
			moved++
		}
	}
	if moved != len(paths) {
		return fmt.Errorf("%w: daemonset %s: moved %d of the %d host paths %v", ErrDemo, ds.Name, moved, len(paths), paths)
	}
	return nil
}
