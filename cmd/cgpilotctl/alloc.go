//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/internal/cpulist"
	"github.com/cgpilot/cgpilot/topology"
)

func init() {
	register("alloc", command{
		summary: "pick (or validate) exclusive CPUs on a machine or captured tree",
		run:     runAlloc,
	})
}

// allocResult and allocFailure are the documented output shapes of
// `cgpilotctl alloc`.
type allocResult struct {
	CPUs string `json:"cpus"`
}

type allocFailure struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

// Reasons for failures outside the allocator.
const (
	reasonUsage     = "usage"
	reasonDiscovery = "discovery-failed"
)

func runAlloc(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("alloc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var roots rootFlags
	roots.register(fs)
	n := fs.Int("cpus", 0, "number of exclusive CPUs")
	policy := fs.String("policy", string(topology.FullCores), "full-cores, spread or bind-all")
	numa := fs.String("numa", string(topology.NUMAPreferSingle), "single, prefer-single or spread")
	io := fs.String("io-queues", string(topology.IOAvoid), "avoid, spread or any")
	reserved := fs.String("reserved", "", "CPUs never allocated (Linux list), added to the kernel's housekeeping CPUs")
	taken := fs.String("taken", "", "CPUs already granted exclusively (Linux list)")
	explicit := fs.String("cpuset", "", "validate this cpuset instead of choosing one")
	capRatio := fs.Float64("cap", 0, "largest fraction of allocatable CPUs that may be exclusive (default 2/3)")
	shared := fs.String("shared", "", "sizes of the shared instances in millicores, comma-separated (e.g. 2000,1500)")
	overcommit := fs.Float64("overcommit", 0, "overcommit ratio of the shared pool (default 1)")
	output := fs.String("o", "text", "output format: text or json")
	if err := fs.Parse(args); err != nil {
		return failAlloc(stdout, reasonUsage, err, 2)
	}
	if fs.NArg() > 0 {
		return failAlloc(stdout, reasonUsage, fmt.Errorf("unexpected arguments %q", fs.Args()), 2)
	}
	if *output != "text" && *output != "json" {
		return failAlloc(stdout, reasonUsage, fmt.Errorf("-o must be text or json, not %q", *output), 2)
	}
	sets := map[string]*cpuset.CPUSet{}
	var res, tk, ex cpuset.CPUSet
	sets["--reserved"], sets["--taken"], sets["--cpuset"] = &res, &tk, &ex
	for name, val := range map[string]string{"--reserved": *reserved, "--taken": *taken, "--cpuset": *explicit} {
		set, err := cpulist.Parse(val)
		if err != nil {
			return failAlloc(stdout, string(topology.ReasonInvalidRequest), fmt.Errorf("%s %q: %w", name, val, err), 2)
		}
		*sets[name] = set
	}
	sizes, err := parseMilliList(*shared)
	if err != nil {
		return failAlloc(stdout, string(topology.ReasonInvalidRequest), fmt.Errorf("--shared %q: %w", *shared, err), 2)
	}
	topo, warns, err := roots.discover()
	if err != nil {
		return failAlloc(stdout, reasonDiscovery, err, 1)
	}
	for _, w := range warns {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	got, err := topology.Allocate(topo, topology.State{Taken: tk, Reserved: res, CapRatio: *capRatio,
		SharedMilliCPUs: sizes, Overcommit: *overcommit}, topology.Request{
		CPUs: *n, Policy: topology.Policy(*policy), NUMA: topology.NUMAPolicy(*numa), IOQueues: topology.IOPolicy(*io), Explicit: ex,
	})
	if err != nil {
		var ae *topology.AllocError
		if errors.As(err, &ae) {
			return failAlloc(stdout, string(ae.Reason), err, 1)
		}
		return failAlloc(stdout, "internal", err, 1)
	}
	if *output == "json" {
		b, _ := json.Marshal(allocResult{CPUs: got.String()})
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintln(stdout, got.String())
	}
	return 0
}

// failAlloc prints {"error","reason"} on stdout, whatever the output
// format, so scripts always get a machine-readable answer.
func failAlloc(stdout io.Writer, reason string, err error, code int) int {
	b, _ := json.Marshal(allocFailure{Error: err.Error(), Reason: reason})
	fmt.Fprintln(stdout, string(b))
	return code
}

func parseMilliList(s string) ([]int64, error) {
	if s == "" {
		return nil, nil
	}
	var out []int64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("bad millicore size %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}
