//go:build linux

package topology

import (
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cgpilot/cgpilot/test/tier"
	"k8s.io/utils/cpuset"
)

// hwlocKnownDifferences lists the hwloc cases where hwloc's answer is not
// sysfs's answer, with the reason. Everything else must match exactly.
var hwlocKnownDifferences = map[string]string{
	"16amd64-8n2c-cpusets":     "hwloc drops the NUMA nodes that the capture's cgroup cpuset.mems disallows; we report the hardware",
	"16amd64-8n2c-cpusets-xml": "same capture and same difference as 16amd64-8n2c-cpusets (its -disallowed variant matches)",
	"4fake-4gr1nu1pu":          "synthetic: hand-made groups with one NUMA node per PU to test hwloc's object insertion",
	"fakeheteromemtiers":       "synthetic: hwloc attaches heterogeneous memory tiers at machine level",
}

// hwlocComputeUnits are the machines where hwloc splits each AMD Bulldozer
// compute unit into one Core per thread (its is_amd_with_CU rule, from
// family 0x15/0x16 in /proc/cpuinfo). The kernel's thread_siblings_list,
// which the scheduler and lscpu use, makes each unit one core of two
// threads, and so do we: full-cores must not give the two halves of a unit
// (shared front end, FPU and L2) to two tenants. There a compute unit is
// exactly one hwloc L2Cache, which is what our cores are compared with;
// hwloc's Cores must be single PUs, so the difference stays this one.
var hwlocComputeUnits = map[string]string{
	"64amd64-4s2n4ca2co": "L2Cache",
	"64amd64-4p2n4ca2co": "L2Cache",
}

// TestHwlocOracle discovers every hwloc test tarball and compares sockets,
// NUMA nodes, cores and last-level-cache groups, as partitions of the PUs
// hwloc shows, with hwloc's own expected output.
func TestHwlocOracle(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: unpacking every shared-data machine takes minutes on a busy host")
	}
	dir := tier.SharedData(t, "hwloc-linux-sysfs")
	cases := hwlocCases(t, dir)
	var compared atomic.Int32 // the subtests run in parallel
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if !c.plain {
				t.Skipf("%s runs hwloc with options or environment that change discovery", c.name)
			}
			if why, ok := hwlocKnownDifferences[c.name]; ok {
				t.Skip(why)
			}
			var view hwlocView
			var err error
			if strings.HasSuffix(c.expected, ".xml") {
				view, err = parseHwlocXML(c.expected)
			} else {
				view, err = parseHwlocConsole(c.expected)
			}
			if err != nil {
				t.Fatal(err)
			}
			if view.pus.IsEmpty() {
				t.Fatalf("%s: no PU in hwloc output", c.expected)
			}
			root := unpackShared(t, c.tarball)
			topo, warns, err := DiscoverRoot(root)
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			for _, w := range warns {
				t.Logf("warning: %s", w)
			}
			if !view.pus.IsSubsetOf(topo.Online()) {
				t.Errorf("hwloc shows PUs %s, we have online %s", view.pus, topo.Online())
			}
			compareLevel := func(hwlocType string, attr func(CPU) int) {
				t.Helper()
				want, ok := partition(view.objects[hwlocType], view.pus)
				if !ok {
					t.Logf("%s: hwloc objects overlap; not a partition", hwlocType)
					return
				}
				if len(want) == 0 {
					t.Logf("hwloc shows no %s", hwlocType)
					return
				}
				// Compare on the PUs that hwloc places in an object of this
				// type; the others must be Unknown to us.
				covered := cpuset.New()
				for _, w := range view.objects[hwlocType] {
					covered = covered.Union(w.Intersection(view.pus))
				}
				for _, id := range view.pus.Difference(covered).List() {
					if c, _ := topo.CPU(id); attr(c) != Unknown && hwlocType == "NUMANode" {
						t.Errorf("CPU %d: hwloc has no %s for it, we say %d", id, hwlocType, attr(c))
					}
				}
				got, _ := partition(ourGroups(topo, covered, attr), covered)
				if !slices.Equal(got, want) {
					t.Errorf("%s partition:\n got %d groups %v\nwant %d groups %v", hwlocType, len(got), got, len(want), want)
				}
			}
			compareLevel("Package", func(c CPU) int { return c.Socket })
			compareLevel("NUMANode", func(c CPU) int { return c.NUMA })
			if unit, ok := hwlocComputeUnits[c.name]; ok {
				for _, core := range view.objects["Core"] {
					if core.Size() != 1 {
						t.Errorf("hwloc Core %s has more than one PU: hwloc no longer splits compute units here", core)
					}
				}
				view.objects["Core"] = view.objects[unit]
			}
			if len(view.objects["Core"]) > 0 {
				compareLevel("Core", func(c CPU) int { return c.Core })
			}
			level := 0
			for _, g := range topo.LLCGroups {
				level = max(level, g.Level)
			}
			if level > 0 {
				compareLevel("L"+strconv.Itoa(level)+"Cache", func(c CPU) int { return c.L3 })
			} else if n := len(view.objects["L3Cache"]); n > 0 {
				t.Errorf("hwloc shows %d L3 caches, we found no cache information", n)
			}
			compared.Add(1)
		})
	}
	t.Cleanup(func() {
		if n := compared.Load(); n < 20 {
			t.Errorf("only %d hwloc machines compared", n)
		}
	})

}
