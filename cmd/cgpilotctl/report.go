package main

import (
	"fmt"
	"io"
	"time"

	local "github.com/cgpilot/cgpilot/api/local"
)

func init() {
	registerView(viewCmd{name: "report", path: local.PathAggregator, summary: "reports to the cluster aggregator: sent, buffered, failing, merged recommendations in use (local agent API)"}, printReport)
}

func printReport(w io.Writer, v local.AggregatorView) {
	fetched := "never"
	if v.Fetched != nil {
		fetched = v.Fetched.Format(time.RFC3339)
	}
	fmt.Fprintf(w, "aggregator:   %s (a report every %ds)\n", v.URL, v.PeriodSeconds)
	fmt.Fprintf(w, "reports:      %d accepted, %d duplicates, %d refused, %d failed attempts\n", v.Accepted, v.Duplicates, v.Rejected, v.Failures)
	fmt.Fprintf(w, "buffered:     %d reports, %d bytes (%d merged while away, %d events dropped)\n", v.Buffered, v.BufferedBytes, v.Coalesced, v.DroppedEvents)
	if v.LastError != "" {
		fmt.Fprintf(w, "last error:   %s\n", v.LastError)
	}
	fmt.Fprintf(w, "merged recs:  %d, %d fresh (used in decisions), fetched %s\n", v.Merged, v.Fresh, fetched)
	if v.FetchError != "" {
		fmt.Fprintf(w, "fetch error:  %s (the node's own recommendations are used)\n", v.FetchError)
	}
}
