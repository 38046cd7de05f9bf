//go:build linux

package cgroup_test

import (
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/internal/loop"
	"github.com/cgpilot/cgpilot/test/cgtest"
	"github.com/cgpilot/cgpilot/test/tier"
)

// Kernel tier for kubepods.go and watch.go: a kubelet-style tree of real
// cgroups (cgtest.KubeletTree).

func openKubepods(t *testing.T, driver string) (*cgtest.KubeletTree, *cgroup.Kubepods) {
	tier.Kernel(t)
	k := cgtest.NewKubeletTree(t, driver)
	kp, err := cgroup.OpenKubepods(k.SB.AsRoots(), cgroup.KubepodsConfig{Root: "/sys/fs/cgroup", Layout: cgroup.LayoutConfig{KubepodsPath: "/" + k.KubepodsName}})
	if err != nil {
		t.Fatal(err)
	}
	return k, kp
}

// TestKernelApplyPodRetriesOnRace: a container that appeared (unplanned
// child) or vanished (gone) between listing and writing makes the writer
// refuse and roll back; ApplyPod lists again and succeeds.
func TestKernelApplyPodRetriesOnRace(t *testing.T) {
	k, kp := openKubepods(t, "cgroupfs")
	all := k.CPUs
	one := cpuset.New(all.List()[1])
	rel, pids := k.Pod("race", "Burstable", "a", "b")
	podPath := path.Join("/", k.KubepodsName, "burstable", "podrace")
	for _, tc := range []struct {
		name       string
		containers []string
		want       string
	}{
		{"unplanned child", []string{podPath + "/a"}, one.String()},
		{"vanished child", []string{podPath + "/a", podPath + "/b", podPath + "/gone"}, all.String()},
	} {
		want, _ := cpuset.Parse(tc.want)
		written, err := kp.ApplyPod(cgroup.PodCPUs{UID: "race", Path: podPath, Containers: tc.containers, CPUs: want})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, w := range written {
			if w.Cgroup != podPath && !strings.HasPrefix(w.Cgroup, podPath+"/") {
				t.Fatalf("%s: write %s reported for cgroup %s outside the pod", tc.name, w.File, w.Cgroup)
			}
		}
		for _, c := range []string{"", "/a", "/b"} {
			if k.SB.Unified && tc.name == "unplanned child" && c == "/b" {
				// v2 bounds a child by its parent's effective set instead of
				// refusing the narrowing, so the writer has no reason to
				// refuse and ApplyPod none to list again: b keeps its own
				// empty request and is granted exactly the pod's CPUs.
				if got := cgtest.ReadCPUs(t, filepath.Join(k.SB.Path(k.CPUSetKey, rel+c), "cpuset.cpus.effective")); got.String() != tc.want {
					t.Fatalf("%s: %s%s cpuset.cpus.effective = %s, want %s", tc.name, rel, c, got, tc.want)
				}
				continue
			}
			if got := k.CPUSet(rel + c); got != tc.want {
				t.Fatalf("%s: %s%s = %s, want %s", tc.name, rel, c, got, tc.want)
			}
		}
		for _, pid := range pids {
			if got := cgtest.Allowed(t, pid); got != tc.want {
				t.Fatalf("%s: pid %d may run on %s, want %s", tc.name, pid, got, tc.want)
			}
		}
	}
}

// TestKernelWatch: inotify on the tree reports a new pod, a container
// created later (queued as late) and a removed container.
func TestKernelWatch(t *testing.T) {
	for _, driver := range []string{"cgroupfs", "systemd"} {
		t.Run(driver, func(t *testing.T) {
			k, kp := openKubepods(t, driver)
			podRel, _ := k.SB.MkdirPod(driver, "Burstable", "u-late")
			events := make(chan cgroup.WatchEvent, 16)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if _, err := kp.Watch(ctx, func(ev cgroup.WatchEvent) { events <- ev }, func(err error) { t.Errorf("watch: %v", err) }); err != nil {
				t.Fatal(err)
			}
			next := func(want cgroup.WatchKind, uid string) cgroup.WatchEvent {
				t.Helper()
				for {
					select {
					case ev := <-events:
						if ev.Kind == cgroup.FileWritten {
							continue // v1 copies the parent's cpuset into a new cgroup (TestKernelWatchFileWritten)
						}
						if ev.Kind != want || ev.PodUID != uid {
							t.Fatalf("event %+v, want %s of %s", ev, want, uid)
						}
						return ev
					case <-time.After(10 * time.Second):
						t.Fatalf("no %s event for %s", want, uid)
					}
					return cgroup.WatchEvent{}
				}
			}
			k.SB.MkdirPod(driver, "BestEffort", "u-new")
			if ev := next(cgroup.PodCreated, "u-new"); ev.HasContainers {
				t.Fatalf("empty pod reported with containers: %+v", ev)
			}
			k.SB.Mkdir(podRel + "/ctr")
			next(cgroup.ContainerCreated, "u-late")
			// The cached listing is dropped before the handler runs.
			kids, err := kp.KnownChildren("/" + podRel)
			if err != nil || len(kids) != 1 || path.Base(kids[0]) != "ctr" {
				t.Fatalf("listing after the event: %v, %v", kids, err)
			}
			for _, h := range []string{k.CPUSetKey, k.CPUKey} {
				if err := syscall.Rmdir(k.SB.Path(h, podRel+"/ctr")); err != nil && !errors.Is(err, syscall.ENOENT) {
					t.Fatal(err)
				}
			}
			next(cgroup.ContainerRemoved, "u-late")
		})
	}
}

// TestKernelWatchFileWritten: a write to a pod's or a container's cpuset
// or CFS quota (every hierarchy the pools write, containers that existed
// before the watch and ones made after it) is reported with the cgroup, the
// file and the value it now holds; a write to any other file is not.
func TestKernelWatchFileWritten(t *testing.T) {
	for _, driver := range []string{"cgroupfs", "systemd"} {
		t.Run(driver, func(t *testing.T) {
			k, kp := openKubepods(t, driver)
			podRel, _ := k.SB.MkdirPod(driver, "Burstable", "u-files", "old")
			events := make(chan cgroup.WatchEvent, 64)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if _, err := kp.Watch(ctx, func(ev cgroup.WatchEvent) { events <- ev }, func(err error) { t.Errorf("watch: %v", err) }); err != nil {
				t.Fatal(err)
			}
			written := func(rel, file, value string) {
				t.Helper()
				deadline := time.After(10 * time.Second)
				for {
					select {
					case ev := <-events:
						// The tree's own setup writes too (v1 copies the
						// parent's cpuset into a new cgroup), and a value is
						// read when its event is handled.
						if ev.Kind != cgroup.FileWritten || ev.Cgroup != "/"+rel || ev.File != file || ev.Value != value {
							continue
						}
						if ev.PodUID != "u-files" {
							t.Fatalf("event %+v, want u-files", ev)
						}
						return
					case <-deadline:
						t.Fatalf("no FileWritten for %s/%s", rel, file)
					}
				}
			}
			one := strconv.Itoa(k.CPUs.List()[0])
			quotaFile, quota := "cpu.cfs_quota_us", "70000"
			if k.SB.Unified {
				quotaFile, quota = "cpu.max", "70000 100000"
			}
			write := func(key, rel, file, value string) {
				t.Helper()
				if err := os.WriteFile(filepath.Join(k.SB.Path(key, rel), file), []byte(value), 0); err != nil {
					t.Fatal(err)
				}
			}
			k.SB.Mkdir(podRel + "/new")
			for _, rel := range []string{podRel + "/new", podRel + "/old", podRel} { // children first: v1 refuses to narrow a parent below them
				if k.SB.Unified { // not reported: the pools do not set shares
					write(k.CPUKey, rel, "cpu.weight", "10")
				} else {
					write(k.CPUKey, rel, "cpu.shares", "100")
				}
				write(k.CPUSetKey, rel, "cpuset.cpus", one)
				written(rel, "cpuset.cpus", one)
				write(k.CPUKey, rel, quotaFile, quota)
				written(rel, quotaFile, quota)
			}
			for {
				select {
				case ev := <-events:
					if ev.Kind == cgroup.FileWritten && !cgroup.WatchedFiles[ev.File] {
						t.Fatalf("write of an unwatched file reported: %+v", ev)
					}
					continue
				case <-time.After(200 * time.Millisecond):
				}
				break
			}
		})
	}
}

// TestKernelWatchGoesOnAfterAPanic: a panic while one event is handled
// costs that event: onErr gets it as a *loop.Panic and the next event is
// delivered.
func TestKernelWatchGoesOnAfterAPanic(t *testing.T) {
	k, kp := openKubepods(t, "cgroupfs")
	events := make(chan cgroup.WatchEvent, 16)
	panics := make(chan *loop.Panic, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := true
	if _, err := kp.Watch(ctx, func(ev cgroup.WatchEvent) {
		if first {
			first = false
			panic("the first event's handler")
		}
		events <- ev
	}, func(err error) {
		var p *loop.Panic
		if !errors.As(err, &p) {
			t.Errorf("watch: %v", err)
			return
		}
		panics <- p
	}); err != nil {
		t.Fatal(err)
	}
	k.SB.MkdirPod("cgroupfs", "BestEffort", "u-first")
	select {
	case p := <-panics:
		if p.Loop != cgroup.WatchLoop || p.Value != "the first event's handler" {
			t.Fatalf("onErr got %+v", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the panic was not reported to onErr")
	}
	k.SB.MkdirPod("cgroupfs", "BestEffort", "u-second")
	for {
		select {
		case ev := <-events:
			if ev.Kind == cgroup.FileWritten || ev.PodUID == "u-first" {
				continue // the files of the new cgroups (TestKernelWatchFileWritten); u-first's other events, one of which panicked
			}
			if ev.Kind != cgroup.PodCreated || ev.PodUID != "u-second" {
				t.Fatalf("event %+v after the panic, want u-second created", ev)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no event after the panic: the watch died")
		}
		return
	}
}

// TestKernelV2ControllersRequired: on v2, OpenKubepods refuses a kubepods
// that does not enable cpu and cpuset for its children (their files would
// be missing), naming the file.
func TestKernelV2ControllersRequired(t *testing.T) {
	tier.Kernel(t)
	sb := cgtest.New(t, "cpu", "cpuset")
	if !sb.Unified {
		t.Skip("kernel tier: v1 has no cgroup.subtree_control; each v1 controller is its own hierarchy (checked by the mount check)")
	}
	sb.Mkdir("kubepods") // no children yet: its subtree_control is empty
	m, err := cgroup.ReadMounts("/proc")
	if err != nil {
		t.Fatal(err)
	}
	cfg := cgroup.KubepodsConfig{Root: "/sys/fs/cgroup", Layout: cgroup.LayoutConfig{KubepodsPath: path.Join(strings.TrimPrefix(sb.Dirs[cgtest.V2], sb.Mounts[cgtest.V2]), "kubepods")}}
	_, err = cgroup.OpenKubepods(m, cfg)
	if !errors.Is(err, cgroup.ErrLayout) || !strings.Contains(err.Error(), "cgroup.subtree_control") {
		t.Fatalf("OpenKubepods = %v, want ErrLayout naming cgroup.subtree_control", err)
	}
	sb.Mkdir("kubepods/burstable") // enables the sandbox's controllers in kubepods
	if _, err := cgroup.OpenKubepods(m, cfg); err != nil {
		t.Fatalf("with cpu and cpuset enabled: %v", err)
	}
}

// TestKernelKubepodsRefusesOtherRoot: hierarchies mounted outside the
// configured root are a configuration error, not something to write
// through.
func TestKernelKubepodsRefusesOtherRoot(t *testing.T) {
	k, _ := openKubepods(t, "cgroupfs")
	_, err := cgroup.OpenKubepods(k.SB.AsRoots(), cgroup.KubepodsConfig{Root: "/elsewhere", Layout: cgroup.LayoutConfig{KubepodsPath: "/" + k.KubepodsName}})
	if !errors.Is(err, cgroup.ErrLayout) || !strings.Contains(err.Error(), "/elsewhere") {
		t.Fatalf("err = %v, want ErrLayout naming the root", err)
	}
}

// TestKernelApplyPodResources: a container's memory limit raised while its
// task holds memory close to it (the OOM bump: pod before container), then
// CPU shares, quota and memory moved down (containers before the pod), read
// back through ReadCurrent; a limit below usage is refused and changes
// nothing.
func TestKernelApplyPodResources(t *testing.T) {
	k, kp := openKubepods(t, "cgroupfs")
	rel, _ := k.Pod("res", "Burstable", "app")
	podPath := path.Join("/", k.KubepodsName, "burstable", "podres")
	ctr := podPath + "/app"
	mem := func(rel string, v int64) {
		file := "memory.limit_in_bytes"
		if k.SB.Unified {
			file = "memory.max"
		}
		if err := os.WriteFile(filepath.Join(k.SB.Path(k.MemoryKey, rel), file), []byte(strconv.FormatInt(v, 10)), 0); err != nil {
			t.Fatal(err)
		}
	}
	mem(rel, 256<<20)
	mem(rel+"/app", 128<<20)
	hog := k.SB.Start(rel+"/app", cgtest.Hog, 96)
	// The refusal below needs the hog's 90 MiB in place: on a loaded
	// machine that took 20 s once, so wait longer and say so if it never
	// comes, rather than test the refusal against a smaller usage.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if c, err := kp.ReadCurrent(ctr); err == nil && c.MemoryLimit > 0 {
			if u := usageOf(t, k, rel+"/app"); u >= 90<<20 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hog's usage stayed at %d bytes for 60 s, want at least %d", usageOf(t, k, rel+"/app"), 90<<20)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if l, err := kp.ReadMemoryLimit(podPath); err != nil || l != 256<<20 {
		t.Fatalf("pod's memory limit before the bump: %d, %v; want %d", l, err, 256<<20)
	}
	up := func(v int64) *int64 { return &v }
	// Raise: the container to 200 MiB needs the pod at 328 MiB first.
	if _, err := kp.ApplyPodResources(cgroup.PodResources{UID: "res", Path: podPath,
		Pod: cgroup.Resources{MemoryLimit: up(328 << 20)}, Containers: map[string]cgroup.Resources{ctr: {MemoryLimit: up(200 << 20)}}}); err != nil {
		t.Fatal(err)
	}
	if c, err := kp.ReadCurrent(ctr); err != nil || c.MemoryLimit != 200<<20 {
		t.Fatalf("container after the bump: %+v, %v", c, err)
	}
	if l, err := kp.ReadMemoryLimit(podPath); err != nil || l != 328<<20 {
		t.Fatalf("pod's memory limit after the bump: %d, %v; want %d", l, err, 328<<20)
	}
	if _, err := kp.ReadMemoryLimit(podPath + "/gone"); !errors.Is(err, cgroup.ErrGone) {
		t.Fatalf("ReadMemoryLimit of a missing cgroup: %v, want ErrGone", err)
	}
	// Below usage: refused before any write.
	_, err := kp.ApplyPodResources(cgroup.PodResources{UID: "res", Path: podPath,
		Containers: map[string]cgroup.Resources{ctr: {MemoryLimit: up(64 << 20)}}})
	if !errors.Is(err, cgroup.ErrRefused) {
		t.Fatalf("limit below usage: %v, want ErrRefused", err)
	}
	if c, _ := kp.ReadCurrent(ctr); c.MemoryLimit != 200<<20 {
		t.Fatalf("a refused plan changed the limit to %d", c.MemoryLimit)
	}
	// CPU down: shares and quota, container before pod.
	shares := cgroup.KubeletShares(250)
	q := cgroup.KubeletQuota(500)
	podShares, podQuota := cgroup.KubeletShares(250), cgroup.KubeletQuota(500)
	if _, err := kp.ApplyPodResources(cgroup.PodResources{UID: "res", Path: podPath,
		Pod: cgroup.Resources{Shares: &podShares, Quota: &podQuota}, Containers: map[string]cgroup.Resources{ctr: {Shares: &shares, Quota: &q}}}); err != nil {
		t.Fatal(err)
	}
	c, err := kp.ReadCurrent(ctr)
	if err != nil || c.Quota != q {
		t.Fatalf("container cpu: %+v, %v", c, err)
	}
	if want := shares; !k.SB.Unified && c.Shares != want {
		t.Fatalf("cpu.shares %d, want %d", c.Shares, want)
	}
	hog.Kill()
}

// usageOf reads a sandbox cgroup's memory usage.
func usageOf(t *testing.T, k *cgtest.KubeletTree, rel string) int64 {
	file := "memory.usage_in_bytes"
	if k.SB.Unified {
		file = "memory.current"
	}
	b, err := os.ReadFile(filepath.Join(k.SB.Path(k.MemoryKey, rel), file))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v
}

// TestKernelMemswFollowsLimit: a container whose runtime allows no swap
// (v1 memory.memsw.limit_in_bytes equal to the limit, as containerd sets
// it for the kubelet) has its limit raised and lowered; the kernel refuses
// a limit above memsw, so memsw moves with it (the OOM bump's write).
func TestKernelMemswFollowsLimit(t *testing.T) {
	k, kp := openKubepods(t, "cgroupfs")
	if k.SB.Unified {
		t.Skip("kernel tier: memory.memsw.limit_in_bytes is v1 only; this host's test cgroups are v2")
	}
	rel, _ := k.Pod("memsw", "Burstable", "app")
	dir := k.SB.Path(k.MemoryKey, rel+"/app")
	if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err != nil {
		t.Skip("kernel tier: this kernel does not account swap (no memory.memsw.limit_in_bytes; boot with swapaccount=1)")
	}
	set := func(file string, v int64) {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(v, 10)), 0); err != nil {
			t.Fatal(err)
		}
	}
	get := func(file string) int64 {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	set("memory.limit_in_bytes", 100<<20)
	set("memory.memsw.limit_in_bytes", 100<<20)
	podPath := path.Join("/", k.KubepodsName, "burstable", "podmemsw")
	ctr := podPath + "/app"
	for _, want := range []int64{173 << 20, 64 << 20} {
		v := want
		if _, err := kp.ApplyPodResources(cgroup.PodResources{UID: "memsw", Path: podPath,
			Containers: map[string]cgroup.Resources{ctr: {MemoryLimit: &v}}}); err != nil {
			t.Fatalf("limit to %d: %v", want, err)
		}
		if l, sw := get("memory.limit_in_bytes"), get("memory.memsw.limit_in_bytes"); l != want || sw != want {
			t.Fatalf("limit %d, memsw %d: want both %d", l, sw, want)
		}
	}
}

// TestKernelOOMGroup: memory.oom.group as the kernel keeps it (v2: 0 until
// set, then 1); v1 has no such file, which is no group kill; a removed
// cgroup is an error.
func TestKernelOOMGroup(t *testing.T) {
	k, _ := openKubepods(t, "cgroupfs")
	rel, _ := k.Pod("oomgroup", "Burstable", "app")
	dir := k.SB.Path(k.MemoryKey, rel+"/app")
	got, err := cgroup.OOMGroup(dir)
	if err != nil || got {
		t.Fatalf("a new cgroup: OOMGroup = %v, %v; want false, nil", got, err)
	}
	if k.SB.Unified {
		if err := os.WriteFile(filepath.Join(dir, "memory.oom.group"), []byte("1"), 0); err != nil {
			t.Fatal(err)
		}
		if got, err := cgroup.OOMGroup(dir); err != nil || !got {
			t.Fatalf("memory.oom.group 1: OOMGroup = %v, %v; want true, nil", got, err)
		}
	}
	if _, err := cgroup.OOMGroup(filepath.Join(dir, "gone")); !errors.Is(err, cgroup.ErrGone) {
		t.Fatalf("a missing cgroup: err %v, want ErrGone", err)
	}
}

// TestKernelFilesBeneathAnotherMount: a cgroup directory that is its own
// mount below /sys/fs/cgroup, as the agent DaemonSet's read-write kubepods
// mount over the read-only /sys/fs/cgroup is (the cgroup-v2 component):
// opencontainers/cgroups' openat2 refuses to cross into it on v2 (EXDEV),
// and the package's files are opened beneath that mount instead.
func TestKernelFilesBeneathAnotherMount(t *testing.T) {
	s := cgtest.New(t, "memory")
	if !s.Unified {
		t.Skip("kernel tier: v2 only (the library's v1 openat2 crosses mounts); the v2 tier runs it (test/v2vm)")
	}
	dir := s.Mkdir("bound")[cgtest.V2]
	child := s.Mkdir("bound/child")[cgtest.V2]
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }) // before the sandbox removes the directory
	if _, err := cgroups.OpenFile(dir, "memory.oom.group", unix.O_RDONLY); !errors.Is(err, unix.EXDEV) {
		t.Logf("the library itself opened a file beneath another mount (err %v): the retry is not needed there", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.oom.group"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	if got, err := cgroup.OOMGroup(dir); err != nil || !got {
		t.Fatalf("OOMGroup beneath a bind mount: %v, %v; want true, nil", got, err)
	}
	// Again, and one level down: opened beneath the mount met before.
	if got, err := cgroup.OOMGroup(dir); err != nil || !got {
		t.Fatalf("OOMGroup beneath a bind mount, again: %v, %v; want true, nil", got, err)
	}
	if got, err := cgroup.OOMGroup(child); err != nil || got {
		t.Fatalf("OOMGroup of a child beneath a bind mount: %v, %v; want false, nil", got, err)
	}
}
