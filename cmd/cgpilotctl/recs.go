package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	local "github.com/cgpilot/cgpilot/api/local"
)

func init() {
	register("recs", command{summary: "right-sizing per container: usage, requests, recommendation, policy, state (local agent API)", run: runRecs})
}

func runRecs(args []string, stdout, stderr io.Writer) int {
	recs, code, ok := fetchView[[]local.RecView](viewCmd{name: "recs", path: local.PathRecs}, args, stdout, stderr)
	if !ok {
		return code
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPOD\tCONTAINER\tCPU P50/P95/MAX\tMEM P50/P95/MAX\tREQUEST\tLIMIT\tRECOMMENDED\tPOLICY\tMODE\tSTATE")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s/%s\t%s/%s/%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Pod, r.Container,
			local.FormatCPU(r.CPUP50), local.FormatCPU(r.CPUP95), local.FormatCPU(r.CPUMax),
			local.HumanMemory(r.MemP50), local.HumanMemory(r.MemP95), local.HumanMemory(r.MemMax),
			dash(r.Request), dash(r.Limit), dash(r.Recommendation), dash(r.Policy), dash(r.Mode), dash(r.State))
	}
	tw.Flush()
	return 0
}
