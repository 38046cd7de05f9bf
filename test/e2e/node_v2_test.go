//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/test/cgtest"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

// waitV2 polls cond every 50 ms until it holds or timeout passes. The
// cgroup v2 node runs under qemu TCG, where a pod start takes seconds.
func waitV2(t testing.TB, what string, timeout time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < timeout {
		ok, msg := cond()
		if ok {
			return time.Since(start)
		}
		last = msg
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not reached in %v; last: %s", what, timeout, last)
	return 0
}

// readCgroupFile reads one file of a cgroup directory, trimmed.
func readCgroupFile(t testing.TB, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatalf("read %s: %v", filepath.Join(dir, file), err)
	}
	return strings.TrimSpace(string(b))
}

// TestNodeOnCgroupV2 is the node tier on a cgroup v2 kernel (run it with
// test/v2node/run.sh, which boots the v2 VM): a real control plane,
// containerd 2, runc and kubelet, all inside the VM. It prints the node's
// start-up and a pod's start time, checks what the kubelet and runc wrote
// into the unified hierarchy (cpu.max, memory.max, cpu.weight: the kubelet
// converts shares linearly on the pod level, runc ≥ 1.3.2 quadratically on
// the container's), before and after an in-place resize through
// pods/resize, and then runs the agent: an exclusive pod's container gets
// its own CPU and cpu.max "max", a shared pod's container moves off that
// CPU, release-isolation widens and narrows the exclusive one again, a
// restart of the agent keeps the allocation and the files, and an
// OOM-killed container's memory limit is raised once an OOM. The pods have
// their own network namespace (ptp CNI; the VM loads veth).
func TestNodeOnCgroupV2(t *testing.T) {
	bins := tier.Node(t)
	mounts, err := cgroup.ReadMounts("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if mounts.Mode != cgroup.ModeUnified {
		t.Skipf("needs a cgroup v2 (unified) node, this host is %v: run test/v2node/run.sh", mounts.Mode)
	}
	ctx := context.Background()
	// No controller-manager or scheduler: the pods name their node and mount
	// no token, and every CPU second in the TCG-emulated VM counts.
	cp := harness.MustStart(t, bins, harness.Options{ReadyTimeout: 5 * time.Minute, Logf: t.Logf})
	t.Logf("v2 node: control plane ready after %v", cp.Started.Round(time.Millisecond))
	n := harness.MustStartNode(t, cp, harness.NodeOptions{ReadyTimeout: 5 * time.Minute})
	t.Logf("v2 node: node %s Ready after %v (containerd, image import, kubelet)", n.Name(), n.Started.Round(time.Millisecond))
	cs := cp.Client

	if _, err := cs.CoreV1().Pods("default").Create(ctx, nodePod("web", n.Name(), "500m", false, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := func(name string) (*corev1.Pod, bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, false, err.Error()
		}
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
			return p, false, fmt.Sprintf("phase %s, statuses %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		return p, true, ""
	}
	var web *corev1.Pod
	podStart := waitV2(t, "pod web running", 3*time.Minute, func() (bool, string) {
		p, ok, msg := running("web")
		web = p
		return ok, msg
	})
	t.Logf("v2 node: pod start (create -> container running, seen by the API) %v; pod IP %s (ptp, its own netns)", podStart.Round(time.Millisecond), web.Status.PodIP)
	if web.Status.PodIP == "" || web.Spec.HostNetwork {
		t.Errorf("web: pod IP %q, host network %v: want an address of the ptp CNI's subnet", web.Status.PodIP, web.Spec.HostNetwork)
	}
	if evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web"}); err == nil {
		var steps []string
		for _, e := range evs.Items {
			at := e.EventTime.Time
			if at.IsZero() {
				at = e.FirstTimestamp.Time
			}
			steps = append(steps, fmt.Sprintf("%s +%v", e.Reason, at.Sub(web.CreationTimestamp.Time).Round(time.Second)))
		}
		t.Logf("v2 node: web's events after its creation (1 s resolution): %s", strings.Join(steps, ", "))
	}

	l, err := cgroup.NewLayout(mounts, cgroup.LayoutConfig{})
	if err != nil {
		t.Fatal(err)
	}
	qos := cgroup.QoS(web.Status.QOSClass)
	pd, err := l.PodDirs(string(web.UID), qos)
	if err != nil {
		t.Fatal(err)
	}
	cd, err := l.ContainerDirs(string(web.UID), qos, web.Status.ContainerStatuses[0].ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	if !cd.Unified || cd.CPU != cd.Memory || cd.CPU != cd.CPUSet {
		t.Fatalf("container dirs %+v: want one unified directory", cd)
	}
	t.Logf("v2 node: pod cgroup %s, container cgroup %s", pd.CPU, cd.CPU)
	// 100m request = 102 shares; 500m limit = 50 ms per 100 ms; 64Mi limit.
	// The two levels convert shares to cpu.weight differently: runc 1.5.2
	// (the container) the quadratic way (17), the kubelet 1.36 itself (the
	// pod; getCPUWeight in pkg/kubelet/cm) still the linear way (4).
	// levels checks both levels' files: cpu.max, memory.max, and cpu.weight
	// from shares (the container's quadratic, the pod's linear).
	levels := func(when, cpuMax string, mem int, shares uint64) {
		t.Helper()
		checks := []struct{ dir, file, want string }{
			{cd.CPU, "cpu.max", cpuMax},
			{cd.Memory, "memory.max", strconv.Itoa(mem)},
			{cd.CPU, "cpu.weight", strconv.FormatUint(cgroup.WeightQuadratic.SharesToWeight(shares), 10)},
			{pd.CPU, "cpu.max", cpuMax},
			{pd.Memory, "memory.max", strconv.Itoa(mem)},
			{pd.CPU, "cpu.weight", strconv.FormatUint(cgroup.WeightLinear.SharesToWeight(shares), 10)},
		}
		for _, c := range checks {
			if got := readCgroupFile(t, c.dir, c.file); got != c.want {
				t.Errorf("%s: %s/%s = %q, want %q", when, c.dir, c.file, got, c.want)
			}
		}
	}
	levels("created", "50000 100000", 64<<20, 102)

	// An in-place resize through pods/resize: the kubelet and runc rewrite
	// both levels without a restart, and the kubelet reports it done.
	patch := `{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"200m","memory":"32Mi"},"limits":{"cpu":"800m","memory":"96Mi"}}}]}}`
	if _, err := cs.CoreV1().Pods("default").Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatal(err)
	}
	resized := waitV2(t, "resize of web applied", 3*time.Minute, func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].Resources == nil {
			return false, fmt.Sprint(err)
		}
		st := p.Status.ContainerStatuses[0]
		lim := st.Resources.Limits[corev1.ResourceCPU]
		if lim.MilliValue() != 800 || readCgroupFile(t, cd.CPU, "cpu.max") != "80000 100000" {
			return false, fmt.Sprintf("status limits %v, cpu.max %s, conditions %+v", st.Resources.Limits, readCgroupFile(t, cd.CPU, "cpu.max"), p.Status.Conditions)
		}
		return true, ""
	})
	t.Logf("v2 node: in-place resize (patch -> kubelet status and cpu.max) %v", resized.Round(time.Millisecond))
	if web, err = cs.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := web.Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Errorf("web restarted %d times during the in-place resize", n)
	}
	levels("after the resize", "80000 100000", 96<<20, 204) // 200m = 204 shares

	// The agent, in this process, as in the host's node tier, with
	// right-sizing's CRD and short windows.
	b := startRightsizeAgent(t, cp, n)
	na := b.na
	if _, err := cs.CoreV1().Pods("default").Create(ctx, nodePod("db", n.Name(), "1", true, map[string]string{local.AnnotationCPUPool: "exclusive"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctrDir := func(name string) (string, string) {
		p, ok, msg := running(name)
		if !ok {
			return "", msg
		}
		rel, err := na.kp.ContainerPath(string(p.UID), cgroup.QoS(p.Status.QOSClass), p.Status.ContainerStatuses[0].ContainerID)
		if err != nil {
			return "", err.Error()
		}
		return rel, ""
	}
	cpus := func(rel string) string {
		set, err := na.kp.ReadCPUs(rel)
		if err != nil {
			return err.Error()
		}
		return set.String()
	}
	var excl, dbRel string
	took := waitV2(t, "exclusive container pinned, shared moved off", 3*time.Minute, func() (bool, string) {
		_, ann := statusOf(t, cs, "db")
		excl = ann[local.AnnotationAllocatedCPUs]
		var msg string
		if dbRel, msg = ctrDir("db"); dbRel == "" || excl == "" {
			return false, fmt.Sprintf("allocated %q, db: %s", excl, msg)
		}
		webRel, _ := ctrDir("web")
		shared := na.all.Difference(mustSet(t, excl)).String()
		return cpus(dbRel) == excl && cpus(webRel) == shared, fmt.Sprintf("db %s (want %s), web %s (want %s)", cpus(dbRel), excl, cpus(webRel), shared)
	})
	t.Logf("v2 node: db exclusive on %s, web on the rest, %v after the create", excl, took.Round(time.Millisecond))
	dd, err := na.kp.Layout().DirsAt(dbRel)
	if err != nil {
		t.Fatal(err)
	}
	if got := readCgroupFile(t, dd.CPU, "cpu.max"); got != "max 100000" {
		t.Errorf("exclusive container %s/cpu.max = %q, want \"max 100000\" (no quota)", dd.CPU, got)
	}
	if got := readCgroupFile(t, dd.CPUSet, "cpuset.cpus.effective"); got != excl {
		t.Errorf("exclusive container %s/cpuset.cpus.effective = %q, want %q", dd.CPUSet, got, excl)
	}

	// The pod's own cgroup holds the exclusive CPU too, so a container the
	// kubelet starts or restarts there runs on it from its first
	// instruction; the running processes may run only there.
	if got := readCgroupFile(t, filepath.Dir(dd.CPUSet), "cpuset.cpus"); got != excl {
		t.Errorf("exclusive pod's cgroup %s/cpuset.cpus = %q, want %q", filepath.Dir(dd.CPUSet), got, excl)
	}
	for _, f := range strings.Fields(readCgroupFile(t, dd.CPUSet, "cgroup.procs")) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := cgtest.Allowed(t, pid); got != excl {
			t.Errorf("exclusive container's process %d may run on %s, want %s", pid, got, excl)
		}
	}

	// release-isolation on and off: the exclusive container runs on every
	// CPU while the shared one stays off its CPU, then it is isolated again.
	webRel, _ := ctrDir("web")
	shared := na.all.Difference(mustSet(t, excl)).String()
	release := func(v string) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, local.AnnotationReleaseIsolation, v)
		if _, err := cs.CoreV1().Pods("default").Patch(ctx, "db", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	placed := func(db string) func() (bool, string) {
		return func() (bool, string) {
			return cpus(dbRel) == db && cpus(webRel) == shared, fmt.Sprintf("db %s (want %s), web %s (want %s)", cpus(dbRel), db, cpus(webRel), shared)
		}
	}
	t0 := time.Now()
	release(`"true"`)
	waitV2(t, "release-isolation: db on every CPU, web still off db's", time.Minute, placed(na.all.String()))
	on, t0 := time.Since(t0), time.Now()
	release("null")
	waitV2(t, "release-isolation removed: db on its own CPU again", time.Minute, placed(excl))
	off := time.Since(t0)
	t.Logf("v2 node: release-isolation on %v, off %v (patch -> cpuset.cpus)", on.Round(time.Millisecond), off.Round(time.Millisecond))

	// One restart of the agent, as a DaemonSet's new pod: the same
	// checkpoint and state directory; the exclusive pod keeps its CPU and
	// the files stay as they were.
	db, _, _ := running("db")
	start := time.Now()
	pools := b.na.restart(t, cp)
	restarted := time.Since(start)
	var holds string
	for _, a := range pools.Assignments {
		if a.UID == string(db.UID) {
			holds = a.CPUs
		}
	}
	if holds != excl {
		t.Errorf("after the restart the agent holds %q for db, want %q (its checkpoint)", holds, excl)
	}
	if ok, msg := placed(excl)(); !ok {
		t.Errorf("after the restart: %s", msg)
	}
	if got := readCgroupFile(t, dd.CPU, "cpu.max"); got != "max 100000" {
		t.Errorf("after the restart %s/cpu.max = %q, want \"max 100000\"", dd.CPU, got)
	}
	if p, _, _ := running("db"); p == nil || p.Status.ContainerStatuses[0].RestartCount != 0 || p.Status.ContainerStatuses[0].ContainerID != db.Status.ContainerStatuses[0].ContainerID {
		t.Errorf("db's container changed across the agent's restart")
	}
	t.Logf("v2 node: agent restarted, its API up %v after the stop, holding %s for db (shared pool %s)", restarted.Round(time.Millisecond), holds, pools.SharedPool)

	// An OOM raise, seen through the v2 memory.events (and the eBPF watcher
	// where the kernel has BTF), as TestNodeOOMBump on the host: a loop
	// that needs 150 MB under a 100Mi limit is OOM-killed until the agent
	// raises the limit in the cgroup, then through pods/resize. One v1/v2
	// difference: on v2 the kubelet (1.36, singleProcessOOMKill false) sets
	// memory.oom.group=1 on every container's cgroup, so the kernel kills
	// the whole container, not just the process that asked too much, and
	// the container restarts until a raise reaches its new cgroup; on v1
	// only that process dies (TestNodeOOMBump asserts no restart there).
	b.policy(t, "hog", map[string]any{"mode": "InPlace", "step": "1h", "minHistory": "24h",
		"podSelector": map[string]any{"matchLabels": map[string]any{"app": "hog"}}})
	cmd := `n=0; until head -c 157286400 /dev/zero | tail >/dev/null; do n=$((n+1)); echo "attempt $n killed"; sleep 1; done; echo "held 150 MB after $n kills"; exec sleep 3600`
	hog := busyboxPod("hog", map[string]string{"app": "hog"}, cmd, rl("100m", "64Mi"), rl("500m", "100Mi"))
	hog.Spec.NodeName = n.Name()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, hog, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var hogPod *corev1.Pod
	var hogRel, oomGroup string
	raised := waitV2(t, "hog's running container has a memory limit above 150 MB in its cgroup and the spec", 5*time.Minute, func() (bool, string) {
		p, ok, msg := running("hog")
		if !ok {
			return false, msg
		}
		hogPod = p
		if hogRel, ok = b.containerCgroup(t, p); !ok {
			return false, "no container yet"
		}
		cur, err := na.kp.ReadCurrent(hogRel)
		if err != nil {
			return false, err.Error()
		}
		if d, err := na.kp.Layout().DirsAt(hogRel); err == nil {
			if raw, err := os.ReadFile(filepath.Join(d.Memory, "memory.oom.group")); err == nil {
				oomGroup = strings.TrimSpace(string(raw))
			}
		}
		lim := milli(p.Spec.Containers[0].Resources.Limits, corev1.ResourceMemory)
		return cur.MemoryLimit >= 150<<20 && lim >= 150<<20, fmt.Sprintf("cgroup limit %d, spec limit %d", cur.MemoryLimit, lim)
	})
	// memory.events is hierarchical on v2: the pod's counts the kills in
	// every container it had, also those a restart removed.
	hpd, err := na.kp.Layout().PodDirs(string(hogPod.UID), cgroup.QoS(hogPod.Status.QOSClass))
	if err != nil {
		t.Fatal(err)
	}
	// Raised, it holds its 150 MB. On v2 an OOM kills the whole container
	// (memory.oom.group), so a kill at the old limit can still end the
	// container the raise was written to, and the next one starts with the
	// spec's raised limit: wait for 15 quiet seconds (the same container
	// running, no new kill), then check the container that stayed.
	var kills int
	var quietID string
	var quietSince time.Time
	waitV2(t, "hog running 15 s with no new OOM kill and no restart", 3*time.Minute, func() (bool, string) {
		p, ok, msg := running("hog")
		if !ok {
			quietID = ""
			return false, msg
		}
		id, k := p.Status.ContainerStatuses[0].ContainerID, oomKills(t, hpd.Memory)
		if id != quietID || k != kills {
			quietID, kills, quietSince, hogPod = id, k, time.Now(), p
			return false, fmt.Sprintf("container %s, %d kills", id, k)
		}
		return time.Since(quietSince) >= 15*time.Second, fmt.Sprintf("quiet for %v", time.Since(quietSince).Round(time.Second))
	})
	if rel, ok := b.containerCgroup(t, hogPod); !ok {
		t.Error("hog's running container has no cgroup")
	} else if cur, err := na.kp.ReadCurrent(rel); err != nil || cur.MemoryLimit < 150<<20 {
		t.Errorf("hog's running container's memory limit %d (%v), want at least 150 MB", cur.MemoryLimit, err)
	}
	if kills < 1 {
		t.Errorf("%s/memory.events: oom_kill %d, want at least 1", hpd.Memory, kills)
	}
	if oomGroup != "1" {
		t.Errorf("hog's container memory.oom.group = %q, want 1 (the kubelet's default on cgroup v2)", oomGroup)
	}
	st := hogPod.Status.ContainerStatuses[0]
	last := "none"
	if tm := st.LastTerminationState.Terminated; tm != nil {
		last = fmt.Sprintf("%s (exit %d)", tm.Reason, tm.ExitCode)
	}
	evs, _ := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=hog"})
	reasons := map[string]int{}
	for _, e := range evs.Items {
		reasons[e.Reason] += int(max(e.Count, 1))
		if e.Type == corev1.EventTypeWarning || e.Reason == "MemoryRaised" {
			from := e.ReportingController
			if from == "" {
				from = e.Source.Component
			}
			t.Logf("v2 node: hog %s %s from %s (%dx, first %s): %s", e.Type, e.Reason, from, max(e.Count, 1), e.FirstTimestamp.Format("15:04:05"), e.Message)
		}
	}
	if reasons["OOMKilled"] < 1 || reasons["MemoryRaised"] < 1 {
		t.Errorf("hog's events %v: want OOMKilled and MemoryRaised", reasons)
	}
	// One raise per OOM: with memory.oom.group=1 one OOM kills every
	// process of the container (oom_kill counts each, oom the OOM once),
	// and the kills after the first are the same OOM's (TestSameOOM).
	ooms := v2MemoryEvent(t, hpd.Memory, "oom")
	t.Logf("v2 node: %d MemoryRaised events for %d OOMs (%s/memory.events; oom_kill %d)", reasons["MemoryRaised"], ooms, hpd.Memory, kills)
	if reasons["MemoryRaised"] > ooms {
		t.Errorf("%d MemoryRaised events for %d OOMs (memory.events' oom): want at most one raise per OOM", reasons["MemoryRaised"], ooms)
	}
	t.Logf("v2 node: hog raised to memory.max %d after %d OOM kill(s) (the pod's memory.events), %v after the create; memory.oom.group %s, %d restart(s), last termination %s; events %v",
		milli(hogPod.Spec.Containers[0].Resources.Limits, corev1.ResourceMemory), kills, raised.Round(time.Millisecond), oomGroup, st.RestartCount, last, reasons)
}

// v2MemoryEvent is a field of a cgroup v2 memory.events.
func v2MemoryEvent(t testing.TB, memDir, field string) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(memDir, "memory.events"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+" "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("%s/memory.events: %q: %v", memDir, line, err)
			}
			return n
		}
	}
	t.Fatalf("%s/memory.events has no %s", memDir, field)
	return -1
}
