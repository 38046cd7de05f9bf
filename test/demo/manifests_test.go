//go:build linux

package demo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"sigs.k8s.io/yaml"

	"github.com/cgpilot/cgpilot/test/tier"
)

func deployDir(t *testing.T) string {
	t.Helper()
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "deploy")
}

// TestDeployManifests: deploy/ decodes, in apply order, into what the agent
// needs. (That the agent accepts the config file is proven by
// TestDemoUpAndDown in test/e2e, where it reads it and gets Ready; check-imports
// keeps agent out of test packages.)
func TestDeployManifests(t *testing.T) {
	objs, err := loadManifests(deployDir(t))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, fmt.Sprintf("%T", o))
	}
	want := "*v1.Namespace *v1.ServiceAccount *v1.ClusterRole *v1.ClusterRoleBinding *v1.ConfigMap *v1.DaemonSet"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("deploy/ objects in file order:\n got %s\nwant %s (the namespace must come first for kubectl apply -f deploy/)", got, want)
	}
	cm := objs[4].(*corev1.ConfigMap)
	var cfg struct {
		ReservedCPUs           *string `json:"reservedCPUs"`
		CgroupRoot             string  `json:"cgroupRoot"`
		CheckpointPath         string  `json:"checkpointPath"`
		KubeletCPUManagerState string  `json:"kubeletCPUManagerState"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatalf("deploy/ config.yaml: %v", err)
	}
	if cfg.ReservedCPUs == nil || *cfg.ReservedCPUs != "" || cfg.CgroupRoot != "/sys/fs/cgroup" {
		t.Errorf("config reservedCPUs %v cgroupRoot %q: the demo relies on none reserved, said explicitly, and the host cgroupfs at /sys/fs/cgroup", cfg.ReservedCPUs, cfg.CgroupRoot)
	}
	ds := objs[5].(*appsv1.DaemonSet)
	c := ds.Spec.Template.Spec.Containers[0]
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	hostPaths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.HostPath.Path] = mounts[v.Name]
		}
	}
	// Each host path is mounted where the config (and cgpilotctl's default
	// socket) expects it.
	for host, inPod := range map[string]string{
		"/sys/fs/cgroup":   cfg.CgroupRoot,
		"/var/lib/kubelet": filepath.Dir(cfg.KubeletCPUManagerState),
		"/var/lib/cgpilot": filepath.Dir(cfg.CheckpointPath),
		"/run/cgpilot":     "/run/cgpilot", // the agent's --socket and cgpilotctl's default
	} {
		if hostPaths[host] != inPod {
			t.Errorf("host path %s mounted at %q, want %q", host, hostPaths[host], inPod)
		}
	}
	var nodeName bool
	for _, e := range c.Env {
		nodeName = nodeName || (e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName")
	}
	if !nodeName {
		t.Error("NODE_NAME does not come from the downward API spec.nodeName")
	}
	if ds.Spec.Template.Spec.ServiceAccountName != objs[1].(*corev1.ServiceAccount).Name {
		t.Error("the DaemonSet does not run as the ServiceAccount of 01-rbac.yaml")
	}
}

func TestLocalize(t *testing.T) {
	l := localSetup{APIHost: "127.0.0.1", APIPort: "6443", HealthPort: 12345, KubeletDir: "/bed/node/kubelet", StateDir: "/bed/agent"}
	load := func(t *testing.T) *appsv1.DaemonSet {
		objs, err := loadManifests(deployDir(t))
		if err != nil {
			t.Fatal(err)
		}
		return objs[len(objs)-1].(*appsv1.DaemonSet)
	}
	t.Run("deploy", func(t *testing.T) {
		ds := load(t)
		if err := l.localize(ds); err != nil {
			t.Fatal(err)
		}
		c := ds.Spec.Template.Spec.Containers[0]
		if c.Image != AgentImage || c.ImagePullPolicy != corev1.PullNever {
			t.Errorf("image %s %s", c.Image, c.ImagePullPolicy)
		}
		if !strings.Contains(strings.Join(c.Args, " "), "--health-addr=127.0.0.1:12345") || c.ReadinessProbe.HTTPGet.Port.IntValue() != 12345 || c.LivenessProbe.HTTPGet.Port.IntValue() != 12345 {
			t.Errorf("health port not moved: %v, probes %v %v", c.Args, c.ReadinessProbe.HTTPGet.Port, c.LivenessProbe.HTTPGet.Port)
		}
		paths := map[string]bool{}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.HostPath != nil {
				paths[v.HostPath.Path] = true
			}
		}
		for _, p := range []string{"/sys/fs/cgroup", "/bed/node/kubelet", "/bed/agent/lib", "/bed/agent/run"} {
			if !paths[p] {
				t.Errorf("host path %s missing: %v", p, paths)
			}
		}
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		if env["KUBERNETES_SERVICE_HOST"] != "127.0.0.1" || env["KUBERNETES_SERVICE_PORT"] != "6443" {
			t.Errorf("apiserver env %v", env)
		}
	})
	for name, breakIt := range map[string]func(*appsv1.DaemonSet){
		"no health-addr": func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Args = nil },
		"two containers": func(ds *appsv1.DaemonSet) {
			s := &ds.Spec.Template.Spec
			s.Containers = append(s.Containers, s.Containers[0])
		},
		"no checkpoint hp": func(ds *appsv1.DaemonSet) { dropHostPath(ds, "/var/lib/cgpilot") },
		"no kubelet hp":    func(ds *appsv1.DaemonSet) { dropHostPath(ds, "/var/lib/kubelet") },
	} {
		t.Run(name, func(t *testing.T) {
			ds := load(t)
			breakIt(ds)
			if err := l.localize(ds); !errors.Is(err, ErrDemo) {
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
		t.Errorf("empty dir: %v", err)
	}
	bad := "# comment only\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Nope\n"
	if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := loadManifests(dir)
	if !errors.Is(err, ErrDemo) || !strings.Contains(err.Error(), "x.yaml document 3") {
		t.Errorf("unknown kind: %v, want an ErrDemo naming x.yaml document 3", err)
	}
}
