package main

import (
	"fmt"
	"io"
	"time"

	local "github.com/cgpilot/cgpilot/api/local"
)

func init() {
	registerView(viewCmd{name: "events", path: local.PathEvents, summary: "recent agent events: allocations, refusals, releases, drift (local agent API)"}, printEvents)
}

func printEvents(w io.Writer, evs []local.EventRecord) {
	tw := newTable(w)
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
