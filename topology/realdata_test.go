//go:build linux

package topology

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cgpilot/cgpilot/test/tier"
	"k8s.io/utils/cpuset"
)

// cadvisorMachineInfo is the part of cadvisor's MachineInfo (what the
// kubelet's CPU manager reads) that describes CPU topology.
type cadvisorMachineInfo struct {
	NumCores   int `json:"num_cores"`
	NumSockets int `json:"num_sockets"`
	Topology   []struct {
		NodeID int `json:"node_id"`
		Cores  []struct {
			ThreadIDs []int `json:"thread_ids"`
			SocketID  int   `json:"socket_id"`
		} `json:"cores"`
		Caches []struct {
			Level int `json:"level"`
		} `json:"caches"`
	} `json:"topology"`
}

// TestMustGatherNodes discovers the two OpenShift must-gather nodes and
// checks them against cadvisor's machineinfo.json captured on the same
// nodes (an oracle we did not write), and the IRQ facts of the capture.
func TestMustGatherNodes(t *testing.T) {
	dir := tier.SharedData(t, "nto-mustgather-irq-sysinfo")
	for _, node := range []string{"bare-metal-master.internal", "bare-metal-worker1.internal"} {
		t.Run(node, func(t *testing.T) {
			root := unpackShared(t, filepath.Join(dir, node+".sysinfo.tgz"))
			topo, warns, err := DiscoverRoot(root)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range warns {
				t.Errorf("unexpected warning on a complete capture: %s", w)
			}
			b, err := os.ReadFile(filepath.Join(root, "machineinfo.json"))
			if err != nil {
				t.Fatal(err)
			}
			var mi cadvisorMachineInfo
			if err := json.Unmarshal(b, &mi); err != nil {
				t.Fatal(err)
			}
			if got := topo.Online().Size(); got != mi.NumCores {
				t.Errorf("online CPUs = %d, cadvisor num_cores = %d", got, mi.NumCores)
			}
			if got := topo.Counts().Sockets; got != mi.NumSockets {
				t.Errorf("sockets = %d, cadvisor = %d", got, mi.NumSockets)
			}
			for _, n := range mi.Topology {
				node := cpuset.New()
				for _, c := range n.Cores {
					threads := cpuset.New(c.ThreadIDs...)
					node = node.Union(threads)
					first, _ := topo.CPU(c.ThreadIDs[0])
					if got := topo.CoreCPUs(first.Core); !got.Equals(threads) {
						t.Errorf("core of CPU %d = %s, cadvisor %s", first.ID, got, threads)
					}
				}
				if got := topo.NUMACPUs(n.NodeID); !got.Equals(node) {
					t.Errorf("NUMA node %d = %s, cadvisor %s", n.NodeID, got, node)
				}
			}
			checkIRQsAgainstSummary(t, dir, node, topo)
		})
	}
}

// checkIRQsAgainstSummary compares our IRQ map with irq_affinity_summary.csv,
// a flattening of the same capture written by the data collector's own
// parser (an independent reading, not ours).
func checkIRQsAgainstSummary(t *testing.T, dir, node string, topo *Topology) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "irq_affinity_summary.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	byNum := map[int]IRQ{}
	for _, q := range topo.IRQs {
		byNum[q.Number] = q
	}
	checked := 0
	for _, r := range rows[1:] {
		if r[0] != node {
			continue
		}
		n, err := strconv.Atoi(r[1])
		if err != nil {
			t.Fatalf("csv irq %q", r[1])
		}
		q, ok := byNum[n]
		if !ok {
			t.Errorf("irq %d (%s) missing", n, r[4])
			continue
		}
		smp, _ := parseCPUList(r[5])
		eff, _ := parseCPUList(r[6])
		// The summary keeps only the last word of the action names
		// ("PCIe PME, pciehp" -> "pciehp"); /proc/interrupts has them all.
		if lastWord(q.Name) != r[4] || q.Chip != r[2] || !q.SMPAffinity.Equals(smp) || !q.EffectiveAffinity.Equals(eff) {
			t.Errorf("irq %d: got %q %q smp=%s eff=%s, summary %q %q smp=%s eff=%s", n, q.Chip, q.Name, q.SMPAffinity, q.EffectiveAffinity, r[2], r[4], smp, eff)
		}
		checked++
	}
	if checked != len(topo.IRQs) {
		t.Errorf("summary has %d IRQs for %s, we found %d", checked, node, len(topo.IRQs))
	}
}

// TestMustGatherIRQFacts checks the facts the capture's provenance states.
func TestMustGatherIRQFacts(t *testing.T) {
	dir := tier.SharedData(t, "nto-mustgather-irq-sysinfo")
	master, _, err := DiscoverRoot(unpackShared(t, filepath.Join(dir, "bare-metal-master.internal.sysinfo.tgz")))
	if err != nil {
		t.Fatal(err)
	}
	find := func(topo *Topology, name string) IRQ {
		t.Helper()
		for _, q := range topo.IRQs {
			if q.Name == name {
				return q
			}
		}
		t.Fatalf("no IRQ %q", name)
		return IRQ{}
	}
	if q := find(master, "nvme0q1"); q.Kind != IRQNVMe || q.Queue != "nvme0q1" || q.CPUs().String() != "1" {
		t.Errorf("nvme0q1 = %+v, want nvme queue on CPU 1", q)
	}
	if q := find(master, "i40e-eno12399-TxRx-0"); q.Kind != IRQNet || q.CPUs().String() != "88" {
		t.Errorf("i40e-eno12399-TxRx-0 = %+v, want net queue on CPU 88", q)
	}
	if q := find(master, "nvme0q0"); q.Kind != IRQNVMe || q.ServesIOQueue() {
		t.Errorf("nvme0q0 is the admin queue, got %+v", q)
	}
	kinds := map[IRQKind]int{}
	for _, q := range master.IRQs {
		kinds[q.Kind]++
	}
	if kinds[IRQNVMe] < 400 || kinds[IRQNet] < 800 {
		t.Errorf("master IRQ kinds = %v, want >400 nvme and >800 net", kinds)
	}

	worker, _, err := DiscoverRoot(unpackShared(t, filepath.Join(dir, "bare-metal-worker1.internal.sysinfo.tgz")))
	if err != nil {
		t.Fatal(err)
	}
	if got := worker.Isolated().String(); got != "0-4,11-79" {
		t.Errorf("worker1 isolated = %s, want 0-4,11-79 (isolcpus)", got)
	}
	if got := worker.Reserved.String(); got != "5-10" {
		t.Errorf("worker1 reserved = %s, want the housekeeping CPUs 5-10", got)
	}
	// The 80 managed NVMe IO queues land one per CPU, on isolated CPUs too.
	nvmeCPUs := cpuset.New()
	queues := 0
	for _, q := range worker.IRQs {
		if q.Kind == IRQNVMe && q.ServesIOQueue() {
			queues++
			nvmeCPUs = nvmeCPUs.Union(q.CPUs())
		}
	}
	if queues != 80 || nvmeCPUs.String() != "0-79" {
		t.Errorf("worker1: %d nvme IO queues on %s, want 80 on 0-79", queues, nvmeCPUs)
	}
}

// TestGhwSnapshots discovers every ghw snapshot (real machines) and checks
// the shapes listed in the data's PROVENANCE.md. These facts come from the
// data collector's parser, a reading independent of ours but not hwloc.
func TestGhwSnapshots(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: unpacking every shared-data machine takes minutes on a busy host")
	}
	dir := tier.SharedData(t, "ghw-sysfs-snapshots")
	type shape struct{ cpus, online, sockets, nodes, cores, llc int }
	want := map[string]shape{
		"linux-amd64-415ee03b8c4d1c4f07ae2e9d8b3d3d6d": {16, 16, 1, 1, 12, 1}, // i7-1270P hybrid
		"linux-amd64-61797caf7c0b6bca1725ad7975ed4773": {12, 12, 1, 1, 6, 2},  // Ryzen 5 1600, 2 CCX
		"linux-amd64-8581cf3a529e5d8b97ea876eade2f60d": {24, 24, 2, 2, 12, 2}, // 2S Xeon L5640
		"linux-amd64-accel":                            {2, 2, 2, 1, 2, 2},
		"linux-amd64-accel-nvidia":                     {8, 8, 1, 1, 8, 1},
		"linux-amd64-offlineCPUs":                      {4, 2, 2, 1, 2, 2},
		"linux-arm64-c288e0776090cd558ef793b2a4e61939": {1, 1, 1, 1, 1, 1},
		// s390x: the summary counts L3 groups only; its last level is an
		// L2 shared by all 8 CPUs, which is one LLC group.
		"linux-s390x-snapshot": {8, 8, 1, 1, 4, 1},
	}
	archives, _ := filepath.Glob(filepath.Join(dir, "*.tar.gz"))
	if len(archives) != len(want) {
		t.Fatalf("%d ghw snapshots, want %d", len(archives), len(want))
	}
	for _, a := range archives {
		name := filepath.Base(a)[:len(filepath.Base(a))-len(".tar.gz")]
		t.Run(name, func(t *testing.T) {
			w, ok := want[name]
			if !ok {
				t.Fatalf("no expected shape for %s", name)
			}
			topo, warns, err := DiscoverRoot(unpackShared(t, a))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range warns {
				t.Logf("warning: %s", w)
			}
			c := topo.Counts()
			got := shape{c.CPUs, c.Online, c.Sockets, c.NUMANodes, c.Cores, c.LLCGroups}
			if got != w {
				t.Errorf("shape %+v, want %+v", got, w)
			}
			if name == "linux-amd64-offlineCPUs" && !slices.Equal(topo.Online().List(), []int{0, 1}) {
				t.Errorf("online = %s, want 0-1", topo.Online())
			}
		})
	}
}

func lastWord(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}
