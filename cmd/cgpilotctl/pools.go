package main

import (
	"fmt"
	"io"

	local "github.com/cgpilot/cgpilot/api/local"
)

func init() {
	registerView(viewCmd{name: "pools", path: local.PathPools, summary: "show the shared and exclusive CPU pools (local agent API)"}, printPools)
}

func printPools(w io.Writer, v local.PoolsView) {
	tw := newTable(w)
	fmt.Fprintf(tw, "CPUS\t%s\n", v.CPUs)
	fmt.Fprintf(tw, "RESERVED\t%s\n", dash(v.Reserved))
	fmt.Fprintf(tw, "SHARED POOL\t%s\t(%d pods)\n", dash(v.SharedPool), v.SharedPods)
	fmt.Fprintf(tw, "EXCLUSIVE\t%s\t(%d pods, cap %d cpus)\n", dash(v.Exclusive), v.ExclusivePods, v.ExclusiveCap)
	fmt.Fprintf(tw, "KUBELET STATIC\t%s\n", dash(v.KubeletStatic))
	tw.Flush()
	if len(v.Assignments) > 0 {
		fmt.Fprintln(w)
		tw = newTable(w)
		fmt.Fprintln(tw, "NAMESPACE\tNAME\tCPUS\tISOLATION")
		for _, a := range v.Assignments {
			iso := "isolated"
			if a.ReleaseIsolation {
				iso = "released"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Namespace, a.Name, a.CPUs, iso)
		}
		tw.Flush()
	}
}
