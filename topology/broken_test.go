//go:build linux

package topology

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBrokenTrees derives broken trees from committed fixtures: each case
// changes one thing and expects a precise error, or a degraded topology with
// a precise warning.
func TestBrokenTrees(t *testing.T) {
	write := func(rel, data string) func(t *testing.T, root string) {
		return func(t *testing.T, root string) {
			p := filepath.Join(root, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	remove := func(glob string) func(t *testing.T, root string) {
		return func(t *testing.T, root string) {
			ms, _ := filepath.Glob(filepath.Join(root, glob))
			if len(ms) == 0 {
				t.Fatalf("nothing matches %s", glob)
			}
			for _, m := range ms {
				if err := os.RemoveAll(m); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	cpu := "sys/devices/system/cpu/"
	tests := []struct {
		name    string
		fixture string
		mutate  func(t *testing.T, root string)
		wantErr error
		errHas  string // the file (and value) the error must name
		warnHas string // a warning that must appear when there is no error
		check   func(t *testing.T, topo *Topology)
	}{
		{name: "garbage online list", fixture: "xeon-l5640-2s", mutate: write(cpu+"online", "0-x\n"), wantErr: ErrParse, errHas: "cpu/online: \"0-x\""},
		{name: "garbage node cpulist", fixture: "xeon-l5640-2s", mutate: write("sys/devices/system/node/node0/cpulist", "0-5,,7\n"), wantErr: ErrParse, errHas: "node0/cpulist"},
		{name: "garbage thread siblings", fixture: "xeon-l5640-2s", mutate: write(cpu+"cpu3/topology/core_cpus_list", "3-1\n"), wantErr: ErrParse, errHas: "cpu3/topology/core_cpus_list: \"3-1\""},
		{name: "garbage core id", fixture: "xeon-l5640-2s", mutate: write(cpu+"cpu3/topology/core_id", "three\n"), wantErr: ErrParse, errHas: "cpu3/topology/core_id: \"three\""},
		{name: "garbage cache list", fixture: "xeon-l5640-2s", mutate: write(cpu+"cpu0/cache/index3/shared_cpu_list", "zz\n"), wantErr: ErrParse, errHas: "index3/shared_cpu_list"},
		{name: "garbage isolated", fixture: "xeon-l5640-2s", mutate: write(cpu+"isolated", "1-\n"), wantErr: ErrParse, errHas: "cpu/isolated"},
		{name: "garbage isolcpus", fixture: "nto-worker1-irqs", mutate: write("proc/cmdline", "ro isolcpus=managed_irq,x\n"), wantErr: ErrParse, errHas: "proc/cmdline"},
		{name: "garbage interrupts", fixture: "nto-worker1-irqs", mutate: write("proc/interrupts", "CPU0\n 12: nothing\n"), wantErr: ErrParse, errHas: "proc/interrupts"},
		{name: "garbage irq affinity", fixture: "nto-worker1-irqs", mutate: write("proc/irq/0/smp_affinity_list", "all\n"), wantErr: ErrParse, errHas: "irq/0/smp_affinity_list"},
		{name: "garbage distance", fixture: "xeon-l5640-2s", mutate: write("sys/devices/system/node/node0/distance", "10 x\n"), wantErr: ErrParse, errHas: "node0/distance"},
		{name: "cpu online flag neither 0 nor 1", fixture: "xeon-l5640-2s", mutate: write(cpu+"cpu5/online", "2\n"), wantErr: ErrParse, errHas: "cpu5/online"},
		{name: "oversized file", fixture: "xeon-l5640-2s", mutate: write(cpu+"online", strings.Repeat("0,", 40000)+"0\n"), wantErr: ErrRead, errHas: "cpu/online"},
		{name: "no cpu directories", fixture: "xeon-l5640-2s", mutate: remove(cpu + "cpu*"), wantErr: ErrNoCPUs},
		{name: "no sysfs at all", fixture: "xeon-l5640-2s", mutate: remove("sys"), wantErr: ErrNoCPUs},
		{name: "missing cache directories", fixture: "xeon-l5640-2s", mutate: remove(cpu + "cpu*/cache"), warnHas: "no cache information for online CPUs 0-23",
			check: func(t *testing.T, topo *Topology) {
				if c := topo.Counts(); c.LLCGroups != 0 || c.Cores != 12 || c.NUMANodes != 2 {
					t.Errorf("counts %+v, want no LLC, 12 cores, 2 nodes", c)
				}
				if _, err := Allocate(topo, State{}, Request{CPUs: 4}); err != nil {
					t.Errorf("degraded topology must still allocate: %v", err)
				}
			}},
		{name: "offline cpu0", fixture: "xeon-l5640-2s", mutate: write(cpu+"online", "1-23\n"), warnHas: "",
			check: func(t *testing.T, topo *Topology) {
				c0, _ := topo.CPU(0)
				if c0.Online || c0.Core != Unknown || topo.Online().Contains(0) {
					t.Errorf("cpu0 = %+v, want offline with unknown core", c0)
				}
				sib, _ := topo.CPU(c0.ID + 12)
				if sib.Siblings.Size() != 1 {
					t.Errorf("cpu0's sibling %d lists siblings %s, want itself only", sib.ID, sib.Siblings)
				}
				got, err := Allocate(topo, State{CapRatio: 1}, Request{CPUs: 23})
				if err != nil || got.Contains(0) {
					t.Errorf("allocation of all online CPUs = %s, %v", got, err)
				}
			}},
		{name: "online cpu without topology", fixture: "xeon-l5640-2s", mutate: remove(cpu + "cpu7/topology"), warnHas: "no topology directory for online CPUs 7"},
		{name: "NUMA from cpumap when cpulist is absent", fixture: "xeon-l5640-2s", mutate: remove("sys/devices/system/node/node*/cpulist"),
			check: func(t *testing.T, topo *Topology) {
				if c := topo.Counts(); c.NUMANodes != 2 || topo.NUMACPUs(0).Size() != 12 {
					t.Errorf("counts %+v, node0 %s", c, topo.NUMACPUs(0))
				}
			}},
		{name: "NUMA from cpu links when node directory is absent", fixture: "offline-cpu0", mutate: remove("sys/devices/system/node"), warnHas: "no NUMA node directory",
			check: func(t *testing.T, topo *Topology) {
				if got := topo.NUMACPUs(0).Intersection(topo.Online()).String(); got != "4,6,8,10,12,14,16,18,20" {
					t.Errorf("node0 online CPUs from links = %s", got)
				}
			}},
		{name: "no interrupts file", fixture: "nto-worker1-irqs", mutate: remove("proc/interrupts"), warnHas: "proc/interrupts: absent"},
		{name: "empty interrupts file (masked)", fixture: "nto-worker1-irqs", mutate: write("proc/interrupts", ""), warnHas: "proc/interrupts: empty (masked)", check: noIRQsButTopology},
		{name: "interrupts masked by /dev/null", fixture: "nto-worker1-irqs", mutate: func(t *testing.T, root string) {
			p := filepath.Join(root, "proc/interrupts")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/dev/null", p); err != nil {
				t.Fatal(err)
			}
		}, warnHas: "proc/interrupts: empty (masked)", check: noIRQsButTopology},
		{name: "no irq affinity files", fixture: "nto-worker1-irqs", mutate: remove("proc/irq"), warnHas: "IRQs have no smp_affinity file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := readTreeArchive(t, filepath.Join("testdata", tc.fixture+".tree"))
			tc.mutate(t, root)
			topo, warns, err := DiscoverRoot(root)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("error %v, want %v naming %q", err, tc.wantErr, tc.errHas)
				}
				if topo != nil {
					t.Fatalf("got a topology with an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			found := tc.warnHas == ""
			for _, w := range warns {
				found = found || strings.Contains(w.String(), tc.warnHas)
			}
			if !found {
				t.Errorf("warnings %v, want one containing %q", warns, tc.warnHas)
			}
			if tc.check != nil {
				tc.check(t, topo)
			}
		})
	}
}

// noIRQsButTopology: without IRQ information the rest of the machine is
// still described (the nto-worker1-irqs capture: 2 sockets).
func noIRQsButTopology(t *testing.T, topo *Topology) {
	t.Helper()
	if len(topo.IRQs) != 0 || !topo.IOCPUs().IsEmpty() {
		t.Errorf("IRQs %d, IO CPUs %s; want none", len(topo.IRQs), topo.IOCPUs())
	}
	if c := topo.Counts(); c.Online == 0 || c.Cores == 0 || c.Sockets == 0 {
		t.Errorf("topology lost with the IRQs: %+v", c)
	}
}
