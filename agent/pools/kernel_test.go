//go:build linux

package pools

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/test/cgtest"
	"github.com/cgpilot/cgpilot/test/tier"
)

// Kernel tier: the pools against real cgroups with real busy processes
// (make test-kernel, and on cgroup v2 in the VM with make test-v2).

func TestMain(m *testing.M) { cgtest.Main(m) }

// kernelPools is a Manager over a kubelet-style tree of this host.
func kernelPools(t testing.TB, driver string) (*cgtest.KubeletTree, *Manager) {
	tier.Kernel(t)
	k := cgtest.NewKubeletTree(t, driver)
	mounts, err := cgroup.ReadMounts("/proc")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := cgroup.OpenKubepods(mounts, cgroup.KubepodsConfig{Root: "/sys/fs/cgroup", Layout: cgroup.LayoutConfig{KubepodsPath: k.Kubepods}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Options{All: k.CPUs, Reserved: cpuset.New(), CapRatio: 2.0 / 3.0, Cgroups: kp})
	if err != nil {
		t.Fatal(err)
	}
	return k, m
}

// TestKernelPools: an exclusive pod gets its core and no quota, the shared
// pods move off it (seen in the tasks' allowed CPUs), a release-isolation
// switch and a late container, and deleting the pod gives the core back.
func TestKernelPools(t *testing.T) {
	for _, driver := range []string{"cgroupfs", "systemd"} {
		t.Run(driver, func(t *testing.T) { testKernelPools(t, driver) })
	}
}

func testKernelPools(t *testing.T, driver string) {
	k, m := kernelPools(t, driver)
	all := k.CPUs
	pods := map[string]Pod{}
	list := func() []Pod {
		var out []Pod
		for _, p := range pods {
			out = append(out, p)
		}
		return out
	}
	sharedRel, sharedPIDs := k.Pod("s1-a", "Burstable", "app", "sidecar")
	beRel, bePIDs := k.Pod("s2-b", "BestEffort", "app")
	pods["s1"] = Pod{Key: "ns/s1", UID: "s1-a", QoS: cgroup.QoSBurstable, Req: local.PodRequest{Pool: local.PoolShared}}
	pods["s2"] = Pod{Key: "ns/s2", UID: "s2-b", QoS: cgroup.QoSBestEffort, Req: local.PodRequest{Pool: local.PoolShared}}
	for _, p := range list() {
		if res := m.Sync(p, list); len(res.Failed) != 0 {
			t.Fatalf("sync %s: %v", p.UID, res.Failed)
		}
	}
	dbRel, dbPIDs := k.Pod("db", "Guaranteed", "postgres")
	pods["db"] = Pod{Key: "ns/db", UID: "db", QoS: cgroup.QoSGuaranteed, Req: local.PodRequest{Pool: local.PoolExclusive, CPUs: ptr(1)}}
	res := m.Sync(pods["db"], list)
	if len(res.Failed) != 0 {
		t.Fatalf("exclusive sync: %v", res.Failed)
	}
	excl := m.State().Exclusive()
	shared := all.Difference(excl)
	if excl.Size() != 1 || res.AllocatedCPUs != excl.String() {
		t.Fatalf("exclusive set %s, result %+v", excl, res)
	}
	check := func(rel string, want string, pids ...int) {
		t.Helper()
		if got := k.CPUSet(rel); got != want {
			t.Fatalf("%s cpuset.cpus = %s, want %s", rel, got, want)
		}
		for _, pid := range pids {
			if got := cgtest.Allowed(t, pid); got != want {
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
		if q := k.Quota(rel); q != "-1" {
			t.Fatalf("%s cpu.cfs_quota_us = %s, want -1", rel, q)
		}
	}
	if q := k.Quota(sharedRel + "/app"); q != "50000" {
		t.Fatalf("shared container quota changed to %s", q)
	}

	// release-isolation: the exclusive pod runs on the shared pool and its
	// own core, the shared pods stay off its core.
	p := pods["db"]
	p.Req.ReleaseIsolation = true
	pods["db"] = p
	if res := m.Sync(p, list); len(res.Failed) != 0 || res.Status.State != local.StateReleased {
		t.Fatalf("release isolation: %+v", res)
	}
	check(dbRel+"/postgres", all.String(), dbPIDs...)
	check(sharedRel+"/app", shared.String(), sharedPIDs[0])
	p.Req.ReleaseIsolation = false
	pods["db"] = p
	m.Sync(p, list)
	check(dbRel+"/postgres", excl.String(), dbPIDs...)

	// A late container: its cgroup appears after the pod was set up.
	k.SB.Mkdir(dbRel + "/late")
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

// TestKernelQuotaRestored: an exclusive pod that goes back to the shared
// pool gets the kubelet's CFS quotas back (children before the pod, as v1
// requires when they shrink).
func TestKernelQuotaRestored(t *testing.T) {
	k, m := kernelPools(t, "cgroupfs")
	rel, pids := k.Pod("q1", "Burstable", "app")
	p := Pod{Key: "ns/q1", UID: "q1", QoS: cgroup.QoSBurstable, Req: local.PodRequest{Pool: local.PoolExclusive, CPUs: ptr(1)},
		CPULimitsMilli: map[string]int64{"containerd://app": 500}}
	list := func() []Pod { return []Pod{p} }
	if res := m.Sync(p, list); len(res.Failed) != 0 {
		t.Fatal(res.Failed)
	}
	if k.Quota(rel) != "-1" || k.Quota(rel+"/app") != "-1" {
		t.Fatalf("exclusive quotas %s %s, want -1", k.Quota(rel), k.Quota(rel+"/app"))
	}
	p.Req = local.PodRequest{Pool: local.PoolShared}
	if res := m.Sync(p, list); len(res.Failed) != 0 {
		t.Fatal(res.Failed)
	}
	if k.Quota(rel) != "50000" || k.Quota(rel+"/app") != "50000" {
		t.Fatalf("restored quotas pod %s container %s, want 50000", k.Quota(rel), k.Quota(rel+"/app"))
	}
	if got := cgtest.Allowed(t, pids[0]); got != k.CPUs.String() {
		t.Fatalf("task may run on %s, want %s", got, k.CPUs)
	}
}

// TestKernelUnmanagedPodKeepsCPUs: QoS parents are only ever widened, so a
// pod the agent leaves alone keeps every CPU while an exclusive pod is the
// only managed one (on v2 an empty cpuset.cpus already means all of them).
func TestKernelUnmanagedPodKeepsCPUs(t *testing.T) {
	k, m := kernelPools(t, "cgroupfs")
	freeRel, freePIDs := k.Pod("free", "Burstable", "app")
	_, dbPIDs := k.Pod("db", "Guaranteed", "app")
	pods := []Pod{
		{Key: "kube-system/free", UID: "free", QoS: cgroup.QoSBurstable, Untouched: true},
		{Key: "ns/db", UID: "db", QoS: cgroup.QoSGuaranteed, Req: local.PodRequest{Pool: local.PoolExclusive, CPUs: ptr(1)}},
	}
	if res := m.Sync(pods[1], func() []Pod { return pods }); len(res.Failed) != 0 {
		t.Fatalf("exclusive sync: %v", res.Failed)
	}
	excl := m.State().Exclusive()
	if excl.Size() != 1 {
		t.Fatalf("exclusive set %s, want one CPU", excl)
	}
	if got := cgtest.Allowed(t, dbPIDs[0]); got != excl.String() {
		t.Fatalf("exclusive pod may run on %s, want %s", got, excl)
	}
	if got := cgtest.Allowed(t, freePIDs[0]); got != k.CPUs.String() {
		t.Fatalf("unmanaged pod %s may run on %s, want every CPU %s", freeRel, got, k.CPUs)
	}
}

// TestKernelHalfCreatedPod: the kubelet creates a pod's cgroup one
// hierarchy at a time; an exclusive pod seen when only its cpuset cgroup
// exists is pending (no failure, no Event), and the write lands once the
// cpu cgroup exists too.
func TestKernelHalfCreatedPod(t *testing.T) {
	k, m := kernelPools(t, "cgroupfs")
	if k.SB.Unified {
		t.Skip("kernel tier: on v2 one directory serves every controller; a half-created pod is a v1 state")
	}
	podRel := cgtest.PodPath("cgroupfs", "Guaranteed", "half")
	if err := mkdirIn(k.SB.Path(k.CPUSetKey, podRel)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rmdirIn(k.SB.Path(k.CPUSetKey, podRel)) })
	p := Pod{Key: "ns/half", UID: "half", QoS: cgroup.QoSGuaranteed, Req: local.PodRequest{Pool: local.PoolExclusive, CPUs: ptr(1)}}
	list := func() []Pod { return []Pod{p} }
	res := m.Sync(p, list)
	if len(res.Failed) != 0 || !res.Pending["half"] || res.Status.State != local.StateAllocated {
		t.Fatalf("half-created pod: failed %v, pending %v, status %+v", res.Failed, res.Pending, res.Status)
	}
	for _, ev := range res.Events {
		if ev.Warning {
			t.Fatalf("Warning Event for a half-created pod: %+v", ev)
		}
	}
	if err := mkdirIn(k.SB.Path(k.CPUKey, podRel)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rmdirIn(k.SB.Path(k.CPUKey, podRel)) })
	res = m.Sync(p, list)
	if len(res.Failed) != 0 || res.Pending["half"] {
		t.Fatalf("complete pod: failed %v, pending %v", res.Failed, res.Pending)
	}
	if got := k.CPUSet(podRel); got != m.State().Exclusive().String() || k.Quota(podRel) != "-1" {
		t.Fatalf("pod cpuset %s quota %s, want %s and -1", got, k.Quota(podRel), m.State().Exclusive())
	}
}

func mkdirIn(dir string) error { return os.Mkdir(dir, 0o755) }
func rmdirIn(dir string)       { _ = os.Remove(dir) }

// sharedTree builds n shared pods (pod cgroup + one container cgroup each)
// with no processes, for the refresh benchmarks.
func sharedTree(b *testing.B, k *cgtest.KubeletTree, n int, uid func(i int) string) (containers []string) {
	for i := 0; i < n; i++ {
		_, ctrs := k.SB.MkdirPod("cgroupfs", "Burstable", uid(i), "app")
		containers = append(containers, filepath.Join(k.SB.Path("cpuset", ctrs[0]), "cpuset.cpus"))
	}
	return containers
}

// BenchmarkSharedPoolRefresh200: an exclusive allocation and its release
// re-pin 200 shared pods (pod + container cgroups, leveled) through the
// pool manager and cgroup.Writer on real v1 cgroups, with the cgroup watch
// running and its events handled as the agent does (Agrees, under the
// pools' lock). Between refreshes, untimed, the watch drains the events of
// the refresh's own writes, as it does on a node where refreshes are
// seconds apart. Baseline in the same run, the watch stopped first: a bare
// loop of os.WriteFile over the same 400 files in a legal order, unchecked
// (the floor of the kernel writes themselves).
func BenchmarkSharedPoolRefresh200(b *testing.B) {
	k, m := kernelPools(b, "cgroupfs")
	if k.SB.Unified {
		b.Skip("kernel tier: the baseline writes files in the v1 order")
	}
	all := k.CPUs
	var pods []Pod
	files := sharedTree(b, k, 200, func(i int) string { return fmt.Sprintf("shared-%03d", i) })
	byUID := map[string]Pod{}
	for i := 0; i < 200; i++ {
		p := Pod{Key: fmt.Sprintf("ns/s%03d", i), UID: fmt.Sprintf("shared-%03d", i), QoS: cgroup.QoSBurstable, Req: local.PodRequest{Pool: local.PoolShared}}
		pods = append(pods, p)
		byUID[p.UID] = p
	}
	k.SB.MkdirPod("cgroupfs", "Guaranteed", "excl", "app")
	db := Pod{Key: "ns/db", UID: "excl", QoS: cgroup.QoSGuaranteed, Req: local.PodRequest{Pool: local.PoolExclusive, CPUs: ptr(1)}}
	byUID[db.UID] = db
	list := func() []Pod { return append(append([]Pod{}, pods...), db) }
	var handled atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done, err := m.cg.(*cgroup.Kubepods).Watch(ctx, func(ev cgroup.WatchEvent) {
		if p, ok := byUID[ev.PodUID]; ok && ev.Kind == cgroup.FileWritten {
			m.Agrees(p, ev.File, ev.Value)
		}
		handled.Add(1)
	}, func(err error) { b.Errorf("watch: %v", err) })
	if err != nil {
		b.Fatal(err)
	}
	stopWatch := func() { cancel(); <-done }
	defer stopWatch()
	// drained waits until the watch has handled no event for 20 ms.
	drained := func() {
		for last := handled.Load(); ; {
			time.Sleep(20 * time.Millisecond)
			n := handled.Load()
			if n == last {
				return
			}
			last = n
		}
	}
	m.Sweep(list())
	drained()
	var refresh []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		var res Result
		if i%2 == 0 {
			res = m.Sync(db, list)
		} else {
			res = m.Forget("excl", list)
		}
		refresh = append(refresh, time.Since(t0))
		if len(res.Failed) != 0 || res.Written < 400 {
			b.Fatalf("refresh %d: wrote %d, failed %v", i, res.Written, res.Failed)
		}
		b.StopTimer()
		drained()
		b.StartTimer()
	}
	b.StopTimer()
	// Baseline: bare os.WriteFile of the same 400 files (200 pods and their
	// containers), in the only order the kernel accepts (narrow: container
	// then pod; widen: pod then container), with no reads and no checks.
	m.Forget("excl", list)
	stopWatch()
	narrow := all.Difference(cpuset.New(all.List()[0])).String()
	var bare []time.Duration
	for i := 0; i < max(b.N, 5); i++ {
		t0 := time.Now()
		for _, f := range files {
			podFile := filepath.Join(filepath.Dir(filepath.Dir(f)), "cpuset.cpus")
			order, val := []string{f, podFile}, narrow
			if i%2 == 1 {
				order, val = []string{podFile, f}, all.String()
			}
			for _, file := range order {
				if err := os.WriteFile(file, []byte(val), 0); err != nil {
					b.Fatal(err)
				}
			}
		}
		bare = append(bare, time.Since(t0))
	}
	if b.N%2 == 1 || max(b.N, 5)%2 == 1 {
		m.Sweep(list()) // leave the tree as the pool manager wants it
	}
	b.ReportMetric(percentile(refresh, 0.5), "refresh-p50-ms")
	b.ReportMetric(percentile(refresh, 0.99), "refresh-p99-ms")
	b.ReportMetric(percentile(bare, 0.5), "bare400-p50-ms")
	b.ReportMetric(percentile(bare, 0.99), "bare400-p99-ms")
	if w := percentile(bare, 0.5); w > 0 {
		b.ReportMetric(percentile(refresh, 0.5)/w, "refresh/bare")
	}
	if w := percentile(bare, 0.99); w > 0 {
		b.ReportMetric(percentile(refresh, 0.99)/w, "refresh/bare-p99")
	}
}

func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p)
	return float64(s[i].Microseconds()) / 1000
}
