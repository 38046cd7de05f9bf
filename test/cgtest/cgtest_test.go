//go:build linux

package cgtest_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/test/cgtest"
	"github.com/cgpilot/cgpilot/test/tier"
)

func TestMain(m *testing.M) { cgtest.Main(m) }

func TestPodPath(t *testing.T) {
	for _, tc := range []struct{ driver, qos, want string }{
		{"cgroupfs", "Guaranteed", "kubepods/pod1-2"},
		{"cgroupfs", "Burstable", "kubepods/burstable/pod1-2"},
		{"cgroupfs", "BestEffort", "kubepods/besteffort/pod1-2"},
		{"systemd", "Guaranteed", "kubepods.slice/kubepods-pod1_2.slice"},
		{"systemd", "Burstable", "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice"},
		{"systemd", "BestEffort", "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1_2.slice"},
	} {
		if got := cgtest.PodPath(tc.driver, tc.qos, "1-2"); got != tc.want {
			t.Errorf("PodPath(%s, %s) = %s, want %s", tc.driver, tc.qos, got, tc.want)
		}
	}
}

func TestSandboxLifecycle(t *testing.T) {
	tier.Kernel(t)
	var made []string
	var pid int
	t.Run("inner", func(t *testing.T) {
		s := cgtest.New(t, "cpu", "cpuacct", "cpuset", "memory")
		for key, d := range s.Dirs {
			if !strings.HasPrefix(filepath.Base(d), "cgpilot-test-") {
				t.Errorf("%s parent %s not named cgpilot-test-*", key, d)
			}
			made = append(made, d)
		}
		_, ctrs := s.MkdirPod("cgroupfs", "Burstable", "u-1", "c1")
		p := s.Start(ctrs[0], cgtest.Sleep, 0)
		pid = p.Pid
		for key := range s.Dirs {
			b, err := os.ReadFile(filepath.Join(s.Path(key, ctrs[0]), "cgroup.procs"))
			if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(p.Pid) {
				t.Errorf("%s: cgroup.procs = %q, %v; want %d", key, b, err, p.Pid)
			}
		}
	})
	for _, d := range made {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("sandbox %s left behind (%v)", d, err)
		}
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !os.IsNotExist(err) {
		t.Errorf("child %d still alive", pid)
	}
}

// TestSandboxConcurrentPods: pods made from several goroutines at once
// (as the footprint benchmark makes its 1,000) are all removed at the end;
// a lost record of one left it behind with its parents busy.
func TestSandboxConcurrentPods(t *testing.T) {
	tier.Kernel(t)
	var dirs []string
	t.Run("inner", func(t *testing.T) {
		s := cgtest.New(t, "cpu", "cpuacct", "cpuset", "memory")
		for _, d := range s.Dirs {
			dirs = append(dirs, d)
		}
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 25; i++ {
					s.MkdirPod("cgroupfs", "Burstable", fmt.Sprintf("g%d-%d", g, i), "c")
				}
			}()
		}
		wg.Wait()
	})
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			left, _ := filepath.Glob(filepath.Join(d, "kubepods", "burstable", "pod*"))
			t.Errorf("sandbox %s left behind with %d pods (%v)", d, len(left), err)
		}
	}
}

// TestProcRootPresentsTheSandbox: an agent reading the fake procfs root's
// mountinfo finds the sandbox's directories as the hierarchy roots.
func TestProcRootPresentsTheSandbox(t *testing.T) {
	tier.Kernel(t)
	s := cgtest.New(t, "cpu", "cpuacct", "cpuset", "memory")
	got, err := cgroup.ReadMounts(s.ProcRoot())
	if err != nil {
		t.Fatal(err)
	}
	// maps.Equal: a v2 host reads an empty V1 map where AsRoots has none.
	if want := s.AsRoots(); got.Mode != want.Mode || got.Unified != want.Unified || !maps.Equal(got.V1, want.V1) {
		t.Fatalf("ReadMounts(ProcRoot) = %+v, want %+v", got, want)
	}
}
