package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"

	local "github.com/cgpilot/cgpilot/api/local"
)

func init() {
	register("pods", command{summary: "list this node's pods with their CPU pool (local agent API)", run: runPods})
}

// onlineFlags are the flags every online command takes.
type onlineFlags struct {
	socket string
	output string
}

func parseOnline(name string, args []string, stderr io.Writer, positional int) (*onlineFlags, []string, bool) {
	fs := flag.NewFlagSet("cgpilotctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &onlineFlags{}
	fs.StringVar(&o.socket, "socket", local.DefaultSocket, "agent's local API socket")
	fs.StringVar(&o.output, "o", "table", "output: table or json")
	if err := fs.Parse(args); err != nil {
		return nil, nil, false
	}
	if o.output != "table" && o.output != "json" {
		fmt.Fprintf(stderr, "cgpilotctl %s: -o %q: want table or json\n", name, o.output)
		return nil, nil, false
	}
	if fs.NArg() != positional {
		fmt.Fprintf(stderr, "cgpilotctl %s: want %d argument(s), got %d\n", name, positional, fs.NArg())
		return nil, nil, false
	}
	return o, fs.Args(), true
}

// get fetches path from the agent's local API into v; with -o json the
// raw body is copied to stdout instead.
func (o *onlineFlags) get(path string, q url.Values, v any, stdout io.Writer) error {
	c := local.NewClient(o.socket)
	if o.output == "json" {
		body, err := c.Raw(context.Background(), path, q)
		if err != nil {
			return err
		}
		_, err = stdout.Write(body)
		return err
	}
	return c.Get(context.Background(), path, q, v)
}

func fail(stderr io.Writer, name string, err error) int {
	fmt.Fprintf(stderr, "cgpilotctl %s: %v\n", name, err)
	return 1
}

func runPods(args []string, stdout, stderr io.Writer) int {
	o, _, ok := parseOnline("pods", args, stderr, 0)
	if !ok {
		return 2
	}
	var pods []local.PodView
	if err := o.get(local.PathPods, nil, &pods, stdout); err != nil {
		return fail(stderr, "pods", err)
	}
	if o.output == "json" {
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tQOS\tPOOL\tSTATE\tCPUS\tREASON")
	for _, p := range pods {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.QoS, p.Pool, p.State, dash(p.CPUs), dash(p.Reason))
	}
	tw.Flush()
	return 0
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
