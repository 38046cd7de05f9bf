//go:build linux

package cgroup_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cdv1 "github.com/containerd/cgroups/v3/cgroup1"
	cdv2 "github.com/containerd/cgroups/v3/cgroup2"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"golang.org/x/sys/unix"

	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/test/cgtest"
)

// benchPod is a container cgroup with a 20 MiB process in it, so that
// memory.stat and the PSI files have real contents.
func benchPod(b *testing.B) kpod {
	b.Helper()
	k := newPodTB(b)
	k.s.Start(k.ctrRel, cgtest.Hog, 20)
	r, err := cgroup.OpenReader(k.ctr)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var st cgroup.Stats
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := r.Read(&st); err != nil {
			b.Fatal(err)
		}
		if st.MemoryUsage >= 20<<20 {
			break
		}
	}
	return k
}

// readerFiles lists the files Reader reads for one container, in the same
// order, for the baselines.
func readerFiles(d cgroup.Dirs) []string {
	var fs []string
	if d.Unified {
		fs = []string{"cpu.stat", "memory.current", "memory.max", "memory.stat", "memory.events"}
		for i := range fs {
			fs[i] = filepath.Join(d.CPU, fs[i])
		}
	} else {
		fs = []string{filepath.Join(d.CPU, "cpu.stat"), filepath.Join(d.CPUAcct, "cpuacct.usage"),
			filepath.Join(d.Memory, "memory.usage_in_bytes"), filepath.Join(d.Memory, "memory.limit_in_bytes"),
			filepath.Join(d.Memory, "memory.stat"), filepath.Join(d.Memory, "memory.oom_control")}
	}
	if d.PSI != "" {
		for _, f := range []string{"cpu.pressure", "memory.pressure", "io.pressure"} {
			fs = append(fs, filepath.Join(d.PSI, f))
		}
	}
	return fs
}

// BenchmarkRead is the cost of one sample of one container: CPU, memory
// and pressure. "pread-floor" is the same files through held fds without
// parsing; the goal is reader ≤ 2 × pread-floor.
func BenchmarkRead(b *testing.B) {
	k := benchPod(b)
	files := readerFiles(k.ctr)
	b.Logf("%d files per sample (mode unified=%v, psi=%v)", len(files), k.ctr.Unified, k.ctr.PSI != "")

	b.Run("reader", func(b *testing.B) {
		r, err := cgroup.OpenReader(k.ctr)
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		var st cgroup.Stats
		b.ReportAllocs()
		for b.Loop() {
			if err := r.Read(&st); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pread-floor", func(b *testing.B) {
		fds := make([]int, len(files))
		for i, f := range files {
			fd, err := unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			fds[i] = fd
			defer unix.Close(fd)
		}
		buf := make([]byte, 16<<10)
		b.ReportAllocs()
		for b.Loop() {
			for _, fd := range fds {
				if _, err := unix.Pread(fd, buf, 0); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("os.ReadFile", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, f := range files {
				if _, err := os.ReadFile(f); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("opencontainers-Stats", func(b *testing.B) {
		paths := map[string]string{"": k.ctr.CPU}
		if !k.ctr.Unified {
			paths = map[string]string{"cpu": k.ctr.CPU, "cpuacct": k.ctr.CPUAcct, "memory": k.ctr.Memory}
		}
		m, err := manager.NewWithPaths(&cgroups.Cgroup{Resources: &cgroups.Resources{SkipDevices: true}}, paths)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.Stats(&cgroups.StatsOptions{Controllers: cgroups.CPU | cgroups.Memory}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("containerd-Stat", func(b *testing.B) {
		if k.ctr.Unified {
			rel := strings.TrimPrefix(k.ctr.CPU, k.s.Mounts[cgtest.V2])
			m, err := cdv2.Load(rel, cdv2.WithMountpoint(k.s.Mounts[cgtest.V2]))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Stat(); err != nil {
					b.Fatal(err)
				}
			}
			return
		}
		// containerd's controllers take the directory holding the
		// hierarchies and append their own name.
		root := filepath.Dir(k.s.Mounts["cpu"])
		for _, c := range []string{"cpu", "cpuacct", "memory"} {
			if k.s.Mounts[c] != filepath.Join(root, c) {
				b.Skipf("containerd cgroup1 needs <root>/%s, have %s", c, k.s.Mounts[c])
			}
		}
		subs := func() ([]cdv1.Subsystem, error) {
			return []cdv1.Subsystem{cdv1.NewCpu(root), cdv1.NewCpuacct(root), cdv1.NewMemory(root)}, nil
		}
		path := func(n cdv1.Name) (string, error) {
			dir := map[cdv1.Name]string{cdv1.Cpu: k.ctr.CPU, cdv1.Cpuacct: k.ctr.CPUAcct, cdv1.Memory: k.ctr.Memory}[n]
			return strings.TrimPrefix(dir, k.s.Mounts[string(n)]), nil
		}
		cg, err := cdv1.Load(path, cdv1.WithHierarchy(subs))
		if err != nil {
			b.Fatal(err)
		}
		if n := len(cg.Subsystems()); n != 3 {
			b.Fatalf("containerd loaded %d of 3 hierarchies", n)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := cg.Stat(cdv1.IgnoreNotExist); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWrite is the cost of changing one container's CFS quota:
// through the Writer (which reads the current values, checks and writes)
// against a single opencontainers WriteFile and os.WriteFile.
func BenchmarkWrite(b *testing.B) {
	k := newPodTB(b)
	file := "cpu.cfs_quota_us"
	val := func(i int) string { return strconv.Itoa(50000 + i%2*10000) }
	if k.ctr.Unified {
		file = "cpu.max"
		val = func(i int) string { return strconv.Itoa(50000+i%2*10000) + " 100000" }
	}
	b.Run("writer-quota", func(b *testing.B) {
		w := cgroup.NewWriter(cgroup.WriterOptions{})
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			q := &cgroup.Quota{QuotaUs: int64(50000 + i%2*10000), PeriodUs: 100000}
			i++
			if _, err := w.Apply(cgroup.Plan{Pod: cgroup.Target{Dirs: k.pod}, Containers: []cgroup.Target{{Dirs: k.ctr, Set: cgroup.Resources{Quota: q}}}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cgroups.WriteFile", func(b *testing.B) {
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			if err := cgroups.WriteFile(k.ctr.CPU, file, val(i)); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("os.WriteFile", func(b *testing.B) {
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			if err := os.WriteFile(filepath.Join(k.ctr.CPU, file), []byte(val(i)), 0); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	// A shared pod's refresh: pod and container widened to every CPU and
	// narrowed back, beside an unplanned sandbox child (the pause
	// container), which the writer lists and reads only when it narrows.
	b.Run("writer-cpuset-widen-narrow+sandbox", func(b *testing.B) {
		if k.pod.Unified {
			b.Skip("v1: the unplanned-child check is v1-only")
		}
		raw, err := os.ReadFile(filepath.Join(k.pod.CPUSet, "cpuset.cpus"))
		if err != nil {
			b.Fatal(err)
		}
		all := strings.TrimSpace(string(raw))
		sandbox := filepath.Join(k.pod.CPUSet, "pause")
		if err := os.Mkdir(sandbox, 0o755); err != nil {
			b.Fatal(err)
		}
		defer os.Remove(sandbox)
		w := cgroup.NewWriter(cgroup.WriterOptions{})
		first := cpus(strings.Split(strings.Split(all, ",")[0], "-")[0])
		i := 0
		for b.Loop() {
			c := first
			if i%2 == 1 {
				c = cpus(all)
			}
			i++
			if _, err := w.Apply(cgroup.Plan{Pod: cgroup.Target{Dirs: k.pod, Set: cgroup.Resources{CPUs: c}},
				Containers: []cgroup.Target{{Dirs: k.ctr, Set: cgroup.Resources{CPUs: c}}}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("writer-cpuset-move-pod+container", func(b *testing.B) {
		w := cgroup.NewWriter(cgroup.WriterOptions{})
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			c := cpus(strconv.Itoa(i % 2))
			i++
			if _, err := w.Apply(cgroup.Plan{Pod: cgroup.Target{Dirs: k.pod, Set: cgroup.Resources{CPUs: c}},
				Containers: []cgroup.Target{{Dirs: k.ctr, Set: cgroup.Resources{CPUs: c}}}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
