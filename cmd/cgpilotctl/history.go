package main

import (
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/internal/atomicfile"
)

func init() {
	register("history", command{summary: "export the node's usage history as a trace for replay: history --since 7d -o FILE.csv.gz (local agent API)", run: runHistory})
}

func runHistory(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cgpilotctl history", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", local.DefaultSocket, "agent's local API socket")
	since := fs.String("since", "7d", "how far back: 7d, 36h, 90m or an RFC 3339 time")
	out := fs.String("o", "-", "output file (.gz compresses); - for stdout")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "cgpilotctl history: unexpected arguments %q\n", fs.Args())
		return 2
	}
	body, err := local.NewClient(*socket).Raw(context.Background(), local.PathHistory, url.Values{"since": {*since}})
	if err != nil {
		return fail(stderr, "history", err)
	}
	data := body
	if strings.HasSuffix(*out, ".gz") {
		var b strings.Builder
		zw := gzip.NewWriter(&b)
		if _, err := zw.Write(body); err != nil {
			return fail(stderr, "history", err)
		}
		if err := zw.Close(); err != nil {
			return fail(stderr, "history", err)
		}
		data = []byte(b.String())
	}
	if *out == "-" {
		_, err = stdout.Write(data)
	} else {
		err = atomicfile.WriteFile(*out, data, 0o644)
	}
	if err != nil {
		return fail(stderr, "history", err)
	}
	if *out != "-" {
		rows := strings.Count(string(body), "\n") - 1
		fmt.Fprintf(stderr, "cgpilotctl history: %d rows since %s written to %s; try a policy on them with: cgpilotctl replay --trace %s\n", max(rows, 0), *since, *out, *out)
	}
	return 0
}
