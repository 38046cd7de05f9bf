package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	local "github.com/cgpilot/cgpilot/api/local"
)

func init() {
	register("events", command{summary: "recent agent events: allocations, refusals, releases, drift (local agent API)", run: runEvents})
}

func runEvents(args []string, stdout, stderr io.Writer) int {
	evs, code, ok := fetchView[[]local.EventRecord](viewCmd{name: "events", path: local.PathEvents}, args, stdout, stderr)
	if !ok {
		return code
	}
	printEvents(stdout, evs)
	return 0
}

func printEvents(w io.Writer, evs []local.EventRecord) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tTYPE\tREASON\tOBJECT\tMESSAGE")
	for _, e := range evs {
		obj := "node"
		if e.Pod != "" {
			obj = e.Namespace + "/" + e.Pod
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Time.Format(time.TimeOnly), e.Type, e.Reason, obj, e.Message)
	}
	tw.Flush()
}
