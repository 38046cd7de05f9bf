//go:build linux

package topology

import (
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/cgpilot/cgpilot/test/tier"
)

// discovered caches topologies of archives by path, so that the oracle,
// property and benchmark code unpack each capture once per test binary.
var discovered sync.Map // path -> *Topology

func discoverArchive(t testing.TB, archive string) *Topology {
	t.Helper()
	if v, ok := discovered.Load(archive); ok {
		return v.(*Topology)
	}
	topo, _, err := DiscoverRoot(unpackShared(t, archive))
	if err != nil {
		t.Fatalf("%s: %v", archive, err)
	}
	discovered.Store(archive, topo)
	return topo
}

// realMachine is one captured machine from the shared data.
type realMachine struct {
	name    string
	archive string
}

// realMachines lists every capture in the shared data: all hwloc tarballs
// (the synthetic "fake*" ones excluded), the ghw snapshots and the
// must-gather nodes. It skips when the data is absent.
func realMachines(t testing.TB) []realMachine {
	var out []realMachine
	hw := tier.SharedData(t, "hwloc-linux-sysfs")
	tarballs, _ := filepath.Glob(filepath.Join(hw, "tarballs", "*.tar.bz2"))
	for _, a := range tarballs {
		name := strings.TrimSuffix(filepath.Base(a), ".tar.bz2")
		if strings.HasPrefix(name, "fake") || strings.Contains(name, "fake-") {
			continue
		}
		out = append(out, realMachine{"hwloc/" + name, a})
	}
	ghw := tier.SharedData(t, "ghw-sysfs-snapshots")
	snaps, _ := filepath.Glob(filepath.Join(ghw, "*.tar.gz"))
	for _, a := range snaps {
		out = append(out, realMachine{"ghw/" + strings.TrimSuffix(filepath.Base(a), ".tar.gz"), a})
	}
	nto := tier.SharedData(t, "nto-mustgather-irq-sysinfo")
	nodes, _ := filepath.Glob(filepath.Join(nto, "*.sysinfo.tgz"))
	for _, a := range nodes {
		out = append(out, realMachine{"nto/" + strings.TrimSuffix(filepath.Base(a), ".sysinfo.tgz"), a})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	if len(out) < 40 {
		t.Fatalf("only %d real machines in the shared data", len(out))
	}
	return out
}
