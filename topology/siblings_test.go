//go:build linux

package topology

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"k8s.io/utils/cpuset"
)

// TestSiblingListsDefineCores discovers the VMware Opteron guest, whose
// thread_siblings_list pairs CPUs with different core_ids, and checks it
// against lscpu's view of the same machine (util-linux's expected output
// for it, "CPU,Core,Socket,Node" columns: core i/2, socket i/8, node i/4):
// 8 cores of two threads, the raw ids kept only as labels, and a
// full-cores request never given a thread whose sibling another tenant has.
func TestSiblingListsDefineCores(t *testing.T) {
	topo, _, err := DiscoverRoot(readTreeArchive(t, filepath.Join("testdata", "vmware-opteron-cu.tree")))
	if err != nil {
		t.Fatal(err)
	}
	if c := topo.Counts(); c.Cores != 8 || c.Sockets != 2 || c.NUMANodes != 4 || c.Online != 16 {
		t.Errorf("counts %+v, want 16 online CPUs, 8 cores, 2 sockets, 4 NUMA nodes (lscpu)", c)
	}
	for _, c := range topo.CPUs {
		if c.Core != c.ID/2 || c.Socket != c.ID/8 || c.NUMA != c.ID/4 {
			t.Errorf("cpu %d: core %d socket %d node %d, lscpu says core %d socket %d node %d", c.ID, c.Core, c.Socket, c.NUMA, c.ID/2, c.ID/8, c.ID/4)
		}
		if c.RawCoreID != c.ID%4 || c.RawPackageID != c.ID/8 {
			t.Errorf("cpu %d: raw core_id %d, physical_package_id %d: the sysfs labels must be kept", c.ID, c.RawCoreID, c.RawPackageID)
		}
		if want := cpuset.New(c.ID&^1, c.ID|1); !c.Siblings.Equals(want) {
			t.Errorf("cpu %d: siblings %s, want %s", c.ID, c.Siblings, want)
		}
	}
	// Another tenant holds CPU 0: its sibling 1 must stay out of a
	// full-cores grant, which takes whole free cores.
	got, err := Allocate(topo, State{Taken: cpuset.New(0)}, Request{CPUs: 2, Policy: FullCores})
	if err != nil {
		t.Fatal(err)
	}
	if got.Contains(1) || got.Size() != 2 || topo.CoreCPUs(mustCPU(t, topo, got.List()[0]).Core).Size() != 2 ||
		!topo.CoreCPUs(mustCPU(t, topo, got.List()[0]).Core).Equals(got) {
		t.Errorf("full-cores grant %s beside a tenant on CPU 0: want one whole core other than 0-1", got)
	}
	// An explicit set that splits a compute unit is refused as such.
	_, err = Allocate(topo, State{}, Request{Explicit: cpuset.New(1, 2)})
	var ae *AllocError
	if !errors.As(err, &ae) || ae.Reason != ReasonSplitsCore {
		t.Errorf("explicit 1-2 (half of two cores): err %v, want %s", err, ReasonSplitsCore)
	}
}

// TestSiblingGroupingEdgeCases changes one sibling or package file of the
// Opteron tree at a time: grouping follows the lists (united, as a CPU and
// any CPU it names share a core), ignores offline CPUs in them, falls back
// to core_id without lists, and keeps every core inside one package.
func TestSiblingGroupingEdgeCases(t *testing.T) {
	cpu := "sys/devices/system/cpu/"
	write := func(t *testing.T, root, rel, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, rel), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		mutate func(t *testing.T, root string)
		check  func(t *testing.T, topo *Topology)
	}{
		{"one-sided sibling list", func(t *testing.T, root string) {
			// cpu3 names only itself; cpu2 still names 2-3.
			write(t, root, cpu+"cpu3/topology/thread_siblings_list", "3\n")
		}, func(t *testing.T, topo *Topology) {
			if s := mustCPU(t, topo, 3).Siblings; !s.Equals(cpuset.New(2, 3)) {
				t.Errorf("cpu3 siblings %s, want 2-3: a CPU another lists as its sibling shares its core", s)
			}
		}},
		{"offline sibling", func(t *testing.T, root string) {
			write(t, root, cpu+"online", "0-4,6-15\n")
		}, func(t *testing.T, topo *Topology) {
			if c := mustCPU(t, topo, 4); !c.Siblings.Equals(cpuset.New(4)) || topo.CoreCPUs(c.Core).Size() != 1 {
				t.Errorf("cpu4 siblings %s: its offline sibling 5 must not count", c.Siblings)
			}
			if c := topo.Counts(); c.Cores != 8 {
				t.Errorf("%d cores, want 8 (one with a single online thread)", c.Cores)
			}
		}},
		{"no sibling lists", func(t *testing.T, root string) {
			for i := 0; i < 16; i++ {
				for _, f := range []string{"thread_siblings_list", "thread_siblings"} {
					if err := os.Remove(filepath.Join(root, cpu, "cpu"+strconv.Itoa(i), "topology", f)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}, func(t *testing.T, topo *Topology) {
			// Only core_id is left: it repeats per node, so within a
			// package CPUs 0 and 4 now share core_id 0.
			if c := topo.Counts(); c.Cores != 8 || !topo.CoreCPUs(mustCPU(t, topo, 0).Core).Equals(cpuset.New(0, 4)) {
				t.Errorf("counts %+v, core of cpu0 %s: want core_id within the package (0,4)", c, topo.CoreCPUs(mustCPU(t, topo, 0).Core))
			}
		}},
		{"package ids disagree with the package list", func(t *testing.T, root string) {
			write(t, root, cpu+"cpu7/topology/physical_package_id", "5\n")
		}, func(t *testing.T, topo *Topology) {
			if c := mustCPU(t, topo, 7); c.Socket != 0 || c.RawPackageID != 5 {
				t.Errorf("cpu7 socket %d (raw %d): the package list 0-7 decides, the id is a label", c.Socket, c.RawPackageID)
			}
		}},
		{"siblings across package lists", func(t *testing.T, root string) {
			// cpu8 claims cpu7 as a sibling: the two packages hold one core
			// between them, so they cannot be told apart.
			write(t, root, cpu+"cpu8/topology/thread_siblings_list", "7-9\n")
		}, func(t *testing.T, topo *Topology) {
			if c := topo.Counts(); c.Sockets != 1 {
				t.Errorf("%d sockets, want 1: a core never spans two packages", c.Sockets)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := readTreeArchive(t, filepath.Join("testdata", "vmware-opteron-cu.tree"))
			tc.mutate(t, root)
			topo, _, err := DiscoverRoot(root)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, topo)
		})
	}
}

func mustCPU(t *testing.T, topo *Topology, id int) CPU {
	t.Helper()
	c, ok := topo.CPU(id)
	if !ok {
		t.Fatalf("no cpu %d", id)
	}
	return c
}
