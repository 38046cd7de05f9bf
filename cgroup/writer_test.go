//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups"
	"k8s.io/utils/cpuset"
)

// fakeCgroupfs lets the library open plain files in a temp dir for the
// duration of one test (its writes then create/truncate plain files).
func fakeCgroupfs(t *testing.T) {
	t.Helper()
	cgroups.TestMode = true
	t.Cleanup(func() { cgroups.TestMode = false })
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func v1Files(cpus, quota, period, limit, usage string) map[string]string {
	return map[string]string{
		"cpuset.cpus": cpus, "cpuset.mems": "0", "cpu.shares": "1024",
		"cpu.cfs_quota_us": quota, "cpu.cfs_period_us": period,
		"memory.limit_in_bytes": limit, "memory.usage_in_bytes": usage,
		"cpuacct.usage": "123", "cpu.stat": strings.TrimSpace(v1CPUStat),
		"memory.stat": strings.TrimSpace(v1MemStat), "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2",
	}
}

// fakeV1Pod lays out a pod with two containers in one directory per cgroup
// (all controllers' files together, which is enough for the writer).
func fakeV1Pod(t *testing.T) (pod, c1, c2 Dirs) {
	root := t.TempDir()
	mk := func(rel string, files map[string]string) Dirs {
		dir := filepath.Join(root, rel)
		writeTree(t, dir, files)
		return Dirs{CPU: dir, CPUAcct: dir, CPUSet: dir, Memory: dir}
	}
	pod = mk("pod", v1Files("0-1", "200000", "100000", "9223372036854771712", "100000000"))
	c1 = mk("pod/c1", v1Files("0", "100000", "100000", "209715200", "50000000"))
	c2 = mk("pod/c2", v1Files("1", "50000", "100000", "209715200", "10000000"))
	return
}

func read(t *testing.T, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func ptr[T any](v T) *T { return &v }

func cs(s string) *cpuset.CPUSet {
	set, err := cpuset.Parse(s)
	if err != nil {
		panic(err)
	}
	return &set
}

func trace(recs []Write) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s/%s:%s→%s", filepath.Base(filepath.Dir(r.Path)), filepath.Base(r.Path), r.Old, r.New)
		if r.Rollback {
			b.WriteString("(rollback)")
		}
		b.WriteString(" ")
	}
	return strings.TrimSpace(b.String())
}

func TestApplyLeveledOrder(t *testing.T) {
	fakeCgroupfs(t)
	tests := []struct {
		name string
		plan func(pod, c1, c2 Dirs) Plan
		want string
	}{
		{"cpuset moves to disjoint CPUs: widen top-down to the union, narrow bottom-up",
			func(pod, c1, c2 Dirs) Plan {
				return Plan{Pod: Target{Dirs: pod, Set: Resources{CPUs: cs("2-3")}},
					Containers: []Target{{Dirs: c1, Set: Resources{CPUs: cs("2")}}, {Dirs: c2, Set: Resources{CPUs: cs("3")}}}}
			},
			"pod/cpuset.cpus:0-1→0-3 c1/cpuset.cpus:0→0,2 c2/cpuset.cpus:1→1,3 c2/cpuset.cpus:1,3→3 c1/cpuset.cpus:0,2→2 pod/cpuset.cpus:0-3→2-3"},
		{"quota shrinks: containers before the pod",
			func(pod, c1, c2 Dirs) Plan {
				return Plan{Pod: Target{Dirs: pod, Set: Resources{Quota: &Quota{100000, 100000}}},
					Containers: []Target{{Dirs: c1, Set: Resources{Quota: &Quota{60000, 100000}}}, {Dirs: c2, Set: Resources{Quota: &Quota{40000, 100000}}}}}
			},
			"c2/cpu.cfs_quota_us:50000→40000 c1/cpu.cfs_quota_us:100000→60000 pod/cpu.cfs_quota_us:200000→100000"},
		{"quota grows: pod before the containers; one container shrinks first",
			func(pod, c1, c2 Dirs) Plan {
				return Plan{Pod: Target{Dirs: pod, Set: Resources{Quota: &Quota{400000, 100000}}},
					Containers: []Target{{Dirs: c1, Set: Resources{Quota: &Quota{300000, 100000}}}, {Dirs: c2, Set: Resources{Quota: &Quota{20000, 100000}}}}}
			},
			"c2/cpu.cfs_quota_us:50000→20000 pod/cpu.cfs_quota_us:200000→400000 c1/cpu.cfs_quota_us:100000→300000"},
		{"memory: shrink bottom-up, grow top-down, equal values skipped",
			func(pod, c1, c2 Dirs) Plan {
				return Plan{Pod: Target{Dirs: pod, Set: Resources{MemoryLimit: ptr[int64](400 << 20)}},
					Containers: []Target{{Dirs: c1, Set: Resources{MemoryLimit: ptr[int64](100 << 20)}}, {Dirs: c2, Set: Resources{MemoryLimit: ptr[int64](200 << 20)}}}}
			},
			"c1/memory.limit_in_bytes:209715200→104857600 pod/memory.limit_in_bytes:-1→419430400"},
		{"shares are written last, without order",
			func(pod, c1, c2 Dirs) Plan {
				return Plan{Pod: Target{Dirs: pod, Set: Resources{Shares: ptr[uint64](2048)}},
					Containers: []Target{{Dirs: c1, Set: Resources{Shares: ptr[uint64](1024)}}, {Dirs: c2, Set: Resources{Shares: ptr[uint64](512)}}}}
			},
			"pod/cpu.shares:1024→2048 c2/cpu.shares:1024→512"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod, c1, c2 := fakeV1Pod(t)
			p := tc.plan(pod, c1, c2)
			recs, err := NewWriter(WriterOptions{}).Apply(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := trace(recs); got != tc.want {
				t.Errorf("writes:\n got %s\nwant %s", got, tc.want)
			}
			// Applying again finds nothing to do.
			if recs, err := NewWriter(WriterOptions{}).Apply(p); err != nil || len(recs) != 0 {
				t.Errorf("second apply wrote %s (%v)", trace(recs), err)
			}
		})
	}
}

func snapshot(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		c, err := os.ReadFile(p)
		fmt.Fprintf(&b, "%s=%s;", p, c)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestApplyRefusesAndWritesNothing(t *testing.T) {
	fakeCgroupfs(t)
	tests := []struct {
		name string
		plan func(pod, c1, c2 Dirs) Plan
		want error
	}{
		{"empty cpuset", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: pod, Set: Resources{CPUs: ptr(cpuset.New())}}}
		}, ErrRefused},
		{"shares below 2", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: pod, Set: Resources{Shares: ptr[uint64](1)}}}
		}, ErrRefused},
		{"shares above 262144", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: pod, Set: Resources{Shares: ptr[uint64](262145)}}}
		}, ErrRefused},
		{"quota below 1ms", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: pod, Set: Resources{Quota: &Quota{999, 100000}}}}
		}, ErrRefused},
		{"period above 1s", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: pod, Set: Resources{Quota: &Quota{1000, 2000000}}}}
		}, ErrRefused},
		{"memory below usage plus margin", func(pod, c1, c2 Dirs) Plan {
			// c1 uses 50,000,000 bytes; 54 MB < 55 MB.
			return Plan{Pod: Target{Dirs: pod}, Containers: []Target{{Dirs: c1, Set: Resources{MemoryLimit: ptr[int64](54_000_000)}}}}
		}, ErrRefused},
		// Issue 19: a limit computed as +Inf or past int64 arrives as
		// MinInt64, which v1 would read as unlimited.
		{"memory limit negative (overflowed)", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: pod}, Containers: []Target{{Dirs: c1, Set: Resources{MemoryLimit: ptr[int64](math.MinInt64)}}}}
		}, ErrRefused},
		{"memory limit -2", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: pod, Set: Resources{MemoryLimit: ptr[int64](-2)}}}
		}, ErrRefused},
		{"quota of a negative CPU limit", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: pod}, Containers: []Target{{Dirs: c1, Set: Resources{Quota: ptr(KubeletQuota(-5))}}}}
		}, ErrRefused},
		{"quota -2", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: pod, Set: Resources{Quota: &Quota{-2, 100000}}}}
		}, ErrRefused},
		{"shares of a negative CPU request", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: pod, Set: Resources{Shares: ptr(KubeletShares(math.MinInt64))}}}
		}, ErrRefused},
		{"memory.high on v1", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: pod, Set: Resources{MemoryHigh: ptr[int64](1 << 30)}}}
		}, ErrRefused},
		{"container CPUs outside the pod's", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: pod, Set: Resources{CPUs: cs("0-1")}},
				Containers: []Target{{Dirs: c1, Set: Resources{CPUs: cs("0-2")}}}}
		}, ErrRefused},
		{"pod narrows below a container left out of the plan", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: pod, Set: Resources{CPUs: cs("0")}},
				Containers: []Target{{Dirs: c1, Set: Resources{CPUs: cs("0")}}}}
		}, ErrRefused},
		{"v1 container quota above the pod's", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: pod, Set: Resources{Quota: &Quota{100000, 100000}}},
				Containers: []Target{{Dirs: c1, Set: Resources{Quota: &Quota{150000, 100000}}}}}
		}, ErrRefused},
		{"non-numeric current value", func(pod, c1, c2 Dirs) Plan {
			writeTree(t, c2.CPU, map[string]string{"cpu.cfs_quota_us": "lots"})
			return Plan{Pod: Target{Dirs: pod}, Containers: []Target{{Dirs: c2, Set: Resources{Quota: &Quota{20000, 100000}}}}}
		}, ErrParse},
		{"container gone", func(pod, c1, c2 Dirs) Plan {
			if err := os.RemoveAll(c2.CPU); err != nil {
				t.Fatal(err)
			}
			return Plan{Pod: Target{Dirs: pod, Set: Resources{Quota: &Quota{100000, 100000}}}, Containers: []Target{{Dirs: c2, Set: Resources{Quota: &Quota{20000, 100000}}}}}
		}, ErrGone},
		{"v2 file missing from an existing cgroup", func(pod, c1, c2 Dirs) Plan {
			return Plan{Pod: Target{Dirs: Dirs{CPU: pod.CPU, CPUSet: pod.CPUSet, Memory: pod.Memory, Unified: true}, Set: Resources{MemoryHigh: ptr[int64](1 << 40)}}}
		}, ErrUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod, c1, c2 := fakeV1Pod(t)
			p := tc.plan(pod, c1, c2)
			before := snapshot(t, filepath.Dir(pod.CPU))
			recs, err := NewWriter(WriterOptions{}).Apply(p)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if len(recs) != 0 || snapshot(t, filepath.Dir(pod.CPU)) != before {
				t.Errorf("refused plan changed files: %s", trace(recs))
			}
			t.Log(err)
		})
	}
}

// TestMemoryMarginNotAFraction: a margin that is no fraction (NaN would
// make every comparison with usage false) is the default one, so the
// usage check stays on.
func TestMemoryMarginNotAFraction(t *testing.T) {
	fakeCgroupfs(t)
	for _, m := range []float64{math.NaN(), math.Inf(1), -0.5} {
		pod, c1, _ := fakeV1Pod(t)
		// c1 uses 50,000,000 bytes; 54 MB < 55 MB.
		_, err := NewWriter(WriterOptions{MemoryMargin: m}).Apply(Plan{Pod: Target{Dirs: pod}, Containers: []Target{{Dirs: c1, Set: Resources{MemoryLimit: ptr[int64](54_000_000)}}}})
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "1 + 0.10") {
			t.Errorf("margin %v: %v, want the default margin's refusal", m, err)
		}
	}
}

// TestKubeletValuesOfNegativeAmounts: a negative CPU amount is never read
// as "no limit" or "no request".
func TestKubeletValuesOfNegativeAmounts(t *testing.T) {
	if q := KubeletQuota(-1); q == KubeletQuota(0) || checkQuota("cpu.cfs_quota_us", q) == nil {
		t.Errorf("KubeletQuota(-1) = %v, accepted as unlimited", q)
	}
	if s := KubeletShares(-1); s == KubeletShares(0) || checkShares("cpu.shares", s) == nil {
		t.Errorf("KubeletShares(-1) = %d, accepted", s)
	}
	if q := KubeletQuota(0); !q.Unlimited() || checkQuota("cpu.cfs_quota_us", q) != nil {
		t.Errorf("KubeletQuota(0) = %v", q)
	}
	if s := KubeletShares(0); s != MinShares {
		t.Errorf("KubeletShares(0) = %d", s)
	}
}

func TestCheckName(t *testing.T) {
	for _, n := range []string{"", ".", "..", "../cpu.shares", "a/b"} {
		if err := writeFile(t.TempDir(), n, "1"); !errors.Is(err, ErrBadName) {
			t.Errorf("writeFile name %q: %v", n, err)
		}
	}
}

func TestApplyDryRunAndAudit(t *testing.T) {
	fakeCgroupfs(t)
	pod, c1, c2 := fakeV1Pod(t)
	before := snapshot(t, filepath.Dir(pod.CPU))
	var audited []Write
	w := NewWriter(WriterOptions{DryRun: true, Audit: func(r Write) { audited = append(audited, r) }})
	p := Plan{Pod: Target{Dirs: pod, Set: Resources{CPUs: cs("1")}},
		Containers: []Target{{Dirs: c1, Set: Resources{CPUs: cs("1")}}, {Dirs: c2, Set: Resources{CPUs: cs("1")}}}}
	recs, err := w.Apply(p)
	if err != nil {
		t.Fatal(err)
	}
	want := "c1/cpuset.cpus:0→0-1 c1/cpuset.cpus:0-1→1 pod/cpuset.cpus:0-1→1"
	if trace(recs) != want || trace(audited) != want {
		t.Errorf("dry run recorded\n %s\n %s\nwant %s", trace(recs), trace(audited), want)
	}
	for _, r := range recs {
		if !r.DryRun || r.Time.IsZero() {
			t.Errorf("record %+v not marked dry-run or not stamped", r)
		}
	}
	if snapshot(t, filepath.Dir(pod.CPU)) != before {
		t.Error("dry run wrote files")
	}
}

func TestReassertCountsDrift(t *testing.T) {
	fakeCgroupfs(t)
	pod, c1, _ := fakeV1Pod(t)
	p := Plan{Pod: Target{Dirs: pod, Set: Resources{Quota: &Quota{150000, 100000}}},
		Containers: []Target{{Dirs: c1, Set: Resources{CPUs: cs("0"), Quota: &Quota{80000, 100000}}}}}
	w := NewWriter(WriterOptions{})
	if _, err := w.Apply(p); err != nil {
		t.Fatal(err)
	}
	if n, recs, err := w.Reassert(p); err != nil || n != 0 {
		t.Fatalf("no drift expected: %d %s %v", n, trace(recs), err)
	}
	// The runtime rewrites the container's quota and cpuset.
	writeTree(t, c1.CPU, map[string]string{"cpu.cfs_quota_us": "-1", "cpuset.cpus": "0-1"})
	n, recs, err := w.Reassert(p)
	if err != nil || n != 2 {
		t.Fatalf("drift = %d (%s), %v; want 2", n, trace(recs), err)
	}
	if read(t, c1.CPU, "cpu.cfs_quota_us") != "80000" || read(t, c1.CPU, "cpuset.cpus") != "0" || w.Drift() != 2 {
		t.Errorf("not re-asserted: quota %s cpus %s drift %d", read(t, c1.CPU, "cpu.cfs_quota_us"), read(t, c1.CPU, "cpuset.cpus"), w.Drift())
	}
}

func TestApplyRollsBackOnWriteFailure(t *testing.T) {
	fakeCgroupfs(t)
	pod, c1, c2 := fakeV1Pod(t)
	before := snapshot(t, filepath.Dir(pod.CPU))
	// After the first write succeeds, c2's limit file turns into a directory,
	// so its write fails with EISDIR half-way through the plan.
	sabotaged := false
	w := NewWriter(WriterOptions{Audit: func(Write) {
		if !sabotaged {
			sabotaged = true
			f := filepath.Join(c2.Memory, "memory.limit_in_bytes")
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(f, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}})
	p := Plan{Pod: Target{Dirs: pod, Set: Resources{CPUs: cs("0-3")}},
		Containers: []Target{{Dirs: c1, Set: Resources{CPUs: cs("0-3")}}, {Dirs: c2, Set: Resources{MemoryLimit: ptr[int64](300 << 20)}}}}
	recs, err := w.Apply(p)
	if !errors.Is(err, ErrWrite) {
		t.Fatalf("err = %v, want ErrWrite", err)
	}
	var fe *FileError
	if !errors.As(err, &fe) || fe.Value != "314572800" || !strings.HasSuffix(fe.Path, "c2/memory.limit_in_bytes") {
		t.Errorf("error does not name file and value: %v", err)
	}
	want := "pod/cpuset.cpus:0-1→0-3 c1/cpuset.cpus:0→0-3 c1/cpuset.cpus:→0(rollback) pod/cpuset.cpus:→0-1(rollback)"
	if trace(recs) != want {
		t.Errorf("writes:\n got %s\nwant %s", trace(recs), want)
	}
	after := snapshot(t, filepath.Dir(pod.CPU))
	// Everything but the sabotaged file is as before (contents are
	// compared without the trailing newline our fixture added).
	norm := func(s string) string { return strings.ReplaceAll(s, "\n", "") }
	beforeNoC2 := strings.ReplaceAll(norm(before), filepath.Join(c2.Memory, "memory.limit_in_bytes")+"=209715200;", "")
	if norm(after) != beforeNoC2 {
		t.Errorf("rollback incomplete:\nbefore %s\nafter  %s", beforeNoC2, norm(after))
	}
}

// TestApplyV1MemswFollowsLimit: where v1 accounts swap and the runtime set
// memory+swap equal to the limit (no swap), the writer moves memsw with the
// limit in the order the kernel accepts (limit <= memsw at every write);
// an unlimited memsw is left alone; a limited one that does not follow is
// a refusal when the new limit would exceed it, and nothing is written.
func TestApplyV1MemswFollowsLimit(t *testing.T) {
	fakeCgroupfs(t)
	pod, c1, c2 := fakeV1Pod(t)
	writeTree(t, pod.Memory, map[string]string{"memory.memsw.limit_in_bytes": "9223372036854771712"})
	writeTree(t, c1.Memory, map[string]string{"memory.memsw.limit_in_bytes": "209715200"})
	writeTree(t, c2.Memory, map[string]string{"memory.memsw.limit_in_bytes": "9223372036854771712"})
	w := NewWriter(WriterOptions{})
	plan := func(podLim, c1Lim, c2Lim int64) Plan {
		return Plan{Pod: Target{Dirs: pod, Set: Resources{MemoryLimit: ptr(podLim)}},
			Containers: []Target{{Dirs: c1, Set: Resources{MemoryLimit: ptr(c1Lim)}}, {Dirs: c2, Set: Resources{MemoryLimit: ptr(c2Lim)}}}}
	}
	recs, err := w.Apply(plan(600<<20, 300<<20, 250<<20))
	if err != nil {
		t.Fatal(err)
	}
	want := "pod/memory.limit_in_bytes:-1→629145600 c1/memory.memsw.limit_in_bytes:209715200→314572800 c1/memory.limit_in_bytes:209715200→314572800 c2/memory.limit_in_bytes:209715200→262144000"
	if got := trace(recs); got != want {
		t.Errorf("grow:\n got %s\nwant %s", got, want)
	}
	recs, err = w.Apply(plan(600<<20, 100<<20, 250<<20))
	if err != nil {
		t.Fatal(err)
	}
	want = "c1/memory.limit_in_bytes:314572800→104857600 c1/memory.memsw.limit_in_bytes:314572800→104857600"
	if got := trace(recs); got != want {
		t.Errorf("shrink:\n got %s\nwant %s", got, want)
	}
	// memsw limited but not following the limit: above it is refused.
	writeTree(t, c2.Memory, map[string]string{"memory.memsw.limit_in_bytes": "283115520"})
	_, err = w.Apply(plan(600<<20, 100<<20, 300<<20))
	var ref *Refusal
	if !errors.As(err, &ref) || !strings.Contains(ref.Reason, "memory.memsw.limit_in_bytes") {
		t.Fatalf("limit above an independent memsw: %v, want a Refusal naming memsw", err)
	}
	if got := read(t, c2.Memory, "memory.limit_in_bytes"); got != "262144000" {
		t.Errorf("a refused plan wrote c2's limit: %s", got)
	}
}

func TestApplyUnifiedMemoryOrder(t *testing.T) {
	fakeCgroupfs(t)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"memory.max": "max", "memory.high": "max", "memory.current": "1000000", "cpu.max": "max 100000", "cpu.weight": "100"})
	d := Dirs{Unified: true, CPU: dir, CPUAcct: dir, CPUSet: dir, Memory: dir}
	w := NewWriter(WriterOptions{Weight: WeightLinear})
	recs, err := w.Apply(Plan{Pod: Target{Dirs: d, Set: Resources{MemoryLimit: ptr[int64](100 << 20), MemoryHigh: ptr[int64](80 << 20), Quota: &Quota{50000, 100000}, Shares: ptr[uint64](1024)}}})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s/cpu.max:max 100000→50000 100000 %[1]s/memory.high:max→83886080 %[1]s/memory.max:max→104857600 %[1]s/cpu.weight:100→39", filepath.Base(dir))
	if trace(recs) != want {
		t.Errorf("shrink:\n got %s\nwant %s", trace(recs), want)
	}
	recs, err = w.Apply(Plan{Pod: Target{Dirs: d, Set: Resources{MemoryLimit: ptr[int64](-1), MemoryHigh: ptr[int64](-1)}}})
	if err != nil {
		t.Fatal(err)
	}
	want = fmt.Sprintf("%s/memory.max:104857600→max %[1]s/memory.high:83886080→max", filepath.Base(dir))
	if trace(recs) != want {
		t.Errorf("grow:\n got %s\nwant %s", trace(recs), want)
	}
}

func TestOutsideCgroupfsIsRefused(t *testing.T) {
	// Without test mode the library checks the filesystem type.
	dir := t.TempDir()
	writeTree(t, dir, v1Files("0", "-1", "100000", "9223372036854771712", "1"))
	d := Dirs{CPU: dir, CPUAcct: dir, CPUSet: dir, Memory: dir}
	_, err := NewWriter(WriterOptions{}).Apply(Plan{Pod: Target{Dirs: d, Set: Resources{Shares: ptr[uint64](512)}}})
	if !errors.Is(err, ErrNotCgroupfs) {
		t.Errorf("Apply on tmpfs: %v, want ErrNotCgroupfs", err)
	}
	if got := read(t, dir, "cpu.shares"); got != "1024" {
		t.Errorf("cpu.shares changed to %s", got)
	}
	if _, err := OpenReader(d); !errors.Is(err, ErrNotCgroupfs) {
		t.Errorf("OpenReader on tmpfs: %v, want ErrNotCgroupfs", err)
	}
}

func TestReaderOnFakeTree(t *testing.T) {
	fakeCgroupfs(t)
	dir := t.TempDir()
	writeTree(t, dir, v1Files("0", "-1", "100000", "9223372036854771712", "100000"))
	psiDir := t.TempDir()
	writeTree(t, psiDir, map[string]string{"cpu.pressure": psiFull, "memory.pressure": psiFull, "io.pressure": psiFull})
	d := Dirs{CPU: dir, CPUAcct: dir, CPUSet: dir, Memory: dir, PSI: psiDir}
	r, err := OpenReader(d)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var s Stats
	if err := r.Read(&s); err != nil {
		t.Fatal(err)
	}
	if s.CPUUsageNs != 123 || s.ThrottledPeriods != 2 || s.MemoryUsage != 100000 || s.InactiveFile != 8192 ||
		s.WorkingSet != 100000-8192 || !s.MemoryUnlimited || s.OOMKills != 2 || !s.HasOOMKills || !s.HasPSI || s.MemoryPressure.Some.Avg10 != 1234 {
		t.Errorf("stats %+v", s)
	}
	if a := testing.AllocsPerRun(100, func() { _ = r.Read(&s) }); a != 0 {
		t.Errorf("Read allocates %.1f times per sample", a)
	}
	// Corrupt contents: typed parse error naming the file.
	writeTree(t, dir, map[string]string{"memory.usage_in_bytes": "12k"})
	if err := r.Read(&s); !errors.Is(err, ErrParse) || !strings.Contains(err.Error(), "memory.usage_in_bytes") {
		t.Errorf("corrupt usage: %v", err)
	}
	// Optional files missing: no PSI, no OOM counter, still a sample.
	os.Remove(filepath.Join(psiDir, "io.pressure"))
	os.Remove(filepath.Join(dir, "memory.oom_control"))
	writeTree(t, dir, map[string]string{"memory.usage_in_bytes": "5"})
	r2, err := OpenReader(d)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if err := r2.Read(&s); err != nil || s.HasPSI || s.HasOOMKills || s.WorkingSet != 0 {
		t.Errorf("optional files: %+v, %v", s, err)
	}
	// Required file missing from an existing cgroup: unsupported.
	os.Remove(filepath.Join(dir, "cpu.stat"))
	if _, err := OpenReader(d); !errors.Is(err, ErrUnsupported) {
		t.Errorf("missing cpu.stat: %v, want ErrUnsupported", err)
	}
	// The whole cgroup missing: the container is gone.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReader(d); !errors.Is(err, ErrGone) {
		t.Errorf("removed cgroup: %v, want ErrGone", err)
	}
}

// On v2 a pod's cgroup gets the kubelet's shares→weight conversion (linear,
// Kubernetes 1.36), its containers' the runtime's (quadratic for runc ≥
// 1.3.2): what the kubelet and runc 1.5.2 write in the v2 node tier
// (TestNodeOnCgroupV2: weight 4 on the pod, 17 on the container for 100m).
func TestApplyUnifiedWeightPerLevel(t *testing.T) {
	fakeCgroupfs(t)
	pod := t.TempDir()
	ctr := filepath.Join(pod, "c1")
	files := map[string]string{"cpu.max": "max 100000", "cpu.weight": "100"}
	writeTree(t, pod, files)
	writeTree(t, ctr, files)
	dirs := func(d string) Dirs { return Dirs{Unified: true, CPU: d, CPUAcct: d, CPUSet: d, Memory: d} }
	w := NewWriter(WriterOptions{Weight: WeightQuadratic})
	if _, err := w.Apply(Plan{
		Pod:        Target{Dirs: dirs(pod), Set: Resources{Shares: ptr[uint64](102)}},
		Containers: []Target{{Dirs: dirs(ctr), Set: Resources{Shares: ptr[uint64](102)}}},
	}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, pod, "cpu.weight"); got != "4" {
		t.Errorf("pod cpu.weight = %s, want 4 (the kubelet's linear conversion of 102 shares)", got)
	}
	if got := read(t, ctr, "cpu.weight"); got != "17" {
		t.Errorf("container cpu.weight = %s, want 17 (runc's quadratic conversion of 102 shares)", got)
	}
}
