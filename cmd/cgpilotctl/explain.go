package main

import (
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"

	local "github.com/cgpilot/cgpilot/api/local"
)

func init() {
	registerView(viewCmd{name: "explain", path: local.PathExplain, summary: "explain one pod's CPU pool decision: explain NAMESPACE/NAME (local agent API)",
		args: 1, query: func(rest []string) (url.Values, error) {
			if !strings.Contains(rest[0], "/") {
				return nil, fmt.Errorf("want NAMESPACE/NAME, got %q", rest[0])
			}
			return url.Values{"pod": {rest[0]}}, nil
		}}, printExplain)
}

func printExplain(w io.Writer, v local.ExplainView) {
	tw := newTable(w)
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
	for _, c := range v.Containers {
		sampled := "not sampled"
		if c.Sampled {
			sampled = "sampled"
		}
		fmt.Fprintf(tw, "CONTAINER\t%s\t%s %s, %s\n", c.Name, c.State, dash(c.ID), sampled)
	}
	if rs := v.Rightsizing; rs != nil {
		fmt.Fprintf(tw, "RIGHTSIZING\tpolicy %s, preset %s, mode %s: %s\n", dash(rs.Policy), dash(rs.Preset), dash(rs.Mode), rs.State)
		if rs.Reason != "" {
			fmt.Fprintf(tw, "WHY\t%s\n", rs.Reason)
		}
		if rs.LastApplied != nil {
			fmt.Fprintf(tw, "LAST APPLIED\t%s\n", rs.LastApplied.Format("2006-01-02 15:04:05Z07:00"))
		}
		for _, c := range rs.Containers {
			for _, r := range []struct {
				name string
				rec  *local.ResourceRecommendation
			}{{"cpu", c.CPU}, {"memory", c.Memory}} {
				if r.rec == nil {
					continue
				}
				line := fmt.Sprintf("%s %s: request %s, target %s (%s..%s)", c.Name, r.name, dash(r.rec.Request), r.rec.Target, r.rec.Lower, r.rec.Upper)
				if r.rec.Next != "" {
					line += ", next " + r.rec.Next
				}
				if r.rec.Note != "" {
					line += " [" + r.rec.Note + "]"
				}
				fmt.Fprintf(tw, "RECOMMENDED\t%s\n", line)
				if r.rec.Explain != "" {
					fmt.Fprintf(tw, "\t%s\n", r.rec.Explain)
				}
			}
		}
	}
	tw.Flush()
	if len(v.Events) > 0 {
		fmt.Fprintln(w)
		printEvents(w, v.Events)
	}
}
