package main

import (
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"

	local "github.com/cgpilot/cgpilot/api/local"
)

func init() {
	register("explain", command{summary: "explain one pod's CPU pool decision: explain NAMESPACE/NAME (local agent API)", run: runExplain})
}

func runExplain(args []string, stdout, stderr io.Writer) int {
	o, rest, ok := parseOnline("explain", args, stderr, 1)
	if !ok {
		return 2
	}
	if !strings.Contains(rest[0], "/") {
		fmt.Fprintf(stderr, "cgpilotctl explain: want NAMESPACE/NAME, got %q\n", rest[0])
		return 2
	}
	var v local.ExplainView
	if err := o.get(local.PathExplain, url.Values{"pod": {rest[0]}}, &v, stdout); err != nil {
		return fail(stderr, "explain", err)
	}
	if o.output == "json" {
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "POD\t%s/%s (%s)\n", v.Namespace, v.Name, v.UID)
	fmt.Fprintf(tw, "QOS\t%s\n", v.QoS)
	fmt.Fprintf(tw, "POOL\t%s\n", v.Pool)
	fmt.Fprintf(tw, "STATE\t%s\n", v.State)
	fmt.Fprintf(tw, "CPUS\t%s\n", dash(v.CPUs))
	fmt.Fprintf(tw, "DEMAND\t%d cpus from limits/requests\n", v.DemandCPUs)
	fmt.Fprintf(tw, "DECISION\t%s\n", v.Decision)
	keys := make([]string, 0, len(v.Annotations))
	for k := range v.Annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(tw, "ANNOTATION\t%s=%s\n", k, v.Annotations[k])
	}
	for _, c := range v.Cgroups {
		val := c.CPUs
		if c.Error != "" {
			val = "error: " + c.Error
		}
		fmt.Fprintf(tw, "CGROUP\t%s\tcpuset.cpus=%s\n", c.Path, val)
	}
	tw.Flush()
	if len(v.Events) > 0 {
		fmt.Fprintln(stdout)
		printEvents(stdout, v.Events)
	}
	return 0
}
