package main

import (
	"fmt"
	"io"

	local "github.com/cgpilot/cgpilot/api/local"
)

func init() {
	registerView(viewCmd{name: "recs", path: local.PathRecs, summary: "right-sizing per container: usage, requests, recommendation, policy, state (local agent API)"}, printRecs)
}

func printRecs(w io.Writer, recs []local.RecView) {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAMESPACE\tPOD\tCONTAINER\tCPU P50/P95/MAX\tMEM P50/P95/MAX\tREQUEST\tLIMIT\tRECOMMENDED\tPOLICY\tMODE\tSTATE")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s/%s\t%s/%s/%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Pod, r.Container,
			local.FormatCPU(r.CPUP50), local.FormatCPU(r.CPUP95), local.FormatCPU(r.CPUMax),
			local.HumanMemory(r.MemP50), local.HumanMemory(r.MemP95), local.HumanMemory(r.MemMax),
			dash(r.Request), dash(r.Limit), dash(r.Recommendation), dash(r.Policy), dash(r.Mode), dash(r.State))
	}
	tw.Flush()
}
