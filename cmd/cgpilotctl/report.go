package main

import (
	"fmt"
	"io"
	"time"

	local "github.com/cgpilot/cgpilot/api/local"
)

func init() {
	register("report", command{summary: "reports to the cluster aggregator: sent, buffered, failing, merged recommendations in use (local agent API)", run: runReport})
}

func runReport(args []string, stdout, stderr io.Writer) int {
	v, code, ok := fetchView[local.AggregatorView](viewCmd{name: "report", path: local.PathAggregator}, args, stdout, stderr)
	if !ok {
		return code
	}
	fetched := "never"
	if v.Fetched != nil {
		fetched = v.Fetched.Format(time.RFC3339)
	}
	fmt.Fprintf(stdout, "aggregator:   %s (a report every %ds)\n", v.URL, v.PeriodSeconds)
	fmt.Fprintf(stdout, "reports:      %d accepted, %d duplicates, %d refused, %d failed attempts\n", v.Accepted, v.Duplicates, v.Rejected, v.Failures)
	fmt.Fprintf(stdout, "buffered:     %d reports, %d bytes (%d merged while away, %d events dropped)\n", v.Buffered, v.BufferedBytes, v.Coalesced, v.DroppedEvents)
	if v.LastError != "" {
		fmt.Fprintf(stdout, "last error:   %s\n", v.LastError)
	}
	fmt.Fprintf(stdout, "merged recs:  %d, %d fresh (used in decisions), fetched %s\n", v.Merged, v.Fresh, fetched)
	if v.FetchError != "" {
		fmt.Fprintf(stdout, "fetch error:  %s (the node's own recommendations are used)\n", v.FetchError)
	}
	return 0
}
