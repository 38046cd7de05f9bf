package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/cgpilot/cgpilot/agent"
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
	fs.StringVar(&o.socket, "socket", agent.DefaultConfig().SocketPath, "agent's local API socket")
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

// get fetches path from the agent's unix socket into v; with -o json the
// raw body is copied to stdout instead.
func (o *onlineFlags) get(path string, q url.Values, v any, stdout io.Writer) error {
	c := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", o.socket)
		}},
	}
	u := url.URL{Scheme: "http", Host: "agent", Path: path, RawQuery: q.Encode()}
	resp, err := c.Get(u.String())
	if err != nil {
		return fmt.Errorf("agent API %s: %w (is cgpilot-agent running, and are you root?)", o.socket, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		return fmt.Errorf("agent: %s", e.Error)
	}
	if o.output == "json" {
		_, err := stdout.Write(body)
		return err
	}
	return json.Unmarshal(body, v)
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
	var pods []agent.PodView
	if err := o.get("/v1/pods", nil, &pods, stdout); err != nil {
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
