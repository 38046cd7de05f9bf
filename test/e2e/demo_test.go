//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/test/demo"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

// TestDemoUpAndDown runs `make demo` end to end (the agent as the real
// DaemonSet of deploy/kustomize on a real kubelet + containerd), checks what it
// printed and observed against the cgroup files and the API server, then
// runs `make demo-down` and checks that nothing is left on the host.
func TestDemoUpAndDown(t *testing.T) {
	bins := tier.Node(t)
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Fatal(err)
	}
	nodeCPUs, err := cpuset.Parse(strings.TrimSpace(string(online)))
	if err != nil {
		t.Fatal(err)
	}
	if nodeCPUs.Size() < 2 {
		t.Skipf("the demo needs 2 CPUs (1 exclusive + 1 shared); this machine has %s", nodeCPUs)
	}
	// The agent's production host paths must stay untouched: the demo
	// moves them into its directory.
	prodPaths := []string{"/var/lib/cgpilot", "/run/cgpilot"}
	prodBefore := map[string]bool{}
	for _, p := range prodPaths {
		_, err := os.Stat(p)
		prodBefore[p] = err == nil
	}
	before := takeSnapshot(t)
	dir := filepath.Join(t.TempDir(), "demo")
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(dir, harness.StateFile)); err == nil {
			if err := demo.Down(dir, os.Stderr); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})

	mounts, err := cgroup.ReadMounts("/proc")
	if err != nil {
		t.Fatal(err)
	}
	unified := mounts.Mode == cgroup.ModeUnified
	o := demo.Options{Dir: dir, BinDir: bins, RepoRoot: root}
	var out bytes.Buffer
	o.Out = &out
	// make demo-v2 (test/v2node/run.sh) runs this test in the cgroup v2
	// VM: the images come built from the host, the demo's waits allow for
	// TCG, there is no Chromium, and the steps print as they run.
	if d := os.Getenv("CGPILOT_DEMO_PREBUILT"); d != "" {
		o.Prebuilt = demo.PrebuiltIn(d)
	}
	if os.Getenv("V2VM") == "1" {
		o.Slow = true
		o.NoBrowser = "headless Chromium is not in the cgroup v2 VM (make demo on the host takes the screenshot)"
	}
	stream := os.Getenv("CGPILOT_DEMO_STREAM") == "1"
	if stream {
		o.Out = io.MultiWriter(&out, os.Stdout)
	}
	res, err := demo.Up(context.Background(), o)
	if !stream {
		t.Logf("demo output:\n%s", out.String())
	}
	if err != nil {
		t.Fatalf("demo up: %v", err)
	}
	tm := res.Timings
	t.Logf("timing: control plane %v, node %v, agent DaemonSet ready %v, pinned %v, release-isolation %v (watch %v), restore %v, delete->widen %v, re-create->pinned %v, first resize %v (web pod -> resized %v), OOM raise %v, total %v",
		tm.ControlPlane, tm.Node, tm.AgentReady, tm.Pinned, tm.Release, tm.ReleaseWatch, tm.Restore, tm.Widen, tm.Repin, tm.FirstResize, tm.ResizeAfter, tm.OOMRaised, tm.Total)
	if len(tm.Steps) != 15 || !strings.Contains(out.String(), "==> step 15/15: ") {
		t.Errorf("%d steps timed, want 15 printed as step i/15", len(tm.Steps))
	}
	// The aggregator: the agent's reports taken; the dashboard refused
	// without a token, read with a viewer's, drawn in Chromium.
	dash := res.Dashboard
	if dash.AcceptedReports < 1 || dash.AnonymousStatus != 401 || dash.AnonymousMetrics != 401 || dash.ViewerStatus != 200 || dash.Nodes != 1 {
		t.Errorf("the aggregator and its dashboard: %+v", dash)
	}
	if o.NoBrowser != "" {
		if !strings.Contains(out.String(), "screenshot skipped: "+o.NoBrowser) {
			t.Errorf("the demo does not say why it took no screenshot (%q)", o.NoBrowser)
		}
	} else if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		if st, err := os.Stat(dash.Screenshot); err != nil || st.Size() < 10000 || !dash.Drawn {
			t.Errorf("the dashboard's screenshot %q (%v), drawn %v", dash.Screenshot, err, dash.Drawn)
		} else if out := os.Getenv("CGPILOT_SCREENSHOT_DIR"); out != "" {
			b, _ := os.ReadFile(dash.Screenshot)
			os.WriteFile(filepath.Join(out, "demo-dashboard.png"), b, 0o644)
		}
	}

	if !res.NodeCPUs.Equals(nodeCPUs) {
		t.Errorf("demo's CPUs %s, /sys/devices/system/cpu/online %s", res.NodeCPUs, nodeCPUs)
	}
	if tm.ReleaseWatch <= 0 || tm.Release <= 0 {
		t.Errorf("release-isolation timings not measured: watch %v, cgroups %v", tm.ReleaseWatch, tm.Release)
	}
	if res.Exclusive.Size() != 1 || !res.Exclusive.IsSubsetOf(nodeCPUs) {
		t.Fatalf("exclusive cpus %q: want one of %s", res.Exclusive, nodeCPUs)
	}

	// While pinned (first and again after re-creation): the exclusive
	// container alone on its CPU without quota; the shared ones on the rest.
	for name, snap := range map[string]demo.Snapshot{"pinned": res.Pinned, "restored": res.Restored, "re-pinned": res.Repinned} {
		if len(snap) != 1+len(demo.SharedPods) {
			t.Errorf("%s: %d containers observed, want %d", name, len(snap), 1+len(demo.SharedPods))
			continue
		}
		ex, ok := snap.Find(demo.ExclusivePod)
		if !ok {
			t.Errorf("%s: no exclusive pod observed", name)
			continue
		}
		if ex.CPUs.Size() != 1 || ex.Quota != -1 || ex.PodQuota != -1 || !ex.PodCPUs.Equals(ex.CPUs) {
			t.Errorf("%s: exclusive container cpuset %s (pod %s), quota %d (pod %d): want one CPU, quota -1", name, ex.CPUs, ex.PodCPUs, ex.Quota, ex.PodQuota)
		}
		for _, p := range demo.SharedPods {
			c, ok := snap.Find(p)
			if !ok {
				t.Errorf("%s: shared pod %s not observed", name, p)
				continue
			}
			if !c.CPUs.Intersection(ex.CPUs).IsEmpty() || !c.CPUs.Equals(nodeCPUs.Difference(ex.CPUs)) {
				t.Errorf("%s: shared %s cpuset %s overlaps or misses: exclusive %s, want %s", name, p, c.CPUs, ex.CPUs, nodeCPUs.Difference(ex.CPUs))
			}
			if c.Quota != 20000 {
				t.Errorf("%s: shared %s quota %d: the kubelet's 200m limit (20000) must stay", name, p, c.Quota)
			}
		}
	}
	if ex, ok := res.Released.Find(demo.ExclusivePod); !ok || !ex.CPUs.Equals(nodeCPUs) || ex.Quota != -1 {
		t.Errorf("release-isolation: exclusive container %+v, want cpuset %s and quota -1", ex, nodeCPUs)
	}
	if len(res.Widened) != len(demo.SharedPods) {
		t.Errorf("after delete: %d containers observed, want the %d shared", len(res.Widened), len(demo.SharedPods))
	}
	for _, c := range res.Widened {
		if !c.CPUs.Equals(nodeCPUs) {
			t.Errorf("after delete: %s cpuset %s, want widened to %s", c.Pod, c.CPUs, nodeCPUs)
		}
	}

	// The files say now what the demo last reported (the cluster stays up).
	for _, c := range res.Repinned {
		if got := strings.TrimSpace(readFile(t, c.CPUSetFile)); got != c.CPUs.String() {
			t.Errorf("%s: %s = %q, demo reported %s", c.Pod, c.CPUSetFile, got, c.CPUs)
		}
	}

	// What cgpilotctl printed agrees with the cgroup files.
	excl := res.Pinned[0].CPUs
	if ex, ok := res.Pinned.Find(demo.ExclusivePod); ok {
		excl = ex.CPUs
	}
	wantLines := []string{
		`(?m)^EXCLUSIVE\s+` + regexp.QuoteMeta(excl.String()) + `\s`,
		`(?m)^SHARED POOL\s+` + regexp.QuoteMeta(nodeCPUs.Difference(excl).String()) + `\s`,
		`(?m)^RESERVED\s+-`,
	}
	for _, re := range wantLines {
		if !regexp.MustCompile(re).MatchString(res.CtlPools) {
			t.Errorf("cgpilotctl pools does not match %s:\n%s", re, res.CtlPools)
		}
	}
	if !regexp.MustCompile(`(?m)^demo\s+exclusive\s+Guaranteed\s+exclusive\s+Allocated\s+` + regexp.QuoteMeta(excl.String()) + `\s`).MatchString(res.CtlPods) {
		t.Errorf("cgpilotctl pods does not show the exclusive pod on %s:\n%s", excl, res.CtlPods)
	}
	for _, p := range demo.SharedPods {
		if !regexp.MustCompile(`(?m)^demo\s+` + p + `\s+Burstable\s+shared\s+\S+\s+` + regexp.QuoteMeta(nodeCPUs.Difference(excl).String()) + `\s`).MatchString(res.CtlPods) {
			t.Errorf("cgpilotctl pods does not show %s on the shared pool:\n%s", p, res.CtlPods)
		}
	}
	for _, s := range []string{"export KUBECONFIG=" + res.Kubeconfig, "make demo-down", "none reserved", "$ cgpilotctl pools", "$ cgpilotctl pods",
		"$ cgpilotctl recs", "$ cgpilotctl explain demo/" + res.Resize.Pod, "$ cgpilotctl explain demo/" + demo.HogPod, "$ cgpilotctl events", "kubectl apply -k " + res.Overlay} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("demo output lacks %q", s)
		}
	}

	checkDemoRightsizing(t, res, unified)

	// The agent ran as the DaemonSet's pod from the local image.
	cfg, err := clientcmd.BuildConfigFromFlags("", res.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	all, err := cs.CoreV1().Pods("cgpilot-system").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The namespace also runs the aggregator's Deployment (step 4).
	pods := &corev1.PodList{}
	var others []string
	for _, p := range all.Items {
		if strings.HasPrefix(p.Name, "cgpilot-agent-") {
			pods.Items = append(pods.Items, p)
		} else if !strings.HasPrefix(p.Name, "cgpilot-aggregator-") {
			others = append(others, p.Name)
		}
	}
	if len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning || pods.Items[0].Spec.Containers[0].Image != demo.AgentImage ||
		len(pods.Items[0].OwnerReferences) != 1 || pods.Items[0].OwnerReferences[0].Kind != "DaemonSet" || len(others) > 0 {
		t.Errorf("want one running agent pod of the DaemonSet from %s (and the aggregator's), have %+v; others %v", demo.AgentImage, pods.Items, others)
	}

	// The agent's container never ended on its own. Under emulation (the
	// v2 VM's TCG) the kubelet may restart it for failed liveness probes:
	// a stop it asked for ends with exit status 0 (SIGTERM, the agent's
	// graceful stop) or 137 (SIGKILL after the grace period); any other
	// status (a Go panic exits 2) is a crash.
	if len(pods.Items) == 1 && len(pods.Items[0].Status.ContainerStatuses) == 1 {
		cs := pods.Items[0].Status.ContainerStatuses[0]
		if cs.RestartCount > 0 {
			last := cs.LastTerminationState.Terminated
			t.Logf("the agent's container restarted %d times; the last one ended: %+v", cs.RestartCount, last)
			if !o.Slow || last == nil || (last.ExitCode != 0 && last.ExitCode != 137) {
				t.Errorf("the agent's container restarted %d times (last termination %+v): want none, or under emulation only stops the kubelet asked for", cs.RestartCount, last)
			}
		}
	}

	// The agent runs unprivileged with no capabilities under the runtime's
	// seccomp filter, and still sees the machine's topology (sysfs; the IRQs
	// from the host's /proc/interrupts, mounted as one file).
	agentPID := podProcess(t, string(pods.Items[0].UID), "/bin/cgpilot-agent")
	status := readFile(t, fmt.Sprintf("/proc/%d/status", agentPID))
	for _, want := range []string{"CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(status, want) {
			t.Errorf("agent process %d: /proc/%d/status lacks %q", agentPID, agentPID, want)
		}
	}
	checkAgentMounts(t, agentPID)
	// On v2 the DaemonSet runs as the cgroup-v2 component makes it, and
	// the base's admission policy admitted it.
	if unified && !strings.Contains(out.String(), "component cgroup-v2") {
		t.Errorf("the demo's overlay does not name the cgroup-v2 component on a v2 node")
	}
	sock := filepath.Join(dir, "agent", "run", "agent.sock")
	js, err := exec.Command(res.Cgpilotctl, "pools", "--socket", sock, "-o", "json").Output()
	if err != nil {
		t.Fatalf("cgpilotctl pools -o json: %v", err)
	}
	var pools struct {
		TopologySource string `json:"topologySource"`
	}
	if err := json.Unmarshal(js, &pools); err != nil || !strings.HasPrefix(pools.TopologySource, "topology") {
		t.Errorf("agent topology source %q (%v): want discovery from sysfs/procfs, not the lowest-id fallback", pools.TopologySource, err)
	}

	// deploy/kustomize is what `kubectl apply -k` accepts as it is (a dry
	// run on the server: validation and admission, nothing changed).
	if b, err := exec.Command(filepath.Join(bins, "kubectl"), "--kubeconfig", res.Kubeconfig, "apply", "--dry-run=server", "-k", filepath.Join(root, "deploy", "kustomize")).CombinedOutput(); err != nil {
		t.Errorf("kubectl apply --dry-run=server -k deploy/kustomize: %v\n%s", err, b)
	} else {
		t.Logf("kubectl apply --dry-run=server -k deploy/kustomize:\n%s", strings.TrimSpace(string(b)))
	}

	// No Warning Event but the expected ones, also after the demo's own check.
	expected, others, err := demo.WarningsOn(context.Background(), o.Slow, func(ctx context.Context) (*corev1.EventList, error) {
		return cs.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	})
	if err != nil || len(others) > 0 {
		t.Errorf("Warning Events (%v):\n%s", err, strings.Join(others, "\n"))
	}
	t.Logf("expected Warning Events:\n%s", strings.Join(expected, "\n"))

	st, err := harness.LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	bed := bedRecord{dir: dir, procs: append(append([]harness.ProcRecord{}, st.Procs...), st.Node.Procs...)}
	for _, p := range st.Ports {
		bed.ports = append(bed.ports, p)
	}
	if during := takeSnapshot(t); len(during.kubepods) == 0 {
		t.Error("no kubepods cgroup while the demo runs: the leak check would prove nothing")
	}

	var downOut bytes.Buffer
	if err := demo.Down(dir, &downOut); err != nil {
		t.Fatalf("demo down: %v\n%s", err, downOut.String())
	}
	t.Logf("demo down: %s", downOut.String())
	assertNoLeaks(t, before, bed)
	for _, p := range prodPaths {
		if _, err := os.Stat(p); (err == nil) != prodBefore[p] {
			t.Errorf("leak: %s existed %v before the demo, %v after", p, prodBefore[p], err == nil)
		}
	}
	// A second down is a clear no-op.
	downOut.Reset()
	if err := demo.Down(dir, &downOut); err != nil || !strings.Contains(downOut.String(), "nothing to stop") {
		t.Errorf("second demo down: %v, %q", err, downOut.String())
	}
}

// checkAgentMounts: the agent works (the demo pinned and widened through
// these mounts) with the host cgroupfs read-only and only the kubepods trees
// it writes read-write, /proc/interrupts as its only piece of the host's
// /proc, and only the kubelet's pod-resources directory of /var/lib/kubelet
// (issue 11). The v1 hierarchies below /sys/fs/cgroup are read-only too:
// the manifests' recursiveReadOnly: IfPossible, which the test bed's
// containerd 2 and runc apply (mount_setattr, Linux 5.12+); a runtime
// without it would leave them writable. On cgroup v2 (the cgroup-v2
// component) the one kubepods tree of the unified hierarchy is the
// read-write one. The agent's own view is checked
// with a write: a mkdir below each of them through /proc/PID/root (its mount
// namespace) must fail with EROFS.
func checkAgentMounts(t *testing.T, pid int) {
	t.Helper()
	mounts := map[string]string{} // mount point -> "ro" or "rw"
	var order []string
	for _, l := range strings.Split(readFile(t, fmt.Sprintf("/proc/%d/mountinfo", pid)), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 {
			continue
		}
		mode := "rw"
		if strings.HasPrefix(f[5], "ro") {
			mode = "ro"
		}
		mounts[f[4]] = mode // a later mount on the same point hides an earlier one
		order = append(order, f[4])
	}
	want := map[string]string{
		"/sys/fs/cgroup":                 "ro",
		"/sys/fs/cgroup/cpu/kubepods":    "rw",
		"/sys/fs/cgroup/cpuset/kubepods": "rw",
		"/sys/fs/cgroup/memory/kubepods": "rw",
		"/host/proc/interrupts":          "ro",
		"/var/lib/kubelet/pod-resources": "ro",
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		// cgroup v2 (the cgroup-v2 component): one kubepods tree.
		for _, c := range []string{"cpu", "cpuset", "memory"} {
			delete(want, "/sys/fs/cgroup/"+c+"/kubepods")
		}
		want["/sys/fs/cgroup/kubepods"] = "rw"
	}
	for point, want := range want {
		if mounts[point] != want {
			t.Errorf("agent mount %s: %q, want %s", point, mounts[point], want)
		}
	}
	var below []string
	for _, p := range order {
		if p == "/var/lib/kubelet" || p == "/host/proc" || (strings.HasPrefix(p, "/host/proc/") && p != "/host/proc/interrupts") ||
			(strings.HasPrefix(p, "/var/lib/kubelet/") && p != "/var/lib/kubelet/pod-resources") {
			t.Errorf("agent mount %s: more of the host than the manifests give it", p)
		}
		if strings.HasPrefix(p, "/sys/fs/cgroup/") && !strings.HasSuffix(p, "/kubepods") && !slices.Contains(below, p) {
			below = append(below, p)
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpuset/cpuset.cpus"); err == nil && len(below) == 0 {
		t.Errorf("agent mounts: no host hierarchy below /sys/fs/cgroup on a v1 host")
	}
	for _, p := range below {
		if mounts[p] != "ro" {
			t.Errorf("agent mount %s: %s, want ro (recursiveReadOnly: the runtime did not make the sub-mounts read-only)", p, mounts[p])
		}
		probe := filepath.Join(fmt.Sprintf("/proc/%d/root", pid), p, fmt.Sprintf("cgpilot-test-rro-%d", os.Getpid()))
		err := os.Mkdir(probe, 0o755)
		if err == nil {
			os.Remove(probe)
		}
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("mkdir below %s in the agent's mount namespace: %v, want EROFS", p, err)
		}
	}
	t.Logf("agent's host hierarchies below /sys/fs/cgroup, read-only (recursiveReadOnly): %s", strings.Join(below, ", "))
}

// podProcess finds the process running program in the pod with uid, by
// its cgroup (so another agent on this host is never taken for it).
func podProcess(t testing.TB, uid, program string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if strings.HasPrefix(string(cmd), program+"\x00") && strings.Contains(string(cg), "pod"+uid) {
			return pid
		}
	}
	t.Fatalf("no %s process in pod %s", program, uid)
	return 0
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkDemoRightsizing: the web pod came down in place and its cgroups
// hold the kubelet's values for the new spec; the memory hog's limit was
// raised above what it holds, in the spec and the kernel, with no restart
// on v1. On v2 (unified) the container's cpu.weight is runc's quadratic
// conversion of the kubelet's shares, and each OOM restarts the hog's
// container (the kubelet's memory.oom.group), counted in the pod's
// memory.events.
func checkDemoRightsizing(t *testing.T, res *demo.Result, unified bool) {
	t.Helper()
	rz := res.Resize
	before, after := rz.Before, rz.After
	if before.Requests.Cpu().MilliValue() != 300 || before.Requests.Memory().Value() != 256<<20 {
		t.Errorf("web requests before %v: want the Deployment's 300m/256Mi", before.Requests)
	}
	if after.Requests.Cpu().Cmp(*before.Requests.Cpu()) >= 0 && after.Requests.Memory().Cmp(*before.Requests.Memory()) >= 0 {
		t.Errorf("web requests %v after the resize, before %v: nothing came down", after.Requests, before.Requests)
	}
	if rz.Restarts != 0 || rz.LastApplied == nil {
		t.Errorf("web: restarts %d, recommendation state %q, lastApplied %v: want no restart and the resize recorded as applied", rz.Restarts, rz.State, rz.LastApplied)
	}
	f := rz.FilesAfter
	weight := func(milliCPU int64) int64 {
		if unified {
			return int64(cgroup.WeightQuadratic.SharesToWeight(cgroup.KubeletShares(milliCPU)))
		}
		return int64(cgroup.KubeletShares(milliCPU))
	}
	if want := weight(after.Requests.Cpu().MilliValue()); f.Shares != want {
		t.Errorf("%s = %d, want %d for the request %v", f.SharesFile, f.Shares, want, after.Requests.Cpu())
	}
	if want := cgroup.KubeletQuota(after.Limits.Cpu().MilliValue()).QuotaUs; f.Quota != want {
		t.Errorf("%s = %d, want %d for the limit %v", f.QuotaFile, f.Quota, want, after.Limits.Cpu())
	}
	if want := after.Limits.Memory().Value(); f.MemoryLimit > want || f.MemoryLimit < want-4096 {
		t.Errorf("%s = %d, want %d", f.MemoryFile, f.MemoryLimit, want)
	}
	if fb := rz.FilesBefore; fb.Shares != weight(300) || fb.MemoryLimit != 512<<20 {
		t.Errorf("web cgroup before: shares %d, memory %d: want the kubelet's for 300m and 512Mi", fb.Shares, fb.MemoryLimit)
	}
	if !regexp.MustCompile(`(?m)^demo\s+` + regexp.QuoteMeta(rz.Pod) + `\s+web\s.*\sdemo-web\s+InPlace\s+\S+\s*$`).MatchString(res.CtlRecs) {
		t.Errorf("cgpilotctl recs does not show %s under demo-web, InPlace:\n%s", rz.Pod, res.CtlRecs)
	}
	if tm := res.Timings; tm.FirstResize <= tm.ResizeAfter || tm.ResizeAfter < demo.WebMinHistory-time.Second {
		t.Errorf("first resize at %v, %v after the web pod's creation: want after its minHistory", tm.FirstResize, tm.ResizeAfter)
	}
	o := res.OOM
	const held = 150 << 20
	if o.LimitBefore.Value() != 100<<20 || o.LimitAfter.Value() < held || o.Files.MemoryLimit < held {
		t.Errorf("hog memory limit %v -> %v (cgroup %d): want 100Mi raised above %d", &o.LimitBefore, &o.LimitAfter, o.Files.MemoryLimit, held)
	}
	if unified {
		// One restart per OOM at most: the agent raises before the next.
		if o.Restarts < 1 || int64(o.Restarts) > o.Files.OOMKills || o.Files.OOMKills < 1 || !strings.Contains(o.Log, "allocated 150 MB") {
			t.Errorf("hog on v2: restarts %d, oom_kill %d (pod), log %q: want a restart per OOM kill at most, at least one kill, and the memory allocated",
				o.Restarts, o.Files.OOMKills, o.Log)
		}
	} else if o.Restarts != 0 || o.Files.OOMKills < 1 || !strings.Contains(o.Log, "allocated 150 MB") {
		t.Errorf("hog: restarts %d, oom_kill %d, log %q: want no restart, at least one kill, and the memory allocated", o.Restarts, o.Files.OOMKills, o.Log)
	}
	if !strings.Contains(o.CtlExplain, "MemoryRaised") || !strings.Contains(o.CtlExplain, "OOMKilled") {
		t.Errorf("cgpilotctl explain demo/hog shows no OOMKilled and MemoryRaised events:\n%s", o.CtlExplain)
	}
}
