//go:build linux

package agent

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/test/cgtest"
	"github.com/cgpilot/cgpilot/test/tier"
)

func TestMain(m *testing.M) { cgtest.Main(m) }

// kubeletTree is a kubelet-style (cgroupfs driver) kubepods tree inside a
// cgtest sandbox, with real processes in the container cgroups.
type kubeletTree struct {
	t      testing.TB
	driver string // cgroupfs or systemd naming
	sb     *cgtest.Sandbox
	parent string // kubepods path from the hierarchy root
	cfg    Config
	// cpuKey and cpusetKey are the sandbox keys of the cpu and cpuset
	// hierarchies: the v1 controller names, or cgtest.V2 for both.
	cpuKey, cpusetKey string
}

func newKubeletTree(t testing.TB) *kubeletTree { return newKubeletTreeDriver(t, "cgroupfs") }

func newKubeletTreeDriver(t testing.TB, driver string) *kubeletTree {
	tier.Kernel(t)
	sb := cgtest.New(t, "cpu", "cpuset")
	cpuKey, cpusetKey := "cpu", "cpuset"
	if sb.Unified {
		cpuKey, cpusetKey = cgtest.V2, cgtest.V2
	}
	rel := strings.TrimPrefix(sb.Dirs[cpusetKey], sb.Mounts[cpusetKey])
	if relCPU := strings.TrimPrefix(sb.Dirs[cpuKey], sb.Mounts[cpuKey]); relCPU != rel {
		t.Skipf("kernel tier: the test process sits in different cpu (%s) and cpuset (%s) cgroups; kubepods must have one path in both", relCPU, rel)
	}
	kubepods := "kubepods"
	qosDirs := []string{"kubepods", "kubepods/burstable", "kubepods/besteffort"}
	if driver == "systemd" {
		kubepods = "kubepods.slice"
		qosDirs = []string{kubepods, kubepods + "/kubepods-burstable.slice", kubepods + "/kubepods-besteffort.slice"}
	}
	for _, d := range qosDirs {
		sb.Mkdir(d)
	}
	cfg := DefaultConfig()
	cfg.CgroupParent = path.Join(rel, kubepods)
	cfg.CheckpointPath = filepath.Join(t.TempDir(), "cpu_pools.checkpoint")
	cfg.KubeletCPUManagerState = ""
	cfg.SweepInterval = Duration{time.Second}
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Fatal(err)
	}
	all := mustSet(t, strings.TrimSpace(string(online)))
	if all.Size() < 2 {
		t.Skip("kernel tier: needs at least 2 CPUs to split exclusive and shared")
	}
	// Use the CPUs the sandbox may use, so every write is a legal subset.
	// A fresh v2 cpuset.cpus is empty (inherit): what the sandbox may use
	// is cpuset.cpus.effective.
	cpusFile := "cpuset.cpus"
	if sb.Unified {
		cpusFile = "cpuset.cpus.effective"
	}
	sbCPUs := readCPUsFile(t, filepath.Join(sb.Dirs[cpusetKey], cpusFile))
	cfg.CPUs = sbCPUs.String()
	return &kubeletTree{t: t, driver: driver, sb: sb, parent: cfg.CgroupParent, cfg: cfg, cpuKey: cpuKey, cpusetKey: cpusetKey}
}

// pod creates a pod cgroup with one busy process per container, and a CFS
// quota of half a CPU on each container (the kubelet's limit).
func (k *kubeletTree) pod(uid string, qos QoSClass, containers ...string) (podRel string, pids []int) {
	podRel, ctrs := k.sb.MkdirPod(k.driver, string(qos), uid, containers...)
	file, value := "cpu.cfs_quota_us", "50000"
	if k.sb.Unified {
		file, value = "cpu.max", "50000 100000"
	}
	for _, c := range ctrs {
		if err := os.WriteFile(filepath.Join(k.sb.Path(k.cpuKey, c), file), []byte(value), 0); err != nil {
			k.t.Fatal(err)
		}
		pids = append(pids, k.sb.Start(c, cgtest.Busy, 0).Pid)
	}
	return podRel, pids
}

func readCPUsFile(t testing.TB, file string) cpuset.CPUSet {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return mustSet(t, strings.TrimSpace(string(b)))
}

// cpus is rel's cpuset.cpus. On v2 that is only a request: the kernel
// grants its intersection with the parent's effective set, so the granted
// cpuset.cpus.effective must be the same set.
func (k *kubeletTree) cpus(rel string) string {
	k.t.Helper()
	dir := k.sb.Path(k.cpusetKey, rel)
	set := readCPUsFile(k.t, filepath.Join(dir, "cpuset.cpus"))
	if k.sb.Unified {
		if eff := readCPUsFile(k.t, filepath.Join(dir, "cpuset.cpus.effective")); !eff.Equals(set) {
			k.t.Fatalf("%s: cpuset.cpus %s but cpuset.cpus.effective %s", rel, set, eff)
		}
	}
	return set.String()
}

// quota is rel's CFS quota in v1 form (cpu.cfs_quota_us, -1 = unlimited).
// On v2 it comes from cpu.max ("max 100000" is -1), whose period must be
// the kubelet's 100 ms.
func (k *kubeletTree) quota(rel string) string {
	k.t.Helper()
	file := "cpu.cfs_quota_us"
	if k.sb.Unified {
		file = "cpu.max"
	}
	b, err := os.ReadFile(filepath.Join(k.sb.Path(k.cpuKey, rel), file))
	if err != nil {
		k.t.Fatal(err)
	}
	v := strings.TrimSpace(string(b))
	if !k.sb.Unified {
		return v
	}
	q, period, ok := strings.Cut(v, " ")
	if !ok || period != "100000" {
		k.t.Fatalf("%s/cpu.max = %q, want <quota> 100000", rel, v)
	}
	if q == "max" {
		return "-1"
	}
	return q
}

// allowed is what the scheduler lets the process run on: the proof that
// the cgroup write took effect on the task, not only in the file.
func allowed(t testing.TB, pid int) string {
	t.Helper()
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list for pid %d", pid)
	return ""
}

func testLoggerTB(t testing.TB) logr.Logger { return testr.NewWithInterface(t, testr.Options{}) }

// TestKernelPools drives the pool manager against real cgroups with real
// busy processes: an exclusive pod gets its core and no quota, the shared
// pods move off it (seen in the tasks' allowed CPUs), a live resize and a
// release-isolation switch, and deleting the pod gives the core back.
func TestKernelPools(t *testing.T) {
	for _, driver := range []string{"cgroupfs", "systemd"} {
		t.Run(driver, func(t *testing.T) { testKernelPools(t, driver) })
	}
}

func testKernelPools(t *testing.T, driver string) {
	k := newKubeletTreeDriver(t, driver)
	backend, err := newBackend(k.cfg)
	if err != nil {
		t.Fatal(err)
	}
	all := mustSet(t, k.cfg.CPUs)
	st := newMemState(all, cpuset.New())
	m := newPools(st, policy{alloc: firstFit{}, capFraction: 2.0 / 3.0}, backend)
	pods := map[string]podInfo{}
	list := func() []podInfo {
		var out []podInfo
		for _, p := range pods {
			out = append(out, p)
		}
		return out
	}
	sharedRel, sharedPIDs := k.pod("s1-a", "Burstable", "app", "sidecar")
	beRel, bePIDs := k.pod("s2-b", "BestEffort", "app")
	pods["s1"] = podInfo{Key: "ns/s1", UID: "s1-a", QoS: QoSBurstable, Req: PodRequest{Pool: PoolShared}}
	pods["s2"] = podInfo{Key: "ns/s2", UID: "s2-b", QoS: QoSBestEffort, Req: PodRequest{Pool: PoolShared}}
	for _, p := range list() {
		if res := m.Sync(p, list); len(res.Failed) != 0 {
			t.Fatalf("sync %s: %v", p.UID, res.Failed)
		}
	}
	dbRel, dbPIDs := k.pod("db", "Guaranteed", "postgres")
	pods["db"] = podInfo{Key: "ns/db", UID: "db", QoS: QoSGuaranteed, Req: PodRequest{Pool: PoolExclusive, CPUs: ptr(1)}}
	res := m.Sync(pods["db"], list)
	if len(res.Failed) != 0 {
		t.Fatalf("exclusive sync: %v", res.Failed)
	}
	excl := st.Exclusive()
	shared := all.Difference(excl)
	if excl.Size() != 1 || res.AllocatedCPUs != excl.String() {
		t.Fatalf("exclusive set %s, result %+v", excl, res)
	}
	check := func(rel string, want string, pids ...int) {
		t.Helper()
		if got := k.cpus(rel); got != want {
			t.Fatalf("%s cpuset.cpus = %s, want %s", rel, got, want)
		}
		for _, pid := range pids {
			if got := allowed(t, pid); got != want {
				t.Fatalf("pid %d in %s may run on %s, want %s", pid, rel, got, want)
			}
		}
	}
	check(dbRel, excl.String())
	check(dbRel+"/postgres", excl.String(), dbPIDs...)
	check(sharedRel+"/app", shared.String(), sharedPIDs[0])
	check(sharedRel+"/sidecar", shared.String(), sharedPIDs[1])
	check(beRel+"/app", shared.String(), bePIDs...)
	for _, rel := range []string{dbRel, dbRel + "/postgres"} {
		if q := k.quota(rel); q != "-1" {
			t.Fatalf("%s cpu.cfs_quota_us = %s, want -1", rel, q)
		}
	}
	if q := k.quota(sharedRel + "/app"); q != "50000" {
		t.Fatalf("shared container quota changed to %s", q)
	}

	// release-isolation: the exclusive pod runs on every non-reserved CPU,
	// the shared pods stay off its core.
	p := pods["db"]
	p.Req.ReleaseIsolation = true
	pods["db"] = p
	if res := m.Sync(p, list); len(res.Failed) != 0 || res.Status.State != StateReleased {
		t.Fatalf("release isolation: %+v", res)
	}
	check(dbRel+"/postgres", all.String(), dbPIDs...)
	check(sharedRel+"/app", shared.String(), sharedPIDs[0])
	p.Req.ReleaseIsolation = false
	pods["db"] = p
	m.Sync(p, list)
	check(dbRel+"/postgres", excl.String(), dbPIDs...)

	// A late container: its cgroup appears after the pod was set up.
	k.sb.Mkdir(dbRel + "/late")
	if res := m.Sync(p, list); len(res.Failed) != 0 {
		t.Fatalf("late container: %v", res.Failed)
	}
	check(dbRel+"/late", excl.String())

	// Deleting the pod gives the core back to the shared pods.
	delete(pods, "db")
	if res := m.Forget("db", list); len(res.Failed) != 0 {
		t.Fatalf("forget: %v", res.Failed)
	}
	check(sharedRel+"/app", all.String(), sharedPIDs[0])
	check(beRel+"/app", all.String(), bePIDs...)
}

// TestKernelWatcherQueuesLateContainer: a container cgroup created under a
// pod dir is seen by inotify and queues the pod.
func TestKernelWatcherQueuesLateContainer(t *testing.T) {
	for _, driver := range []string{"cgroupfs", "systemd"} {
		t.Run(driver, func(t *testing.T) { testWatcher(t, driver) })
	}
}

func testWatcher(t *testing.T, driver string) {
	k := newKubeletTreeDriver(t, driver)
	backend, err := newBackend(k.cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := newTestController(t, k.cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addIndexedPod(t, c, "ns", "late", "u-late")
	addIndexedPod(t, c, "ns", "new", "u-new")
	podRel, _ := k.sb.MkdirPod(driver, "Burstable", "u-late")
	if err := c.watchCgroups(ctx, backend); err != nil {
		t.Fatal(err)
	}
	// A new pod dir queues its pod.
	k.sb.MkdirPod(driver, "BestEffort", "u-new")
	if key, _ := c.queue.Get(); key != "ns/new" {
		t.Fatalf("queued %q, want ns/new", key)
	} else {
		c.queue.Done(key)
	}
	k.sb.Mkdir(podRel + "/ctr")
	key, _ := c.queue.Get()
	if key != "ns/late" {
		t.Fatalf("queued %q, want ns/late", key)
	}
	c.mu.Lock()
	_, late := c.late[key]
	c.mu.Unlock()
	if !late {
		t.Fatal("container creation not marked late")
	}
}

// TestKernelQuotaRestored: an exclusive pod that goes back to the shared
// pool gets the kubelet's CFS quotas back (children before the pod, as v1
// requires when they shrink).
func TestKernelQuotaRestored(t *testing.T) {
	k := newKubeletTree(t)
	backend, err := newBackend(k.cfg)
	if err != nil {
		t.Fatal(err)
	}
	all := mustSet(t, k.cfg.CPUs)
	m := newPools(newMemState(all, cpuset.New()), policy{alloc: firstFit{}, capFraction: 2.0 / 3.0}, backend)
	rel, pids := k.pod("q1", "Burstable", "app")
	p := podInfo{Key: "ns/q1", UID: "q1", QoS: QoSBurstable, Req: PodRequest{Pool: PoolExclusive, CPUs: ptr(1)},
		CPULimitsMilli: map[string]int64{"containerd://app": 500}}
	list := func() []podInfo { return []podInfo{p} }
	if res := m.Sync(p, list); len(res.Failed) != 0 {
		t.Fatal(res.Failed)
	}
	if k.quota(rel) != "-1" || k.quota(rel+"/app") != "-1" {
		t.Fatalf("exclusive quotas %s %s, want -1", k.quota(rel), k.quota(rel+"/app"))
	}
	p.Req = PodRequest{Pool: PoolShared}
	if res := m.Sync(p, list); len(res.Failed) != 0 {
		t.Fatal(res.Failed)
	}
	if k.quota(rel) != "50000" || k.quota(rel+"/app") != "50000" {
		t.Fatalf("restored quotas pod %s container %s, want 50000", k.quota(rel), k.quota(rel+"/app"))
	}
	if got := allowed(t, pids[0]); got != all.String() {
		t.Fatalf("task may run on %s, want %s", got, all)
	}
}

// TestKernelApplyPodRetriesOnRace: a container that appeared (unplanned
// child) or vanished (gone) between listing and writing makes the writer
// refuse and roll back; ApplyPod lists again and succeeds.
func TestKernelApplyPodRetriesOnRace(t *testing.T) {
	k := newKubeletTree(t)
	backend, err := newBackend(k.cfg)
	if err != nil {
		t.Fatal(err)
	}
	all := mustSet(t, k.cfg.CPUs)
	one := cpuset.New(all.List()[1])
	rel, pids := k.pod("race", "Burstable", "a", "b")
	podPath := path.Join(k.parent, "burstable", "podrace")
	for _, tc := range []struct {
		name       string
		containers []string
		want       string
	}{
		{"unplanned child", []string{podPath + "/a"}, one.String()},
		{"vanished child", []string{podPath + "/a", podPath + "/b", podPath + "/gone"}, all.String()},
	} {
		want := mustSet(t, tc.want)
		if _, err := backend.ApplyPod(podCgroupPlan{UID: "race", Path: podPath, Containers: tc.containers, CPUs: want}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, c := range []string{"", "/a", "/b"} {
			if k.sb.Unified && tc.name == "unplanned child" && c == "/b" {
				// v2 bounds a child by its parent's effective set instead of
				// refusing the narrowing, so the writer has no reason to
				// refuse and ApplyPod none to list again: b keeps its own
				// empty request and is granted exactly the pod's CPUs.
				if got := readCPUsFile(t, filepath.Join(k.sb.Path(k.cpusetKey, rel+c), "cpuset.cpus.effective")); got.String() != tc.want {
					t.Fatalf("%s: %s%s cpuset.cpus.effective = %s, want %s", tc.name, rel, c, got, tc.want)
				}
				continue
			}
			if got := k.cpus(rel + c); got != tc.want {
				t.Fatalf("%s: %s%s = %s, want %s", tc.name, rel, c, got, tc.want)
			}
		}
		for _, pid := range pids {
			if got := allowed(t, pid); got != tc.want {
				t.Fatalf("%s: pid %d may run on %s, want %s", tc.name, pid, got, tc.want)
			}
		}
	}
}

// TestKernelUnmanagedPodKeepsCPUs: QoS parents are only ever widened, so a
// pod the agent leaves alone keeps every CPU while an exclusive pod is the
// only managed one (on v2 an empty cpuset.cpus already means all of them).
func TestKernelUnmanagedPodKeepsCPUs(t *testing.T) {
	k := newKubeletTree(t)
	backend, err := newBackend(k.cfg)
	if err != nil {
		t.Fatal(err)
	}
	all := mustSet(t, k.cfg.CPUs)
	st := newMemState(all, cpuset.New())
	m := newPools(st, policy{alloc: firstFit{}, capFraction: 2.0 / 3.0}, backend)
	freeRel, freePIDs := k.pod("free", "Burstable", "app")
	_, dbPIDs := k.pod("db", "Guaranteed", "app")
	pods := []podInfo{
		{Key: "kube-system/free", UID: "free", QoS: QoSBurstable, Untouched: true},
		{Key: "ns/db", UID: "db", QoS: QoSGuaranteed, Req: PodRequest{Pool: PoolExclusive, CPUs: ptr(1)}},
	}
	if res := m.Sync(pods[1], func() []podInfo { return pods }); len(res.Failed) != 0 {
		t.Fatalf("exclusive sync: %v", res.Failed)
	}
	excl := st.Exclusive()
	if excl.Size() != 1 {
		t.Fatalf("exclusive set %s, want one CPU", excl)
	}
	if got := allowed(t, dbPIDs[0]); got != excl.String() {
		t.Fatalf("exclusive pod may run on %s, want %s", got, excl)
	}
	if got := allowed(t, freePIDs[0]); got != all.String() {
		t.Fatalf("unmanaged pod %s may run on %s, want every CPU %s", freeRel, got, all)
	}
}

// TestKernelV2ControllersRequired: on v2 the agent refuses to start when
// kubepods does not enable cpu and cpuset for its children (their files
// would be missing), naming the file.
func TestKernelV2ControllersRequired(t *testing.T) {
	tier.Kernel(t)
	sb := cgtest.New(t, "cpu", "cpuset")
	if !sb.Unified {
		t.Skip("kernel tier: v1 has no cgroup.subtree_control; each v1 controller is its own hierarchy (checked by mountsBelow)")
	}
	sb.Mkdir("kubepods") // no children yet: its subtree_control is empty
	cfg := DefaultConfig()
	cfg.CgroupParent = path.Join(strings.TrimPrefix(sb.Dirs[cgtest.V2], sb.Mounts[cgtest.V2]), "kubepods")
	_, err := newBackend(cfg)
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "cgroup.subtree_control") {
		t.Fatalf("newBackend = %v, want ErrInvalidConfig naming cgroup.subtree_control", err)
	}
	sb.Mkdir("kubepods/burstable") // enables the sandbox's controllers in kubepods
	if _, err := newBackend(cfg); err != nil {
		t.Fatalf("with cpu and cpuset enabled: %v", err)
	}
}
