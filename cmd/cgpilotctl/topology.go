//go:build linux

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cgpilot/cgpilot/topology"
)

func init() {
	register("topology", command{
		summary: "show CPU, NUMA, cache and IO-queue topology of a machine or captured tree",
		run:     runTopology,
	})
}

// rootFlags are the host roots: --root DIR holds sys/ and proc/;
// --path.sysfs and --path.procfs override each (node_exporter style).
type rootFlags struct {
	root, sysfs, procfs string
}

func (r *rootFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.root, "root", "/", "directory holding sys/ and proc/ (a captured tree, or / for this machine)")
	fs.StringVar(&r.sysfs, "path.sysfs", "", "sysfs mount point (default <root>/sys)")
	fs.StringVar(&r.procfs, "path.procfs", "", "procfs mount point (default <root>/proc)")
}

func (r *rootFlags) discover() (*topology.Topology, []topology.Warning, error) {
	sys, proc := r.sysfs, r.procfs
	if sys == "" {
		sys = filepath.Join(r.root, "sys")
	}
	if proc == "" {
		proc = filepath.Join(r.root, "proc")
	}
	return topology.Discover(sys, proc)
}

// topologyJSON is the documented output shape of `cgpilotctl topology -o json`.
type topologyJSON struct {
	CPUs     []topology.CPUSummary `json:"cpus"`
	IRQs     []topology.IRQSummary `json:"irqs"`
	Reserved []int                 `json:"reserved"`
}

func runTopology(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("topology", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var roots rootFlags
	roots.register(fs)
	output := fs.String("o", "table", "output format: table or json")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "topology: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *output != "table" && *output != "json" {
		fmt.Fprintf(stderr, "topology: -o must be table or json, not %q\n", *output)
		return 2
	}
	topo, warns, err := roots.discover()
	if err != nil {
		fmt.Fprintf(stderr, "topology: %v\n", err)
		return 1
	}
	for _, w := range warns {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	s := topo.Summarize()
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(topologyJSON{CPUs: s.CPUs, IRQs: s.IRQs, Reserved: s.Reserved}); err != nil {
			fmt.Fprintf(stderr, "topology: %v\n", err)
			return 1
		}
		return 0
	}
	writeTopologyTable(stdout, topo, s)
	return 0
}

func writeTopologyTable(w io.Writer, topo *topology.Topology, s topology.Summary) {
	c := topo.Counts()
	fmt.Fprintf(w, "CPUs %d (online %d), sockets %d, NUMA nodes %d, cores %d, L3 groups %d\n",
		c.CPUs, c.Online, c.Sockets, c.NUMANodes, c.Cores, c.LLCGroups)
	fmt.Fprintf(w, "isolated: %s\nreserved: %s\nIO-queue CPUs: %s\n\n",
		orNone(topo.Isolated().String()), orNone(topo.Reserved.String()), orNone(topo.IOCPUs().String()))
	queues := topo.IOQueuesByCPU()
	tw := newTable(w)
	fmt.Fprintln(tw, "CPU\tONLINE\tCORE\tSOCKET\tNUMA\tL3\tSIBLINGS\tIO QUEUES")
	for _, cpu := range s.CPUs {
		fmt.Fprintf(tw, "%d\t%t\t%d\t%d\t%d\t%d\t%s\t%d\n", cpu.ID, cpu.Online, cpu.Core, cpu.Socket, cpu.NUMA, cpu.L3,
			joinInts(cpu.Siblings), len(queues[cpu.ID]))
	}
	tw.Flush()
	kinds := map[topology.IRQKind]int{}
	for _, q := range s.IRQs {
		kinds[q.Kind]++
	}
	fmt.Fprintf(w, "\nIRQs: %d (nvme %d, net %d, virtio %d, other %d)\n", len(s.IRQs),
		kinds[topology.IRQNVMe], kinds[topology.IRQNet], kinds[topology.IRQVirtio], kinds[topology.IRQOther])
}

func joinInts(ids []int) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(id)
	}
	return strings.Join(parts, ",")
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
