package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cgpilot/cgpilot/test/deploy"
)

// ErrDemo is wrapped by every error of the demo.
var ErrDemo = errors.New("demo")

// AgentImage is the locally built agent image the demo imports into the
// node's containerd.
const AgentImage = "docker.io/local/cgpilot-agent:demo"

// loadManifests renders the kustomize base of deploy/ in the checkout at
// root: what `kubectl apply -k deploy/kustomize` applies.
func loadManifests(root string) ([]*unstructured.Unstructured, error) {
	b, err := deploy.Kustomize(root)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	objs, err := deploy.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("%w: deploy/kustomize in %s renders nothing", ErrDemo, root)
	}
	return objs, nil
}

// localSetup is what differs between a real cluster and the test bed.
type localSetup struct {
	APIHost, APIPort string // the apiserver, reached on the host network
	HealthPort       int    // free port for /healthz, /readyz, /metrics
	KubeletDir       string // the harness kubelet's --root-dir
	StateDir         string // host dir for the checkpoint and the socket
	// AgentFlags are the flags the agent built from this checkout accepts
	// (agentFlags); nil means every flag of the manifest.
	AgentFlags map[string]bool
}

// hostPaths maps the DaemonSet's host paths that the test bed moves to
// where they go.
func (l localSetup) hostPaths() map[string]string {
	return map[string]string{
		"/var/lib/kubelet/pod-resources": filepath.Join(l.KubeletDir, "pod-resources"),
		"/var/lib/cgpilot":               filepath.Join(l.StateDir, "lib"),
		"/run/cgpilot":                   filepath.Join(l.StateDir, "run"),
	}
}

// localize adapts the agent DaemonSet of deploy/ to the test bed and
// returns each change it made, with the reason, for the demo's output.
func (l localSetup) localize(u *unstructured.Unstructured) ([]string, error) {
	var ds appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ds); err != nil {
		return nil, fmt.Errorf("%w: daemonset %s: %v", ErrDemo, u.GetName(), err)
	}
	spec := &ds.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		return nil, fmt.Errorf("%w: daemonset %s: want 1 container, have %d", ErrDemo, ds.Name, len(spec.Containers))
	}
	c := &spec.Containers[0]
	notes := []string{
		"image " + AgentImage + " (built from ./cmd/cgpilot-agent, imported with ctr), imagePullPolicy Never",
		"KUBERNETES_SERVICE_HOST/PORT=" + l.APIHost + ":" + l.APIPort + ": the test bed runs no kube-proxy, so the kubernetes Service IP does not route",
		"health port " + strconv.Itoa(l.HealthPort) + " instead of 9464: other agents on this shared machine may hold 9464",
	}
	c.Image, c.ImagePullPolicy = AgentImage, corev1.PullNever
	c.Env = append(c.Env,
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: l.APIHost},
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: l.APIPort})
	found := false
	var args []string
	for _, a := range c.Args {
		name, _, _ := strings.Cut(a, "=")
		if name == "--health-addr" {
			a = "--health-addr=127.0.0.1:" + strconv.Itoa(l.HealthPort)
			found = true
		}
		if l.AgentFlags != nil && !l.AgentFlags[strings.TrimLeft(name, "-")] {
			notes = append(notes, "flag "+a+" dropped: the agent of this checkout does not have "+name+" yet")
			continue
		}
		args = append(args, a)
	}
	if !found {
		return nil, fmt.Errorf("%w: daemonset %s: no --health-addr argument to move", ErrDemo, ds.Name)
	}
	c.Args = args
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p != nil && p.HTTPGet != nil {
			p.HTTPGet.Port = intstr.FromInt(l.HealthPort)
		}
	}
	paths := l.hostPaths()
	var moved []string
	for i := range spec.Volumes {
		hp := spec.Volumes[i].HostPath
		if hp == nil {
			continue
		}
		if to, ok := paths[hp.Path]; ok {
			moved = append(moved, hp.Path+" -> "+to)
			hp.Path = to
		}
	}
	if len(moved) != len(paths) {
		return nil, fmt.Errorf("%w: daemonset %s: moved %v, want all of the host paths %v", ErrDemo, ds.Name, moved, paths)
	}
	sort.Strings(moved)
	notes = append(notes, "hostPath "+strings.Join(moved, ", ")+": the kubelet's PodResources socket is below the test bed kubelet's --root-dir, "+
		"and the agent's state stays in the demo directory, so make demo-down removes it")
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&ds)
	if err != nil {
		return nil, fmt.Errorf("%w: daemonset %s: %v", ErrDemo, ds.Name, err)
	}
	delete(obj, "status") // not the client's to apply
	u.Object = obj
	return notes, nil
}

// flagLine matches a flag in Go's flag package usage output ("  -name value").
var flagLine = regexp.MustCompile(`(?m)^\s+-([A-Za-z0-9][A-Za-z0-9._-]*)`)

// agentFlags lists the flags the agent binary accepts, from its -h output.
func agentFlags(ctx context.Context, bin string) (map[string]bool, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-h")
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // -h exits non-zero with the usage
	flags := map[string]bool{}
	for _, m := range flagLine.FindAllStringSubmatch(out.String(), -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		return nil, fmt.Errorf("%w: %s -h lists no flags: %q", ErrDemo, bin, out.String())
	}
	return flags, nil
}
