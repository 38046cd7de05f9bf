//go:build linux

package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/images"
	"github.com/cgpilot/cgpilot/test/tier"
)

// TestNodePodResizeAndCleanTeardown brings up a real single-node cluster
// (control plane with controllers, containerd, runc, CNI, kubelet), runs a
// pod from the local busybox image to Ready, resizes its CPU in place and
// sees the kubelet rewrite the container's real cgroup, reads its log
// through the apiserver, then tears everything down and proves that no
// process, mount, cgroup, listener, link, sysctl change or directory is
// left.
func TestNodePodResizeAndCleanTeardown(t *testing.T) {
	bins := tier.Node(t)
	before := takeSnapshot(t)
	if len(before.kubepods) > 0 {
		t.Skipf("kubepods cgroups exist (%v): another kubelet runs here", before.kubepods)
	}
	cp := harness.MustStart(t, bins, harness.Options{Controllers: true})
	n := harness.MustStartNode(t, cp, harness.NodeOptions{Name: "cgpilot-e2e-node"})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cs := cp.Client

	node, err := cs.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s: kubelet %s, runtime %s, InternalIP %v", node.Name, node.Status.NodeInfo.KubeletVersion, node.Status.NodeInfo.ContainerRuntimeVersion, node.Status.Addresses)

	pod := testPod("bb", n.Name())
	pod.Spec.Containers[0].Image = images.BusyboxRef
	pod.Spec.Containers[0].Command = []string{"sh", "-c", "echo hello-from-cgpilot-e2e; exec sleep 3600"}
	podStart := time.Now()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var running *corev1.Pod
	waitFor(t, "pod bb Ready", 2*time.Minute, func() bool {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "bb", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				running = p
				return true
			}
		}
		return false
	})
	t.Logf("timing: pod create -> Ready %v (pod IP %s, QoS %s)", time.Since(podStart).Round(time.Millisecond), running.Status.PodIP, running.Status.QOSClass)
	if !strings.HasPrefix(running.Status.PodIP, "10.244.0.") {
		t.Errorf("pod IP %q is not from the ptp subnet 10.244.0.0/24", running.Status.PodIP)
	}

	cs0 := running.Status.ContainerStatuses[0]
	ctrID := strings.TrimPrefix(cs0.ContainerID, "containerd://")
	quotaFile, want20, want30 := cpuLimitFile(t, n, string(running.UID), ctrID)
	if got := readTrim(t, quotaFile); got != want20 {
		t.Fatalf("%s = %s, want %s (cpu limit 200m)", quotaFile, got, want20)
	}
	// The container's process is really in that cgroup. Ready means
	// started, not that the shell has run: it echoes, then execs sleep,
	// a moment later (the CI run of 2026-11-29 found "sh" 876 ms after
	// the create).
	var comm string
	var logs []string
	shellDone := func() bool {
		procs := readTrim(t, filepath.Join(filepath.Dir(quotaFile), "cgroup.procs"))
		if procs == "" {
			t.Fatalf("no process in %s", filepath.Dir(quotaFile))
		}
		comm = readTrim(t, "/proc/"+strings.Fields(procs)[0]+"/comm")
		// The kubelet writes container logs under the node's podLogsDir
		// (not /var/log/pods); TestNodeLogsExecAndClusterDNS reads them
		// through the API server.
		logs, _ = filepath.Glob(filepath.Join(n.State.Dir, "pod-logs", "default_bb_*", "c", "0.log"))
		return comm == "sleep" && len(logs) == 1 && strings.Contains(readTrim(t, logs[0]), "hello-from-cgpilot-e2e")
	}
	for deadline := time.Now().Add(30 * time.Second); !shellDone() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if comm != "sleep" {
		t.Errorf("process in the container cgroup is %q, want sleep", comm)
	}
	if len(logs) != 1 || !strings.Contains(readTrim(t, logs[0]), "hello-from-cgpilot-e2e") {
		t.Errorf("container log in the node's pod-logs dir: files %v, content %q", logs, readTrim(t, firstOr(logs)))
	}

	resizeStart := time.Now()
	if _, err := cs.CoreV1().Pods("default").Patch(ctx, "bb", types.StrategicMergePatchType, resizeCPU("c", "150m", "300m"), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatalf("pods/resize: %v", err)
	}
	waitFor(t, quotaFile+" = "+want30+" after resize", 90*time.Second, func() bool { return readTrim(t, quotaFile) == want30 })
	t.Logf("timing: resize -> cgroup rewritten in %v", time.Since(resizeStart).Round(time.Millisecond))
	waitFor(t, "resize reported in pod status", 60*time.Second, func() bool {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "bb", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false
		}
		s := p.Status.ContainerStatuses[0]
		return s.RestartCount == 0 && s.Resources != nil && s.Resources.Limits.Cpu().MilliValue() == 300 && s.ContainerID == cs0.ContainerID
	})

	bed := recordBed(cp)
	if len(bed.procs) != 6 {
		t.Fatalf("recorded %d processes, want 6 (etcd, apiserver, kcm, scheduler, containerd, kubelet)", len(bed.procs))
	}
	// The leak check has teeth: the host did change while the node ran.
	during := takeSnapshot(t)
	if len(during.kubepods) == 0 {
		t.Error("no kubepods cgroup while the node runs: the cgroup leak check would prove nothing")
	}
	var touched []string
	for _, p := range leakPaths {
		if strings.Join(during.paths[p], ",") != strings.Join(before.paths[p], ",") || (during.paths[p] == nil) != (before.paths[p] == nil) {
			touched = append(touched, p)
		}
	}
	for k, v := range during.sysctls {
		if before.sysctls[k] != v {
			touched = append(touched, k+"="+v)
		}
	}
	for a := range during.addrs {
		if !before.addrs[a] {
			touched = append(touched, "address "+a)
		}
	}
	t.Logf("host state the node changed (must be undone): %d kubepods cgroups, %v", len(during.kubepods), touched)
	if len(touched) == 0 {
		t.Error("the node changed no host path: the leak check would prove nothing")
	}

	stop := time.Now()
	if err := cp.Stop(); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	t.Logf("timing: node + control plane teardown %v", time.Since(stop).Round(time.Millisecond))
	if _, err := os.Stat(quotaFile); !os.IsNotExist(err) {
		t.Errorf("container cgroup %s survived teardown", filepath.Dir(quotaFile))
	}
	assertNoLeaks(t, before, bed)
}

func readTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func firstOr(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// cpuLimitFile is the container's CFS quota file and its expected contents
// for 200m and 300m: cpu.cfs_quota_us in a cgroup v1 cpu hierarchy, else
// cpu.max in a cgroup v2 hierarchy with the cpu controller.
func cpuLimitFile(t *testing.T, n *harness.Node, podUID, ctrID string) (file, at200m, at300m string) {
	t.Helper()
	for _, r := range n.KubepodsRoots() {
		if b := filepath.Base(filepath.Dir(r)); b == "cpu" || b == "cpu,cpuacct" {
			return filepath.Join(r, "burstable", "pod"+podUID, ctrID, "cpu.cfs_quota_us"), "20000", "30000"
		}
	}
	for _, r := range n.KubepodsRoots() {
		if strings.Contains(readTrim(t, filepath.Join(filepath.Dir(r), "cgroup.controllers")), "cpu") {
			return filepath.Join(r, "burstable", "pod"+podUID, ctrID, "cpu.max"), "20000 100000", "30000 100000"
		}
	}
	t.Fatalf("no cpu controller in any hierarchy of %v", n.KubepodsRoots())
	return "", "", ""
}

// TestNodeStartFailureLeavesNothing makes StartNode fail at its last step
// (Node Ready, with a deadline it cannot meet) while containerd and a
// starting kubelet run, and checks that the failed start undid everything
// and said why.
func TestNodeStartFailureLeavesNothing(t *testing.T) {
	bins := tier.Node(t)
	before := takeSnapshot(t)
	if len(before.kubepods) > 0 {
		t.Skipf("kubepods cgroups exist (%v): another kubelet runs here", before.kubepods)
	}
	cp := harness.MustStart(t, bins, harness.Options{})
	_, err := harness.StartNode(context.Background(), cp, harness.NodeOptions{Name: "cgpilot-doomed", ReadyTimeout: time.Millisecond})
	if !errors.Is(err, harness.ErrStart) || !strings.Contains(err.Error(), "not Ready within") || !strings.Contains(err.Error(), "kubelet's last log lines") {
		t.Fatalf("err = %v, want a not-Ready error with the kubelet's log", err)
	}
	if cp.State.Node != nil {
		t.Errorf("node record kept after a clean failed start: %+v", cp.State.Node)
	}
	bed := recordBed(cp)
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	assertNoLeaks(t, before, bed)
}
