//go:build linux

package v2

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"

	"github.com/cgpilot/cgpilot/test/tier"
)

const (
	cgroupfs = "/sys/fs/cgroup"

	// hogEnv turns the test binary into the memory hog: the VM has no shell
	// or other binaries, so the child is this binary re-executed.
	hogEnv   = "CGPILOT_V2_HOG"
	hogLimit = 512 << 20 // far above memLimit: surviving means no OOM kill
	memLimit = 32 << 20
)

func TestMain(m *testing.M) {
	if os.Getenv(hogEnv) == "1" {
		hog()
	}
	os.Exit(m.Run())
}

// hog touches every page of up to hogLimit bytes, keeping them referenced so
// that nothing can be reclaimed. Exit status 3 means it was never killed.
func hog() {
	var keep [][]byte
	for total := 0; total < hogLimit; total += 1 << 20 {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
	}
	fmt.Printf("hog: allocated %d MiB in %d chunks without being killed\n", hogLimit>>20, len(keep))
	os.Exit(3)
}

// inVM reports whether the test runs in the test/v2vm guest, where every
// prerequisite is guaranteed, so a missing one is a bug, not a reason to skip.
func inVM() bool { return os.Getenv("V2VM") == "1" }

func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if inVM() {
		t.Fatalf("in the v2 VM: "+format, args...)
	}
	t.Skipf(format+" (make test-v2 runs this in a cgroup v2 VM)", args...)
}

// ownCgroup returns the cgroup v2 directory of this process, from the "0::"
// line of /proc/self/cgroup.
func ownCgroup(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		t.Fatalf("open /proc/self/cgroup: %v", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if p, ok := strings.CutPrefix(s.Text(), "0::"); ok {
			if !strings.HasPrefix(p, "/") || strings.Contains(p, "..") {
				t.Fatalf("/proc/self/cgroup: unexpected v2 path %q", p)
			}
			return filepath.Join(cgroupfs, p)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("read /proc/self/cgroup: %v", err)
	}
	t.Fatal("/proc/self/cgroup has no cgroup v2 (0::) line")
	return ""
}

func read(t *testing.T, dir, file string) string {
	t.Helper()
	v, err := cgroups.ReadFile(dir, file)
	if err != nil {
		t.Fatalf("read %s: %v", filepath.Join(dir, file), err)
	}
	return strings.TrimSpace(v)
}

// flatKeyed parses files such as memory.events ("key value" per line).
func flatKeyed(t *testing.T, dir, file string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, line := range strings.Split(read(t, dir, file), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("%s: malformed line %q", file, line)
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: key %s: %v", file, k, err)
		}
		out[k] = n
	}
	return out
}

// enableControllers makes each controller available to the children of
// parent, and on cleanup disables again the ones it had to enable.
func enableControllers(t *testing.T, parent string, want ...string) {
	t.Helper()
	available := strings.Fields(read(t, parent, "cgroup.controllers"))
	enabled := strings.Fields(read(t, parent, "cgroup.subtree_control"))
	for _, c := range want {
		if !slices.Contains(available, c) {
			skipOrFail(t, "controller %s not available in %s (cgroup.controllers: %v)", c, parent, available)
		}
		if slices.Contains(enabled, c) {
			continue
		}
		if err := cgroups.WriteFile(parent, "cgroup.subtree_control", "+"+c); err != nil {
			// EBUSY: a non-root cgroup that holds processes cannot enable
			// controllers for children ("no internal processes").
			skipOrFail(t, "cannot enable %s below the test's own cgroup: %v", c, err)
		}
		t.Cleanup(func() {
			if err := cgroups.WriteFile(parent, "cgroup.subtree_control", "-"+c); err != nil {
				t.Errorf("restore %s/cgroup.subtree_control: %v", parent, err)
			}
		})
	}
}

// newTestCgroup creates cgpilot-test-* below parent. The returned remove
// kills anything left in it and removes it; it is also registered as cleanup.
func newTestCgroup(t *testing.T, parent string) (dir string, remove func() error) {
	t.Helper()
	dir, err := os.MkdirTemp(parent, "cgpilot-test-")
	if err != nil {
		t.Fatalf("create test cgroup below %s: %v", parent, err)
	}
	remove = func() error {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		// cgroup.kill exists from Linux 5.14; the guest kernel has it.
		if err := cgroups.WriteFile(dir, "cgroup.kill", "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := os.Remove(dir)
			if err == nil || !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				return err
			}
			time.Sleep(50 * time.Millisecond) // killed tasks leave the cgroup asynchronously
		}
	}
	t.Cleanup(func() {
		if err := remove(); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir, remove
}

func requireV2(t *testing.T) {
	t.Helper()
	tier.Kernel(t)
	if !cgroups.IsCgroup2UnifiedMode() {
		skipOrFail(t, "%s is not a unified cgroup2 mount", cgroupfs)
	}
}

// TestLimitsReadBackAndOOMKill is the proof of the v2 tier: limits written
// to a real cgroup read back as the kernel normalises them, bad values are
// refused without changing anything, and exceeding memory.max gets a real
// process OOM-killed and counted in memory.events.
func TestLimitsReadBackAndOOMKill(t *testing.T) {
	requireV2(t)
	parent := ownCgroup(t)
	enableControllers(t, parent, "cpu", "memory")
	dir, remove := newTestCgroup(t, parent)
	t.Logf("test cgroup %s", dir)

	writes := []struct {
		file, value, want string
	}{
		{"cpu.max", "50000 100000", "50000 100000"},
		{"cpu.max", "max", "max 100000"}, // quota alone: the period is kept
		{"cpu.max", "20000 50000", "20000 50000"},
		{"memory.max", "max", "max"},
		{"memory.max", "33554433", "33554432"}, // rounded down to whole pages
		{"memory.max", "64M", "67108864"},      // the kernel parses size suffixes
		// The final values the OOM part below relies on.
		{"cpu.max", "50000 100000", "50000 100000"},
		{"memory.max", strconv.Itoa(memLimit), strconv.Itoa(memLimit)},
	}
	for _, w := range writes {
		if err := cgroups.WriteFile(dir, w.file, w.value); err != nil {
			t.Fatalf("write %q: %v", w.value, err)
		}
		if got := read(t, dir, w.file); got != w.want {
			t.Fatalf("after writing %q to %s: read %q, want %q", w.value, w.file, got, w.want)
		}
	}

	rejected := []struct{ file, value string }{
		{"cpu.max", "-1 100000"},
		{"cpu.max", "50000 0"},
		{"cpu.max", "fast"},
		{"memory.max", "-1"},
		{"memory.max", "lots"},
	}
	for _, r := range rejected {
		before := read(t, dir, r.file)
		err := cgroups.WriteFile(dir, r.file, r.value)
		if !errors.Is(err, syscall.EINVAL) {
			t.Errorf("write %q to %s: got %v, want EINVAL", r.value, r.file, err)
		}
		if after := read(t, dir, r.file); after != before {
			t.Errorf("refused write %q changed %s from %q to %q", r.value, r.file, before, after)
		}
	}

	// Without this a host with swap would swap the hog out instead of killing it.
	if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err == nil {
		if err := cgroups.WriteFile(dir, "memory.swap.max", "0"); err != nil {
			t.Fatalf("memory.swap.max: %v", err)
		}
	}

	if ev := flatKeyed(t, dir, "memory.events"); ev["oom_kill"] != 0 {
		t.Fatalf("fresh cgroup already has memory.events oom_kill=%d", ev["oom_kill"])
	}

	fd, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), hogEnv+"=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// clone3(CLONE_INTO_CGROUP): the hog is born in the cgroup, so not one
	// page is charged elsewhere and no migration race exists.
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	start := time.Now()
	runErr := cmd.Run()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("hog still running after %v: memory.max did not stop it", took)
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("hog ended with %v (%v), want killed by SIGKILL", runErr, cmd.ProcessState)
	}
	t.Logf("hog OOM-killed after %v", took.Round(time.Millisecond))

	ev := flatKeyed(t, dir, "memory.events")
	t.Logf("memory.events: %v", ev)
	if ev["oom_kill"] != 1 {
		t.Errorf("memory.events oom_kill = %d, want 1", ev["oom_kill"])
	}
	if ev["oom"] < 1 || ev["max"] < 1 {
		t.Errorf("memory.events oom = %d, max = %d; want both >= 1", ev["oom"], ev["max"])
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.peak")); err == nil {
		peak, err := strconv.ParseUint(read(t, dir, "memory.peak"), 10, 64)
		if err != nil {
			t.Fatalf("memory.peak: %v", err)
		}
		// The hog must have reached the limit. The kernel lets an OOM victim
		// charge a little past memory.max while it exits (one page seen), so
		// allow 1 MiB above it; more would mean the limit was not enforced.
		if peak < memLimit*9/10 || peak > memLimit+1<<20 {
			t.Errorf("memory.peak = %d, want within [90%%, +1 MiB] of memory.max = %d", peak, memLimit)
		}
	}

	if err := remove(); err != nil {
		t.Fatalf("remove %s: %v", dir, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after removal: %v", dir, err)
	}
}
