//go:build linux

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/images"
	"github.com/cgpilot/cgpilot/test/tier"
)

// TestLayoutResolvesRealKubeletTree checks cgroup.Layout against the tree a
// real kubelet + containerd lays out: for a pod of each QoS class, the pod
// and container directories resolved from (UID, QoS class, container ID in
// pod status) exist, and the container's own process is in the resolved
// container cgroup of every controller.
func TestLayoutResolvesRealKubeletTree(t *testing.T) {
	bins := tier.Node(t)
	cp := harness.MustStart(t, bins, harness.Options{})
	n := harness.MustStartNode(t, cp, harness.NodeOptions{Name: "cgpilot-layout-node"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := cp.Client

	qty := resource.MustParse
	shapes := map[string]corev1.ResourceRequirements{
		"guaranteed": {
			Requests: corev1.ResourceList{corev1.ResourceCPU: qty("100m"), corev1.ResourceMemory: qty("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: qty("100m"), corev1.ResourceMemory: qty("32Mi")},
		},
		"burstable": {
			Requests: corev1.ResourceList{corev1.ResourceCPU: qty("100m")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: qty("200m")},
		},
		"besteffort": {},
	}
	for name, res := range shapes {
		p := testPod(name, n.Name())
		p.Spec.Containers[0].Image = images.BusyboxRef
		p.Spec.Containers[0].Resources = res
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := map[string]*corev1.Pod{}
	waitFor(t, "3 pods running", 2*time.Minute, func() bool {
		for name := range shapes {
			p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
				return false
			}
			pods[name] = p
		}
		return true
	})

	m, err := cgroup.ReadMounts("/proc")
	if err != nil {
		t.Fatal(err)
	}
	l, err := cgroup.NewLayout(m, cgroup.LayoutConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Driver() != cgroup.DriverCgroupfs {
		t.Errorf("driver = %s, want cgroupfs (the harness kubelet's)", l.Driver())
	}
	for name, p := range pods {
		qos := cgroup.QoS(p.Status.QOSClass)
		uid := string(p.UID)
		podDirs, err := l.PodDirs(uid, qos)
		if err != nil {
			t.Fatalf("%s: PodDirs: %v", name, err)
		}
		for _, d := range []string{podDirs.CPU, podDirs.CPUSet, podDirs.Memory} {
			if _, err := os.Stat(d); err != nil {
				t.Errorf("%s (%s): resolved pod dir missing: %v", name, qos, err)
			}
		}
		cid := p.Status.ContainerStatuses[0].ContainerID
		ctr, err := l.ContainerDirs(uid, qos, cid)
		if err != nil {
			t.Fatalf("%s: ContainerDirs(%s): %v", name, cid, err)
		}
		if filepath.Dir(ctr.CPU) != podDirs.CPU {
			t.Errorf("%s: container dir %s is not inside pod dir %s", name, ctr.CPU, podDirs.CPU)
		}
		// The container's processes must be in each resolved directory;
		// an existing but wrong directory would hold none of them.
		// The pod reads Running while runc's init may not have exec'd
		// the command yet ("runc:[2:INIT]"), so wait for the exec.
		for _, d := range []string{ctr.CPU, ctr.CPUSet, ctr.Memory} {
			var got string
			deadline := time.Now().Add(30 * time.Second)
			for {
				got = ""
				if pids := readPids(t, filepath.Join(d, "cgroup.procs")); len(pids) > 0 {
					comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pids[0]), "comm"))
					got = strings.TrimSpace(string(comm))
				}
				if got == "sleep" || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if got != "sleep" {
				t.Errorf("%s (%s): process in resolved container cgroup %s is %q after 30 s, want the pod's sleep", name, qos, d, got)
			}
		}
		t.Logf("%s: %s -> %s", name, qos, ctr.CPU)
	}
}

func readPids(t *testing.T, file string) []int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Errorf("read %s: %v", file, err)
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}
