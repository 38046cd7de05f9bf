//go:build linux

package cgroup_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/test/tier"
)

// TestNodeLayoutMatchesKubelet walks the pod cgroups a real kubelet and
// runtime made on this node and checks that Layout names every pod and
// container directory exactly as they did.
func TestNodeLayoutMatchesKubelet(t *testing.T) {
	tier.Node(t)
	m, err := cgroup.ReadMounts("/proc")
	if err != nil {
		t.Fatal(err)
	}
	l, err := cgroup.NewLayout(m, cgroup.LayoutConfig{})
	if err != nil {
		t.Fatal(err)
	}
	kube, err := l.DirsAt(l.KubepodsPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mode %v, driver %s, kubepods %s", m.Mode, l.Driver(), kube.CPU)
	pods := 0
	err = filepath.WalkDir(kube.CPU, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		uid, qos, ok := podFromName(d.Name(), filepath.Base(filepath.Dir(p)))
		if !ok {
			return nil
		}
		pods++
		got, err := l.PodDirs(uid, qos)
		if err != nil || got.CPU != p {
			t.Errorf("pod %s (%s): PodDirs = %q, %v", uid, qos, got.CPU, err)
		}
		kids, _ := os.ReadDir(p)
		for _, k := range kids {
			id, scheme, ok := containerFromName(k.Name())
			if !k.IsDir() || !ok {
				continue
			}
			got, err := l.ContainerDirs(uid, qos, scheme+"://"+id)
			if err != nil || got.CPU != filepath.Join(p, k.Name()) {
				t.Errorf("container %s: ContainerDirs = %q, %v", k.Name(), got.CPU, err)
			}
		}
		return filepath.SkipDir
	})
	if err != nil {
		t.Fatal(err)
	}
	if pods == 0 {
		t.Skip("node tier: no pods running under kubepods")
	}
}

func podFromName(name, parent string) (uid string, qos cgroup.QoS, ok bool) {
	qosOf := func(s string) cgroup.QoS {
		switch {
		case strings.Contains(s, "burstable"):
			return cgroup.QoSBurstable
		case strings.Contains(s, "besteffort"):
			return cgroup.QoSBestEffort
		}
		return cgroup.QoSGuaranteed
	}
	if strings.HasSuffix(name, ".slice") {
		i := strings.LastIndex(name, "-pod")
		if i < 0 {
			return "", "", false
		}
		return strings.ReplaceAll(strings.TrimSuffix(name[i+4:], ".slice"), "_", "-"), qosOf(name[:i]), true
	}
	if !strings.HasPrefix(name, "pod") {
		return "", "", false
	}
	return name[3:], qosOf(parent), true
}

func containerFromName(name string) (id, scheme string, ok bool) {
	if strings.HasPrefix(name, "crio-conmon-") {
		return "", "", false
	}
	for _, p := range []struct{ prefix, scheme string }{{"cri-containerd-", "containerd"}, {"crio-", "cri-o"}, {"docker-", "docker"}} {
		if strings.HasPrefix(name, p.prefix) {
			return strings.TrimSuffix(strings.TrimPrefix(name, p.prefix), ".scope"), p.scheme, true
		}
	}
	return name, "containerd", !strings.Contains(name, ".")
}
