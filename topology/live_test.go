//go:build linux

package topology

import (
	"os"
	"runtime"
	"testing"
)

// TestDiscoverLiveMachine reads this machine's own /sys and /proc: the code
// path the agent runs in production, on a real kernel.
func TestDiscoverLiveMachine(t *testing.T) {
	if _, err := os.Stat("/sys/devices/system/cpu"); err != nil {
		t.Skipf("no sysfs on this machine: %v", err)
	}
	topo, warns, err := Discover("/sys", "/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range warns {
		t.Logf("warning: %s", w)
	}
	online := topo.Online()
	// The process may be confined to fewer CPUs than are online, never more.
	if online.Size() < runtime.NumCPU() {
		t.Errorf("%d online CPUs, but the process may run on %d", online.Size(), runtime.NumCPU())
	}
	for _, c := range topo.CPUs {
		if c.Online && (c.Core == Unknown || !c.Siblings.Contains(c.ID)) {
			t.Errorf("online CPU %+v has no core", c)
		}
	}
	if _, err := os.Stat("/proc/interrupts"); err == nil && len(topo.IRQs) == 0 {
		t.Error("/proc/interrupts exists but no IRQ was read")
	}
	c := topo.Counts()
	t.Logf("this machine: %+v, %d IRQs, IO-queue CPUs %s", c, len(topo.IRQs), topo.IOCPUs())
	if got, err := Allocate(topo, State{CapRatio: 1}, Request{CPUs: 1}); err != nil || got.Size() != 1 {
		t.Errorf("one CPU on this machine: %s, %v", got, err)
	}
}
