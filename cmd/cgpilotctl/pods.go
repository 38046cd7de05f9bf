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
	registerView(viewCmd{name: "pods", path: local.PathPods, summary: "list this node's pods with their CPU pool (local agent API)"}, printPods)
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

// viewCmd is an online command that shows one view of the local API.
type viewCmd struct {
	name, path, summary string
	// args is how many positional arguments it takes; query turns them
	// into the request's query (an error is a usage error).
	args  int
	query func(rest []string) (url.Values, error)
}

// fetchView runs an online view command up to its table: the flags and
// arguments (exit 2 when they are wrong), one GET of the view (exit 1
// when it fails), and with -o json the body as it came (exit 0). ok says
// that v is to be printed as a table; otherwise the command returns code.
func fetchView[T any](c viewCmd, args []string, stdout, stderr io.Writer) (v T, code int, ok bool) {
	o, rest, ok := parseOnline(c.name, args, stderr, c.args)
	if !ok {
		return v, 2, false
	}
	var q url.Values
	if c.query != nil {
		var err error
		if q, err = c.query(rest); err != nil {
			fmt.Fprintf(stderr, "cgpilotctl %s: %v\n", c.name, err)
			return v, 2, false
		}
	}
	if err := o.get(c.path, q, &v, stdout); err != nil {
		return v, fail(stderr, c.name, err), false
	}
	if o.output == "json" {
		return v, 0, false
	}
	return v, 0, true
}

// registerView registers the online view command c: fetchView, then the
// view printed by table (exit 0). Each view command is its table.
func registerView[T any](c viewCmd, table func(w io.Writer, v T)) {
	register(c.name, command{summary: c.summary, run: func(args []string, stdout, stderr io.Writer) int {
		v, code, ok := fetchView[T](c, args, stdout, stderr)
		if ok {
			table(stdout, v)
		}
		return code
	}})
}

func printPods(w io.Writer, pods []local.PodView) {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tQOS\tPOOL\tSTATE\tCPUS\tREASON")
	for _, p := range pods {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.QoS, p.Pool, p.State, dash(p.CPUs), dash(p.Reason))
	}
	tw.Flush()
}

// newTable is the layout of the view commands' tables, one for all.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
