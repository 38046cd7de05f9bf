//go:build linux

package cgroup_test

// Kernel tier: real cgroup writes, throttling and OOM kills inside a
// cgtest sandbox. Run as root with CGPILOT_TEST_KERNEL=1 on this host (v1
// hybrid) and in the cgroup v2 VM (test/v2vm).

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/test/cgtest"
	"github.com/cgpilot/cgpilot/test/tier"
	"k8s.io/utils/cpuset"
)

func TestMain(m *testing.M) { cgtest.Main(m) }

const (
	kUID = "5d1c9a7e-0b7e-4c1e-9a51-3c1f2e6f7a10"
	kCID = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
)

type kpod struct {
	s        *cgtest.Sandbox
	pod, ctr cgroup.Dirs
	ctrRel   string
}

// newPod makes a sandbox with one burstable pod and one container laid out
// as the kubelet's driver and containerd name them, and resolves both
// through Layout.
func newPod(t *testing.T, driver cgroup.Driver) kpod { return newPodDriver(t, driver) }

func newPodTB(tb testing.TB) kpod { return newPodDriver(tb, cgroup.DriverCgroupfs) }

func newPodDriver(t testing.TB, driver cgroup.Driver) kpod {
	t.Helper()
	tier.Kernel(t)
	s := cgtest.New(t, "cpu", "cpuacct", "cpuset", "memory")
	name := kCID
	if driver == cgroup.DriverSystemd {
		name = "cri-containerd-" + kCID + ".scope"
	}
	_, ctrs := s.MkdirPod(string(driver), "Burstable", kUID, name)
	l, err := cgroup.NewLayout(s.AsRoots(), cgroup.LayoutConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Driver() != driver {
		t.Fatalf("detected driver %s, want %s", l.Driver(), driver)
	}
	pod, err := l.PodDirs(kUID, cgroup.QoSBurstable)
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := l.ContainerDirs(kUID, cgroup.QoSBurstable, "containerd://"+kCID)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{ctr.CPU, ctr.CPUAcct, ctr.CPUSet, ctr.Memory} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err != nil {
			t.Fatalf("resolved container dir is not a cgroup: %v", err)
		}
	}
	return kpod{s: s, pod: pod, ctr: ctr, ctrRel: ctrs[0]}
}

func sample(t *testing.T, r *cgroup.Reader) cgroup.Stats {
	t.Helper()
	var st cgroup.Stats
	if err := r.Read(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// cpuRate measures CPU seconds per second over d.
func cpuRate(t *testing.T, r *cgroup.Reader, d time.Duration) (rate float64, throttled uint64) {
	a, t0 := sample(t, r), time.Now()
	time.Sleep(d)
	b, t1 := sample(t, r), time.Now()
	return float64(b.CPUUsageNs-a.CPUUsageNs) / float64(t1.Sub(t0).Nanoseconds()), b.ThrottledPeriods - a.ThrottledPeriods
}

// favour gives the sandbox a large CPU share, so that the other load on a
// shared test machine does not hide the quota raise (quota is a ceiling,
// not a guarantee).
func favour(t *testing.T, s *cgtest.Sandbox) {
	f, v := "cpu.shares", "65536"
	dir := s.Dirs["cpu"]
	if s.Unified {
		f, v, dir = "cpu.weight", "10000", s.Dirs[cgtest.V2]
	}
	if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0); err != nil {
		t.Logf("cannot favour the sandbox: %v", err)
	}
}

func TestKernelLayoutBothDrivers(t *testing.T) {
	for _, d := range []cgroup.Driver{cgroup.DriverCgroupfs, cgroup.DriverSystemd} {
		t.Run(string(d), func(t *testing.T) {
			k := newPod(t, d)
			k.s.Start(k.ctrRel, cgtest.Hog, 8)
			r, err := cgroup.OpenReader(k.ctr)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			deadline := time.Now().Add(30 * time.Second)
			st := sample(t, r)
			for ; st.MemoryUsage < 8<<20 && time.Now().Before(deadline); st = sample(t, r) {
				time.Sleep(20 * time.Millisecond)
			}
			if st.MemoryUsage < 8<<20 || st.CPUUsageNs == 0 || st.WorkingSet == 0 || !st.HasOOMKills || !st.MemoryUnlimited {
				t.Errorf("sample of a container holding 8 MiB: %+v", st)
			}
			if k.s.Dirs[cgtest.V2] != "" && !st.HasPSI {
				t.Errorf("PSI missing although the cgroup2 tree is mounted: %+v", st)
			}
		})
	}
}

func TestKernelQuotaThrottlesAndRaiseInPlace(t *testing.T) {
	k := newPod(t, cgroup.DriverCgroupfs)
	favour(t, k.s)
	w := cgroup.NewWriter(cgroup.WriterOptions{})
	set := func(quotaUs int64) {
		t.Helper()
		q := &cgroup.Quota{QuotaUs: quotaUs, PeriodUs: 100000}
		recs, err := w.Apply(cgroup.Plan{Pod: cgroup.Target{Name: "pod", Dirs: k.pod, Set: cgroup.Resources{Quota: q, Shares: ptr[uint64](65536)}},
			Containers: []cgroup.Target{{Name: "ctr", Dirs: k.ctr, Set: cgroup.Resources{Quota: q, Shares: ptr[uint64](65536)}}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			t.Logf("write %s: %s → %s", r.Path, r.Old, r.New)
		}
	}
	set(20000)
	p := k.s.Start(k.ctrRel, cgtest.Busy, 0)
	r, err := cgroup.OpenReader(k.ctr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	time.Sleep(300 * time.Millisecond)
	low, thr := cpuRate(t, r, 2*time.Second)
	t.Logf("quota 0.2 CPU: %.3f CPU, %d throttled periods", low, thr)
	if low > 0.3 || thr == 0 {
		t.Errorf("busy loop under a 0.2 CPU quota used %.3f CPU with %d throttled periods", low, thr)
	}
	set(80000)
	high, _ := cpuRate(t, r, 2*time.Second)
	t.Logf("quota raised in place to 0.8 CPU: %.3f CPU", high)
	if high < 1.5*low || high > 0.9 {
		t.Errorf("after raising the quota usage went %.3f → %.3f CPU", low, high)
	}
	if exited, _ := p.Wait(0); exited {
		t.Error("the busy loop did not survive the in-place raise")
	}
	if st := sample(t, r); st.HasPSI && st.CPUPressure.Some.TotalUs == 0 {
		t.Errorf("throttled container shows no CPU pressure: %+v", st.CPUPressure)
	}
}

func TestKernelOOMKillCounted(t *testing.T) {
	k := newPod(t, cgroup.DriverCgroupfs)
	lim := int64(48 << 20)
	if _, err := cgroup.NewWriter(cgroup.WriterOptions{}).Apply(cgroup.Plan{Pod: cgroup.Target{Dirs: k.pod},
		Containers: []cgroup.Target{{Dirs: k.ctr, Set: cgroup.Resources{MemoryLimit: &lim}}}}); err != nil {
		t.Fatal(err)
	}
	r, err := cgroup.OpenReader(k.ctr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	before := sample(t, r)
	if before.MemoryUnlimited || before.MemoryLimit != uint64(lim) {
		t.Fatalf("limit not in place: %+v", before)
	}
	p := k.s.Start(k.ctrRel, cgtest.Hog, 200)
	exited, _ := p.Wait(60 * time.Second)
	if !exited || !p.Signaled(syscall.SIGKILL) {
		t.Fatalf("200 MiB hog under a 48 MiB limit: exited=%v", exited)
	}
	after := sample(t, r)
	if !after.HasOOMKills || after.OOMKills < before.OOMKills+1 {
		t.Errorf("OOM kills %d → %d", before.OOMKills, after.OOMKills)
	}
}

func TestKernelRefusesShrinkBelowUsage(t *testing.T) {
	k := newPod(t, cgroup.DriverCgroupfs)
	p := k.s.Start(k.ctrRel, cgtest.Hog, 64)
	r, err := cgroup.OpenReader(k.ctr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	deadline := time.Now().Add(30 * time.Second)
	var st cgroup.Stats
	for st = sample(t, r); st.MemoryUsage < 64<<20 && time.Now().Before(deadline); st = sample(t, r) {
		time.Sleep(50 * time.Millisecond)
	}
	if st.MemoryUsage < 64<<20 {
		t.Fatalf("hog reached only %d bytes", st.MemoryUsage)
	}
	lim := int64(40 << 20)
	recs, err := cgroup.NewWriter(cgroup.WriterOptions{}).Apply(cgroup.Plan{Pod: cgroup.Target{Dirs: k.pod},
		Containers: []cgroup.Target{{Dirs: k.ctr, Set: cgroup.Resources{MemoryLimit: &lim}}}})
	var ref *cgroup.Refusal
	if !errors.Is(err, cgroup.ErrRefused) || !errors.As(err, &ref) || len(recs) != 0 {
		t.Fatalf("Apply below usage: %v, %d writes", err, len(recs))
	}
	t.Log(err)
	if now := sample(t, r); !now.MemoryUnlimited {
		t.Errorf("limit changed to %d", now.MemoryLimit)
	}
	if exited, _ := p.Wait(0); exited {
		t.Error("hog died")
	}
	if !k.s.Unified {
		// What the rule prevents: the naive write gets EBUSY on v1 (v2
		// would OOM-kill instead, so it is not tried there).
		err := os.WriteFile(filepath.Join(k.ctr.Memory, "memory.limit_in_bytes"), []byte("41943040"), 0)
		if !errors.Is(err, syscall.EBUSY) {
			t.Errorf("naive v1 write below usage: %v, want EBUSY", err)
		}
	}
}

// TestKernelRefusesNegativeValues: a memory limit, a quota or shares that
// came from a negative or overflowed amount (issue 19: an OOM bump past
// int64, a +Inf recommendation) is refused on a real cgroup and nothing
// is written; the kernel would have read such a v1 limit as unlimited.
func TestKernelRefusesNegativeValues(t *testing.T) {
	k := newPod(t, cgroup.DriverCgroupfs)
	lim, quota, shares := int64(math.MinInt64), cgroup.KubeletQuota(-5), cgroup.KubeletShares(-5)
	read := func() map[string]string {
		m := map[string]string{}
		for _, f := range []struct{ dir, file string }{{k.ctr.Memory, "memory.limit_in_bytes"}, {k.ctr.Memory, "memory.max"},
			{k.ctr.CPU, "cpu.cfs_quota_us"}, {k.ctr.CPU, "cpu.max"}, {k.ctr.CPU, "cpu.shares"}, {k.ctr.CPU, "cpu.weight"}} {
			if b, err := os.ReadFile(filepath.Join(f.dir, f.file)); err == nil {
				m[f.file] = strings.TrimSpace(string(b))
			}
		}
		return m
	}
	before := read()
	if len(before) < 3 {
		t.Fatalf("read only %v", before)
	}
	for _, set := range []cgroup.Resources{{MemoryLimit: &lim}, {Quota: &quota}, {Shares: &shares}} {
		recs, err := cgroup.NewWriter(cgroup.WriterOptions{}).Apply(cgroup.Plan{Pod: cgroup.Target{Dirs: k.pod},
			Containers: []cgroup.Target{{Dirs: k.ctr, Set: set}}})
		var ref *cgroup.Refusal
		if !errors.Is(err, cgroup.ErrRefused) || !errors.As(err, &ref) || len(recs) != 0 {
			t.Errorf("Apply %+v: %v, %d writes", set, err, len(recs))
		}
		t.Log(err)
	}
	if after := read(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("files changed: %v → %v", before, after)
	}
}

func cpus(s string) *cpuset.CPUSet {
	c, err := cpuset.Parse(s)
	if err != nil {
		panic(err)
	}
	return &c
}

func ptr[T any](v T) *T { return &v }

func rawWrite(dir, file, v string) error { return os.WriteFile(filepath.Join(dir, file), []byte(v), 0) }

func readTrim(t *testing.T, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestKernelOrdering shows, on the real kernel, that the naive orders fail
// and the leveled order succeeds. On v2 the kernel accepts any order (the
// effective values are intersections), so only the leveled apply is
// checked there.
func TestKernelOrdering(t *testing.T) {
	tier.Kernel(t)
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Fatal(err)
	}
	if all, _ := cpuset.Parse(strings.TrimSpace(string(online))); all.Size() < 2 || !all.Contains(0) || !all.Contains(1) {
		t.Skipf("needs CPUs 0 and 1 online, have %s", online)
	}
	type state struct{ pod, ctr string }
	tests := []struct {
		name      string
		from, to  state
		naive     func(k kpod) error // the wrong order, raw writes
		naiveErrs []error
	}{
		{"cpuset moves to another CPU, parent first", state{"0", "0"}, state{"1", "1"},
			func(k kpod) error { return rawWrite(k.pod.CPUSet, "cpuset.cpus", "1") }, []error{syscall.EBUSY}},
		{"cpuset moves to another CPU, child first", state{"0", "0"}, state{"1", "1"},
			func(k kpod) error { return rawWrite(k.ctr.CPUSet, "cpuset.cpus", "1") }, []error{syscall.EACCES}},
		{"cpuset widens, child first", state{"0", "0"}, state{"0-1", "0-1"},
			func(k kpod) error { return rawWrite(k.ctr.CPUSet, "cpuset.cpus", "0-1") }, []error{syscall.EACCES}},
		{"cpuset narrows, parent first", state{"0-1", "0-1"}, state{"1", "1"},
			func(k kpod) error { return rawWrite(k.pod.CPUSet, "cpuset.cpus", "1") }, []error{syscall.EBUSY}},
		{"cpuset swaps within a wider pod", state{"0-1", "0"}, state{"0-1", "1"}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newPod(t, cgroup.DriverCgroupfs)
			w := cgroup.NewWriter(cgroup.WriterOptions{})
			// Set the start state (itself through the leveled writer).
			from := cgroup.Plan{Pod: cgroup.Target{Name: "pod", Dirs: k.pod, Set: cgroup.Resources{CPUs: cpus(tc.from.pod)}},
				Containers: []cgroup.Target{{Name: "ctr", Dirs: k.ctr, Set: cgroup.Resources{CPUs: cpus(tc.from.ctr)}}}}
			if _, err := w.Apply(from); err != nil {
				t.Fatalf("start state: %v", err)
			}
			k.s.Start(k.ctrRel, cgtest.Sleep, 0)
			if tc.naive != nil && !k.s.Unified {
				err := tc.naive(k)
				ok := false
				for _, e := range tc.naiveErrs {
					ok = ok || errors.Is(err, e)
				}
				if !ok {
					t.Fatalf("naive order: %v, want one of %v", err, tc.naiveErrs)
				}
				t.Logf("naive order rejected by the kernel: %v", err)
			}
			to := cgroup.Plan{Pod: cgroup.Target{Name: "pod", Dirs: k.pod, Set: cgroup.Resources{CPUs: cpus(tc.to.pod)}},
				Containers: []cgroup.Target{{Name: "ctr", Dirs: k.ctr, Set: cgroup.Resources{CPUs: cpus(tc.to.ctr)}}}}
			recs, err := w.Apply(to)
			if err != nil {
				t.Fatalf("leveled order: %v", err)
			}
			for _, r := range recs {
				t.Logf("write %s: %s → %s", r.Path, r.Old, r.New)
			}
			if got := readTrim(t, k.pod.CPUSet, "cpuset.cpus"); got != cpus(tc.to.pod).String() {
				t.Errorf("pod cpus %s, want %s", got, tc.to.pod)
			}
			if got := readTrim(t, k.ctr.CPUSet, "cpuset.cpus"); got != cpus(tc.to.ctr).String() {
				t.Errorf("container cpus %s, want %s", got, tc.to.ctr)
			}
		})
	}
	t.Run("quota shrinks below a child's, parent first", func(t *testing.T) {
		k := newPod(t, cgroup.DriverCgroupfs)
		w := cgroup.NewWriter(cgroup.WriterOptions{})
		plan := func(pod, ctr int64) cgroup.Plan {
			return cgroup.Plan{Pod: cgroup.Target{Dirs: k.pod, Set: cgroup.Resources{Quota: &cgroup.Quota{QuotaUs: pod, PeriodUs: 100000}}},
				Containers: []cgroup.Target{{Dirs: k.ctr, Set: cgroup.Resources{Quota: &cgroup.Quota{QuotaUs: ctr, PeriodUs: 100000}}}}}
		}
		if _, err := w.Apply(plan(100000, 80000)); err != nil {
			t.Fatal(err)
		}
		if !k.s.Unified {
			if err := rawWrite(k.pod.CPU, "cpu.cfs_quota_us", "50000"); !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("naive parent-first quota shrink: %v, want EINVAL", err)
			}
			// Also a period change: pod 1 CPU (100ms/100ms) → 0.5 CPU as
			// 25ms/50ms with the child at 0.4 CPU as 20ms/50ms.
		}
		if _, err := w.Apply(plan(50000, 40000)); err != nil {
			t.Fatalf("leveled quota shrink: %v", err)
		}
		recs, err := w.Apply(cgroup.Plan{Pod: cgroup.Target{Dirs: k.pod, Set: cgroup.Resources{Quota: &cgroup.Quota{QuotaUs: 100000, PeriodUs: 50000}}},
			Containers: []cgroup.Target{{Dirs: k.ctr, Set: cgroup.Resources{Quota: &cgroup.Quota{QuotaUs: 10000, PeriodUs: 50000}}}}})
		if err != nil {
			t.Fatalf("leveled period change: %v", err)
		}
		for _, r := range recs {
			t.Logf("write %s: %s → %s", r.Path, r.Old, r.New)
		}
		if !k.s.Unified {
			if got := readTrim(t, k.ctr.CPU, "cpu.cfs_quota_us") + "/" + readTrim(t, k.ctr.CPU, "cpu.cfs_period_us"); got != "10000/50000" {
				t.Errorf("container quota %s", got)
			}
		}
	})
}

// TestKernelQuotaPeriodOrder changes quota and period together on v1,
// where the cgroup passes through (new quota, old period) or (old quota,
// new period): pod 0.5 CPU as 50ms/100ms → 25ms/50ms, container 0.4 CPU as
// 40ms/100ms → 0.45 CPU as 22.5ms/50ms. The pod must change its period
// first (quota first gives it 0.25 < the container's 0.4), the container
// its quota first (period first gives it 0.8 > the pod's 0.5).
func TestKernelQuotaPeriodOrder(t *testing.T) {
	k := newPod(t, cgroup.DriverCgroupfs)
	w := cgroup.NewWriter(cgroup.WriterOptions{})
	plan := func(pq int64, pp uint64, cq int64, cp uint64) cgroup.Plan {
		return cgroup.Plan{Pod: cgroup.Target{Dirs: k.pod, Set: cgroup.Resources{Quota: &cgroup.Quota{QuotaUs: pq, PeriodUs: pp}}},
			Containers: []cgroup.Target{{Dirs: k.ctr, Set: cgroup.Resources{Quota: &cgroup.Quota{QuotaUs: cq, PeriodUs: cp}}}}}
	}
	if _, err := w.Apply(plan(50000, 100000, 40000, 100000)); err != nil {
		t.Fatal(err)
	}
	if !k.s.Unified {
		if err := rawWrite(k.pod.CPU, "cpu.cfs_quota_us", "25000"); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("naive pod quota-first: %v, want EINVAL", err)
		}
		if err := rawWrite(k.ctr.CPU, "cpu.cfs_period_us", "50000"); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("naive container period-first: %v, want EINVAL", err)
		}
	}
	recs, err := w.Apply(plan(25000, 50000, 22500, 50000))
	if err != nil {
		t.Fatalf("leveled: %v", err)
	}
	for _, r := range recs {
		t.Logf("write %s: %s → %s", r.Path, r.Old, r.New)
	}
	if !k.s.Unified {
		for _, c := range []struct {
			dir, want string
		}{{k.pod.CPU, "25000/50000"}, {k.ctr.CPU, "22500/50000"}} {
			if got := readTrim(t, c.dir, "cpu.cfs_quota_us") + "/" + readTrim(t, c.dir, "cpu.cfs_period_us"); got != c.want {
				t.Errorf("%s: %s, want %s", c.dir, got, c.want)
			}
		}
	}
}

// TestKernelUnplannedChildRefused: the sandbox container is not in the
// plan; narrowing the pod's cpuset below it is refused before any write.
func TestKernelUnplannedChildRefused(t *testing.T) {
	k := newPod(t, cgroup.DriverCgroupfs)
	if k.s.Unified {
		t.Skip("v2 does not reject a parent cpuset narrower than a child's; the check is v1-only")
	}
	sandbox := k.s.Mkdir(cgtest.PodPath("cgroupfs", "Burstable", kUID) + "/pause")
	w := cgroup.NewWriter(cgroup.WriterOptions{})
	before := readTrim(t, k.pod.CPUSet, "cpuset.cpus")
	recs, err := w.Apply(cgroup.Plan{Pod: cgroup.Target{Dirs: k.pod, Set: cgroup.Resources{CPUs: cpus("1")}},
		Containers: []cgroup.Target{{Dirs: k.ctr, Set: cgroup.Resources{CPUs: cpus("1")}}}})
	if !errors.Is(err, cgroup.ErrRefused) || len(recs) != 0 || !strings.Contains(err.Error(), "pause") {
		t.Fatalf("Apply = %v with %d writes; want a refusal naming the pause cgroup", err, len(recs))
	}
	if readTrim(t, k.pod.CPUSet, "cpuset.cpus") != before || readTrim(t, sandbox["cpuset"], "cpuset.cpus") != before {
		t.Error("refused plan changed a cpuset")
	}
}

func TestKernelDriftReasserted(t *testing.T) {
	k := newPod(t, cgroup.DriverSystemd)
	w := cgroup.NewWriter(cgroup.WriterOptions{})
	plan := cgroup.Plan{Pod: cgroup.Target{Dirs: k.pod, Set: cgroup.Resources{CPUs: cpus("0-1")}},
		Containers: []cgroup.Target{{Dirs: k.ctr, Set: cgroup.Resources{CPUs: cpus("1"), Shares: ptr[uint64](512)}}}}
	if _, err := w.Apply(plan); err != nil {
		t.Fatal(err)
	}
	// The runtime puts the container back on every CPU.
	if err := rawWrite(k.ctr.CPUSet, "cpuset.cpus", "0-1"); err != nil {
		t.Fatal(err)
	}
	n, _, err := w.Reassert(plan)
	if err != nil || n != 1 || w.Drift() != 1 {
		t.Fatalf("Reassert = %d, %v; drift %d", n, err, w.Drift())
	}
	if got := readTrim(t, k.ctr.CPUSet, "cpuset.cpus"); got != "1" {
		t.Errorf("container cpus %s after reassert", got)
	}
	if n, _, err := w.Reassert(plan); err != nil || n != 0 {
		t.Errorf("second Reassert = %d, %v", n, err)
	}
}

func TestKernelReaderAfterExit(t *testing.T) {
	k := newPod(t, cgroup.DriverCgroupfs)
	r, err := cgroup.OpenReader(k.ctr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The runtime removes the container cgroup; our held fds stay valid
	// handles to a removed kernfs node.
	for _, key := range []string{"cpu", "cpuacct", "cpuset", "memory", cgtest.V2} {
		if _, ok := k.s.Dirs[key]; ok {
			if err := syscall.Rmdir(k.s.Path(key, k.ctrRel)); err != nil && !errors.Is(err, syscall.ENOENT) {
				t.Fatal(err)
			}
		}
	}
	var st cgroup.Stats
	if err := r.Read(&st); !errors.Is(err, cgroup.ErrGone) {
		t.Errorf("Read after rmdir: %v, want ErrGone", err)
	}
	if _, err := cgroup.OpenReader(k.ctr); !errors.Is(err, cgroup.ErrGone) {
		t.Errorf("OpenReader after rmdir: %v, want ErrGone", err)
	}
}
