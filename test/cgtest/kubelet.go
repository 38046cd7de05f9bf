//go:build linux

package cgtest

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/cgroup"
)

// KubeletTree is a kubelet-style kubepods tree (cgroupfs or systemd
// naming) inside a sandbox of the cpu, cpuacct, cpuset and memory
// hierarchies (one v2 tree on unified hosts), where a test
// plays the kubelet: it makes pod and container cgroups with real busy
// processes in them, and reads back what an agent under test wrote.
type KubeletTree struct {
	t      testing.TB
	SB     *Sandbox
	Driver string // "cgroupfs" or "systemd"
	// Kubepods is the kubepods cgroup as a path from the cpu and cpuset
	// hierarchies' roots (what an agent reading the host's mountinfo is
	// given as cgroupParent). The sandbox may sit elsewhere in the memory
	// and cpuacct hierarchies (a test process's memory cgroup often
	// differs): code that needs them gets per-hierarchy Points instead.
	Kubepods string
	// KubepodsName is the kubepods cgroup's name inside the sandbox
	// ("kubepods" or "kubepods.slice"): the path from each hierarchy root
	// when the roots are taken to be Points.
	KubepodsName string
	// CPUs are the CPUs the sandbox may use: an agent managing exactly
	// these writes only legal subsets.
	CPUs cpuset.CPUSet
	// CPUKey, CPUSetKey and MemoryKey are the sandbox keys of the cpu,
	// cpuset and memory hierarchies: the v1 controller names, or V2.
	CPUKey, CPUSetKey, MemoryKey string
}

// NewKubeletTree makes the kubepods and QoS cgroups. It skips a test that
// the host cannot give one path in both hierarchies, or fewer than 2 CPUs.
func NewKubeletTree(t testing.TB, driver string) *KubeletTree {
	t.Helper()
	sb := New(t, "cpu", "cpuacct", "cpuset", "memory")
	cpuKey, cpusetKey := "cpu", "cpuset"
	if sb.Unified {
		cpuKey, cpusetKey = V2, V2
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
	// A fresh v2 cpuset.cpus is empty (inherit): what the sandbox may use
	// is cpuset.cpus.effective.
	file := "cpuset.cpus"
	if sb.Unified {
		file = "cpuset.cpus.effective"
	}
	cpus := ReadCPUs(t, filepath.Join(sb.Dirs[cpusetKey], file))
	if cpus.Size() < 2 {
		t.Skip("kernel tier: needs at least 2 CPUs to split exclusive and shared")
	}
	memKey := "memory"
	if sb.Unified {
		memKey = V2
	}
	return &KubeletTree{t: t, SB: sb, Driver: driver, Kubepods: path.Join(rel, kubepods), KubepodsName: kubepods, CPUs: cpus, CPUKey: cpuKey, CPUSetKey: cpusetKey, MemoryKey: memKey}
}

// Pod creates a pod cgroup with one busy process per container, and a CFS
// quota of half a CPU on each container (the kubelet's limit).
func (k *KubeletTree) Pod(uid, qos string, containers ...string) (podRel string, pids []int) {
	k.t.Helper()
	podRel, ctrs := k.SB.MkdirPod(k.Driver, qos, uid, containers...)
	file, value := "cpu.cfs_quota_us", "50000"
	if k.SB.Unified {
		file, value = "cpu.max", "50000 100000"
	}
	for _, c := range ctrs {
		if err := os.WriteFile(filepath.Join(k.SB.Path(k.CPUKey, c), file), []byte(value), 0); err != nil {
			k.t.Fatal(err)
		}
		pids = append(pids, k.SB.Start(c, Busy, 0).Pid)
	}
	return podRel, pids
}

// Points are the sandbox directories per hierarchy (v1 controller names,
// V2): taken as mount points, they make "/"+KubepodsName the kubepods path
// in every hierarchy.
func (k *KubeletTree) Points() map[string]string { return k.SB.Dirs }

// Rel is the path from the hierarchy root of rel, a path in the sandbox.
func (k *KubeletTree) Rel(rel string) string {
	return path.Join(strings.TrimPrefix(k.SB.Dirs[k.CPUSetKey], k.SB.Mounts[k.CPUSetKey]), rel)
}

// ReadCPUs reads a CPU list file.
func ReadCPUs(t testing.TB, file string) cpuset.CPUSet {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	set, err := cpuset.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return set
}

// CPUSet is rel's cpuset.cpus. On v2 that is only a request: the kernel
// grants its intersection with the parent's effective set, so the granted
// cpuset.cpus.effective must be the same set (else the test fails).
func (k *KubeletTree) CPUSet(rel string) string {
	k.t.Helper()
	dir := k.SB.Path(k.CPUSetKey, rel)
	set := ReadCPUs(k.t, filepath.Join(dir, "cpuset.cpus"))
	if k.SB.Unified {
		if eff := ReadCPUs(k.t, filepath.Join(dir, "cpuset.cpus.effective")); !eff.Equals(set) {
			k.t.Fatalf("%s: cpuset.cpus %s but cpuset.cpus.effective %s", rel, set, eff)
		}
	}
	return set.String()
}

// Quota is rel's CFS quota in v1 form (cpu.cfs_quota_us, -1 = unlimited).
// On v2 it comes from cpu.max ("max 100000" is -1), whose period must be
// the kubelet's 100 ms.
func (k *KubeletTree) Quota(rel string) string {
	k.t.Helper()
	file := "cpu.cfs_quota_us"
	if k.SB.Unified {
		file = "cpu.max"
	}
	b, err := os.ReadFile(filepath.Join(k.SB.Path(k.CPUKey, rel), file))
	if err != nil {
		k.t.Fatal(err)
	}
	v := strings.TrimSpace(string(b))
	if !k.SB.Unified {
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

// Allowed is what the scheduler lets the process run on: the proof that
// a cgroup write took effect on the task, not only in the file.
func Allowed(t testing.TB, pid int) string {
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

// AsRoots presents the sandbox's directories as the hierarchy roots, so
// that code resolving kubelet-style trees finds them inside the sandbox
// exactly as on a node, whichever cgroup the test process sits in per
// hierarchy (its memory cgroup often differs from its cpu cgroup).
func (s *Sandbox) AsRoots() cgroup.Mounts {
	if s.Unified {
		return cgroup.Mounts{Mode: cgroup.ModeUnified, Unified: cgroup.Mount{Point: s.Dirs[V2], Root: "/"}}
	}
	m := cgroup.Mounts{Mode: cgroup.ModeV1, V1: map[string]cgroup.Mount{}}
	for _, c := range []string{"cpu", "cpuacct", "cpuset", "memory"} {
		if d, ok := s.Dirs[c]; ok {
			m.V1[c] = cgroup.Mount{Point: d, Root: "/"}
		}
	}
	if d, ok := s.Dirs[V2]; ok {
		m.Mode, m.Unified = cgroup.ModeHybrid, cgroup.Mount{Point: d, Root: "/"}
	}
	return m
}

// ProcRoot makes a procfs root for an agent process run by the test: the
// host's /proc entries by symlink, except self/mountinfo, which names the
// sandbox's directories as the hierarchy roots (AsRoots). An agent given
// it (--path.procfs) resolves kubepods inside the sandbox in every
// hierarchy, as it would on a node; its own /proc/<pid> stays the real one.
func (s *Sandbox) ProcRoot() string {
	s.t.Helper()
	dir := s.t.TempDir()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		s.t.Fatal(err)
	}
	for _, e := range ents {
		n := e.Name()
		if n == "self" || n == "thread-self" || n[0] >= '0' && n[0] <= '9' {
			continue
		}
		if err := os.Symlink(filepath.Join("/proc", n), filepath.Join(dir, n)); err != nil {
			s.t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "self"), 0o755); err != nil {
		s.t.Fatal(err)
	}
	var b strings.Builder
	m := s.AsRoots()
	id := 100
	line := func(point, fstype, opts string) {
		id++
		fmt.Fprintf(&b, "%d 1 0:%d / %s rw,nosuid,nodev,noexec - %s %s %s\n", id, id, point, fstype, fstype, opts)
	}
	for _, c := range []string{"cpu", "cpuacct", "cpuset", "memory"} {
		if mt, ok := m.V1[c]; ok {
			line(mt.Point, "cgroup", "rw,"+c)
		}
	}
	if m.Unified.Point != "" {
		line(m.Unified.Point, "cgroup2", "rw")
	}
	if err := os.WriteFile(filepath.Join(dir, "self", "mountinfo"), []byte(b.String()), 0o644); err != nil {
		s.t.Fatal(err)
	}
	return dir
}
