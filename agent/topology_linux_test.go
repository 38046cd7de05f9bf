//go:build linux

package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/cgpilot/cgpilot/topology"
)

// TestDiscoverWithMaskedInterrupts runs discovery on this machine's real
// sysfs with /proc/interrupts masked the way container runtimes do it (a
// /dev/null in its place): the topology is kept, IO-queue policies act as
// any, and the log says why.
func TestDiscoverWithMaskedInterrupts(t *testing.T) {
	if _, err := os.Stat("/sys/devices/system/cpu/online"); err != nil {
		t.Skipf("no sysfs: %v", err)
	}
	proc := t.TempDir()
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "cmdline"), cmdline, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", filepath.Join(proc, "interrupts")); err != nil {
		t.Fatal(err)
	}
	var logs []string
	log := funcr.New(func(prefix, args string) { logs = append(logs, args) }, funcr.Options{})
	cfg := DefaultConfig()
	cfg.SysRoot, cfg.ProcRoot = "/sys", proc
	all, source, topo, err := discoverCPUs(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if topo == nil || !strings.HasPrefix(source, "topology ") || !all.Equals(topo.Online().Difference(topo.Reserved)) {
		t.Fatalf("topology dropped with the IRQs: source %q, topology %v; log %q", source, topo, logs)
	}
	if len(topo.IRQs) != 0 {
		t.Fatalf("IRQs from a masked file: %d", len(topo.IRQs))
	}
	joined := strings.Join(logs, "\n")
	if !strings.Contains(joined, "act as any") || !strings.Contains(joined, "interrupts: empty (masked)") {
		t.Fatalf("no logged reason for the io-queues fallback:\n%s", joined)
	}
	for _, io := range []topology.IOPolicy{topology.IOAvoid, topology.IOSpread, topology.IOAny} {
		got, err := topology.Allocate(topo, topology.State{CapRatio: 1}, topology.Request{CPUs: 1, IOQueues: io})
		if err != nil || got.Size() != 1 || !got.IsSubsetOf(all) {
			t.Fatalf("io-queues %s: %s, %v", io, got, err)
		}
	}
}
