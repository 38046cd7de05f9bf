//go:build linux

package demo

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cgpilot/cgpilot/test/deploy"
	"github.com/cgpilot/cgpilot/test/tier"
)

func agentDaemonSet(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := loadManifests(root)
	if err != nil {
		t.Fatal(err)
	}
	ds := deploy.Find(objs, "DaemonSet", agentDS)
	if ds == nil || ds.GetNamespace() != agentNS {
		t.Fatalf("deploy/kustomize renders no DaemonSet %s/%s", agentNS, agentDS)
	}
	return ds
}

func typedDS(t *testing.T, u *unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ds); err != nil {
		t.Fatal(err)
	}
	return &ds
}

func TestLocalize(t *testing.T) {
	l := localSetup{APIHost: "127.0.0.1", APIPort: "6443", HealthPort: 12345, KubeletDir: "/bed/node/kubelet", StateDir: "/bed/agent"}
	t.Run("deploy", func(t *testing.T) {
		u := agentDaemonSet(t)
		notes, err := l.localize(u)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := u.Object["status"]; ok {
			t.Error("the localized object carries a status")
		}
		ds := typedDS(t, u)
		c := ds.Spec.Template.Spec.Containers[0]
		if c.Image != AgentImage || c.ImagePullPolicy != corev1.PullNever {
			t.Errorf("image %s %s", c.Image, c.ImagePullPolicy)
		}
		args := strings.Join(c.Args, " ")
		if !strings.Contains(args, "--health-addr=127.0.0.1:12345") || c.ReadinessProbe.HTTPGet.Port.IntValue() != 12345 || c.LivenessProbe.HTTPGet.Port.IntValue() != 12345 {
			t.Errorf("health port not moved: %v, probes %v %v", c.Args, c.ReadinessProbe.HTTPGet.Port, c.LivenessProbe.HTTPGet.Port)
		}
		if !strings.Contains(args, "--path.interrupts=") || !strings.Contains(args, "--kubelet-pod-resources=") {
			t.Errorf("flags dropped without AgentFlags: %v", c.Args)
		}
		paths := map[string]bool{}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.HostPath != nil {
				paths[v.HostPath.Path] = true
			}
		}
		for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/cpu/kubepods", "/proc/interrupts", "/bed/node/kubelet/pod-resources", "/bed/agent/lib", "/bed/agent/run"} {
			if !paths[p] {
				t.Errorf("host path %s missing: %v", p, paths)
			}
		}
		for _, p := range []string{"/var/lib/kubelet/pod-resources", "/var/lib/cgpilot", "/run/cgpilot"} {
			if paths[p] {
				t.Errorf("production host path %s kept", p)
			}
		}
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		if env["KUBERNETES_SERVICE_HOST"] != "127.0.0.1" || env["KUBERNETES_SERVICE_PORT"] != "6443" {
			t.Errorf("apiserver env %v", env)
		}
		if len(notes) != 4 || !strings.Contains(strings.Join(notes, "\n"), "/bed/node/kubelet/pod-resources") {
			t.Errorf("notes %q: want image, apiserver, health port and the moved host paths", notes)
		}
	})
	t.Run("agent without the new flags", func(t *testing.T) {
		u := agentDaemonSet(t)
		old := l
		old.AgentFlags = map[string]bool{"config": true, "health-addr": true, "socket": true}
		notes, err := old.localize(u)
		if err != nil {
			t.Fatal(err)
		}
		c := typedDS(t, u).Spec.Template.Spec.Containers[0]
		if strings.Join(c.Args, " ") != "--config=/etc/cgpilot/config.yaml --health-addr=127.0.0.1:12345 --socket=/run/cgpilot/agent.sock" {
			t.Errorf("args %v: want only the flags the agent has", c.Args)
		}
		if n := strings.Count(strings.Join(notes, "\n"), "dropped"); n != 2 {
			t.Errorf("notes %q: want the 2 dropped flags named", notes)
		}
	})
	for name, breakIt := range map[string]func(*appsv1.DaemonSet){
		"no health-addr": func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Args = nil },
		"two containers": func(ds *appsv1.DaemonSet) {
			s := &ds.Spec.Template.Spec
			s.Containers = append(s.Containers, s.Containers[0])
		},
		"no state hostPath":         func(ds *appsv1.DaemonSet) { dropHostPath(ds, "/var/lib/cgpilot") },
		"no pod-resources hostPath": func(ds *appsv1.DaemonSet) { dropHostPath(ds, "/var/lib/kubelet/pod-resources") },
	} {
		t.Run(name, func(t *testing.T) {
			ds := typedDS(t, agentDaemonSet(t))
			breakIt(ds)
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ds)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.localize(&unstructured.Unstructured{Object: obj}); !errors.Is(err, ErrDemo) {
				t.Errorf("localize = %v, want an ErrDemo", err)
			}
		})
	}
}

func dropHostPath(ds *appsv1.DaemonSet, path string) {
	s := &ds.Spec.Template.Spec
	var keep []corev1.Volume
	for _, v := range s.Volumes {
		if v.HostPath == nil || v.HostPath.Path != path {
			keep = append(keep, v)
		}
	}
	s.Volumes = keep
}

func TestLoadManifestsErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := loadManifests(dir); !errors.Is(err, ErrDemo) || !strings.Contains(err.Error(), dir) {
		t.Errorf("no deploy/ in %s: %v, want an ErrDemo naming it", dir, err)
	}
}

// TestAgentFlags: the flags are read from Go's flag usage output, whatever
// the exit status; a binary that lists none is an error.
func TestAgentFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	usage := write("agent", `cat >&2 <<'X'
Usage of cgpilot-agent:
  -config string
    	node configuration file
  -path.sysfs string
    	sysfs mount point (default "/sys")
  -debug
    	debug logging
X
exit 2
`)
	got, err := agentFlags(context.Background(), usage)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !got["config"] || !got["path.sysfs"] || !got["debug"] {
		t.Errorf("flags %v, want config, path.sysfs, debug", got)
	}
	if _, err := agentFlags(context.Background(), write("silent", "exit 0\n")); !errors.Is(err, ErrDemo) {
		t.Errorf("no usage: %v, want ErrDemo", err)
	}
}
