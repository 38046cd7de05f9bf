//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree writes a small 2-socket, 8-CPU machine (siblings N and N+4;
// CPUs 0,1,4,5 on socket 0 and NUMA node 0) with an NVMe queue on CPU 0 and
// a NIC queue on CPU 1. It is a unit-test tree for the command's flags
// and output shapes; discovery itself is tested on real captures in
// package topology.
func writeTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"sys/devices/system/cpu/online":         "0-7\n",
		"proc/cmdline":                          "ro quiet\n",
		"proc/interrupts":                       "  CPU0 CPU1 CPU2 CPU3 CPU4 CPU5 CPU6 CPU7\n 24: 1 0 0 0 0 0 0 0 PCI-MSI 1-edge nvme0q1\n 25: 0 1 0 0 0 0 0 0 PCI-MSI 2-edge eth0-TxRx-0\n 26: 0 0 0 0 0 0 0 0 IO-APIC 2-edge timer\n",
		"proc/irq/24/smp_affinity_list":         "0\n",
		"proc/irq/24/effective_affinity_list":   "0\n",
		"proc/irq/25/smp_affinity_list":         "1\n",
		"proc/irq/25/effective_affinity_list":   "1\n",
		"proc/irq/26/smp_affinity_list":         "0-7\n",
		"sys/devices/system/node/node0/cpulist": "0-1,4-5\n",
		"sys/devices/system/node/node1/cpulist": "2-3,6-7\n",
	}
	for cpu := 0; cpu < 8; cpu++ {
		d := "sys/devices/system/cpu/cpu" + itoa(cpu) + "/"
		core := cpu % 4
		socket := core / 2
		files[d+"topology/physical_package_id"] = itoa(socket) + "\n"
		files[d+"topology/core_id"] = itoa(core%2) + "\n"
		files[d+"topology/thread_siblings_list"] = itoa(core) + "," + itoa(core+4) + "\n"
		files[d+"cache/index3/level"] = "3\n"
		files[d+"cache/index3/type"] = "Unified\n"
		files[d+"cache/index3/shared_cpu_list"] = map[int]string{0: "0-1,4-5", 1: "2-3,6-7"}[socket] + "\n"
	}
	for rel, data := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func itoa(i int) string { return string(rune('0' + i)) }

func runCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestTopologyJSON(t *testing.T) {
	root := writeTree(t)
	code, out, stderr := runCmd("topology", "--root", root, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got["cpus"] == nil || got["irqs"] == nil || got["reserved"] == nil {
		t.Fatalf("keys %v, want exactly cpus, irqs, reserved", got)
	}
	var v topologyJSON
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.CPUs) != 8 || v.CPUs[5].Core != 1 || v.CPUs[5].Socket != 0 || v.CPUs[5].NUMA != 0 || v.CPUs[6].L3 != 1 ||
		len(v.CPUs[5].Siblings) != 2 || v.CPUs[5].Siblings[0] != 1 {
		t.Errorf("cpus = %+v", v.CPUs)
	}
	if len(v.IRQs) != 3 || v.IRQs[0].Kind != "nvme" || v.IRQs[0].Queue != "nvme0q1" || v.IRQs[1].Kind != "net" || v.IRQs[2].Kind != "other" ||
		len(v.IRQs[0].CPUs) != 1 || v.IRQs[0].CPUs[0] != 0 {
		t.Errorf("irqs = %+v", v.IRQs)
	}
	// Raw field names, as documented.
	for _, key := range []string{`"id"`, `"online"`, `"core"`, `"socket"`, `"numa"`, `"l3"`, `"siblings"`, `"irq"`, `"name"`, `"kind"`, `"queue"`, `"cpus"`} {
		if !strings.Contains(out, key) {
			t.Errorf("output lacks %s", key)
		}
	}
}

func TestTopologyTable(t *testing.T) {
	code, out, stderr := runCmd("topology", "--root", writeTree(t))
	if code != 0 || !strings.Contains(out, "sockets 2, NUMA nodes 2, cores 4, L3 groups 2") || !strings.Contains(out, "IO-queue CPUs: 0-1") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
}

func TestTopologyErrors(t *testing.T) {
	if code, _, _ := runCmd("topology", "--root", t.TempDir()); code != 1 {
		t.Errorf("empty root: exit %d, want 1", code)
	}
	if code, _, _ := runCmd("topology", "-o", "yaml"); code != 2 {
		t.Errorf("bad -o: exit %d, want 2", code)
	}
}

func TestAlloc(t *testing.T) {
	root := writeTree(t)
	tests := []struct {
		args   []string
		code   int
		cpus   string // on success
		reason string // on failure
	}{
		{[]string{"--cpus", "2"}, 0, "2,6", ""}, // avoid: CPUs 0 and 1 serve queues
		{[]string{"--cpus", "2", "--io-queues", "any"}, 0, "0,4", ""},
		{[]string{"--cpus", "2", "--taken", "2,6"}, 0, "3,7", ""},
		{[]string{"--cpus", "1", "--policy", "spread", "--reserved", "2-3"}, 0, "6", ""},
		{[]string{"--cpus", "4", "--numa", "spread", "--io-queues", "any"}, 0, "0,2,4,6", ""},
		{[]string{"--policy", "bind-all", "--reserved", "0"}, 0, "1-7", ""},
		{[]string{"--cpuset", "2,6"}, 0, "2,6", ""},
		{[]string{"--cpuset", "2,3"}, 1, "", "splits-core"},
		{[]string{"--cpus", "6"}, 1, "", "over-cap"},
		{[]string{"--cpus", "5", "--shared", "2000"}, 1, "", "not-sellable"},
		{[]string{"--cpus", "3", "--shared", "2000", "--overcommit", "2", "--io-queues", "any"}, 0, "0-1,4", ""},
		{[]string{"--cpus", "4", "--shared", "2000", "--overcommit", "2"}, 1, "", "not-sellable"},
		{[]string{"--cpus", "2", "--shared", "2000", "--overcommit", "2"}, 0, "2,6", ""},
		{[]string{"--cpus", "2", "--shared", "2x"}, 2, "", "invalid-request"},
		{[]string{"--cpus", "6", "--numa", "single", "--cap", "1"}, 1, "", "numa-no-fit"},
		{[]string{"--cpus", "-1"}, 1, "", "invalid-request"},
		{[]string{"--cpus", "2", "--policy", "packed"}, 1, "", "invalid-request"},
		{[]string{"--cpus", "2", "--taken", "0-x"}, 2, "", "invalid-request"},
		{[]string{"--cpus", "2", "--bogus"}, 2, "", "usage"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, stderr := runCmd(append([]string{"alloc", "--root", root, "-o", "json"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %s stderr %s", code, tc.code, out, stderr)
			}
			if tc.code == 0 {
				var r allocResult
				if err := json.Unmarshal([]byte(out), &r); err != nil || r.CPUs != tc.cpus {
					t.Fatalf("stdout %q, want cpus %q (%v)", out, tc.cpus, err)
				}
				return
			}
			var f allocFailure
			if err := json.Unmarshal([]byte(out), &f); err != nil || f.Reason != tc.reason || f.Error == "" {
				t.Fatalf("stdout %q, want reason %q (%v)", out, tc.reason, err)
			}
		})
	}
	// The discovery failure is also JSON on stdout.
	code, out, _ := runCmd("alloc", "--root", t.TempDir(), "--cpus", "1")
	if code != 1 || !strings.Contains(out, `"reason":"discovery-failed"`) {
		t.Errorf("exit %d, stdout %s", code, out)
	}
	// Text output is the bare list.
	if code, out, _ := runCmd("alloc", "--root", root, "--cpus", "2"); code != 0 || out != "2,6\n" {
		t.Errorf("text output %q (exit %d)", out, code)
	}
}
