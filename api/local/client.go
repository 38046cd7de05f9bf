package local

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// DefaultSocket is where the agent serves its local API.
const DefaultSocket = "/run/cgpilot/agent.sock"

// maxBody bounds an answer read from the socket.
const maxBody = 64 << 20

// DefaultStartingWait is how long a client waits for an agent that answers
// 503 "starting": a restarted agent serves its socket within a second and
// its restored pool state after its first sweep, normally a second later
// (measured 1.4-1.5 s from the stop under TCG), longer on a starved node.
const DefaultStartingWait = 30 * time.Second

// startingPoll is how often a starting agent is asked again.
const startingPoll = 250 * time.Millisecond

// Client talks to an agent's local API over its unix socket.
type Client struct {
	Socket string
	// StartingWait bounds how long Raw asks again while the agent answers
	// 503 (its state not restored yet); 0 returns that answer at once.
	StartingWait time.Duration
	hc           *http.Client
}

// NewClient returns a client of the agent listening on socket.
func NewClient(socket string) *Client {
	return &Client{Socket: socket, StartingWait: DefaultStartingWait, hc: &http.Client{
		Timeout: 10 * time.Second,
		// One question, one connection: the agent serves a few
		// connections at once, and a kept-alive one would hold a slot
		// after the client is dropped.
		Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}},
	}}
}

// Raw fetches path with query q and returns the body of a 200 answer. An
// agent that answers 503 is starting: it is asked again every startingPoll
// for up to StartingWait, and its last answer is the error after that.
func (c *Client) Raw(ctx context.Context, path string, q url.Values) ([]byte, error) {
	deadline := time.Now().Add(c.StartingWait)
	for {
		body, starting, err := c.raw(ctx, path, q)
		if !starting || c.StartingWait <= 0 {
			return body, err
		}
		if !time.Now().Add(startingPoll).Before(deadline) {
			return nil, fmt.Errorf("%w (asked for %v)", err, c.StartingWait)
		}
		t := time.NewTimer(startingPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// raw is one question; starting reports a 503 answer.
func (c *Client) raw(ctx context.Context, path string, q url.Values) (body []byte, starting bool, err error) {
	u := url.URL{Scheme: "http", Host: "agent", Path: path, RawQuery: q.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("agent API %s: %w (is cgpilot-agent running, and may you use its socket?)", c.Socket, err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, false, fmt.Errorf("agent API %s: %w", c.Socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e ErrorView
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			e.Error = resp.Status
		}
		return nil, resp.StatusCode == http.StatusServiceUnavailable, fmt.Errorf("agent: %s", e.Error)
	}
	return body, false, nil
}

// Get fetches path into v.
func (c *Client) Get(ctx context.Context, path string, q url.Values, v any) error {
	body, err := c.Raw(ctx, path, q)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("agent API %s %s: %w", c.Socket, path, err)
	}
	return nil
}

// Pods returns every pod of the node.
func (c *Client) Pods(ctx context.Context) ([]PodView, error) {
	var v []PodView
	return v, c.Get(ctx, PathPods, nil, &v)
}

// Pools returns the pools and the exclusive allocations.
func (c *Client) Pools(ctx context.Context) (PoolsView, error) {
	var v PoolsView
	return v, c.Get(ctx, PathPools, nil, &v)
}

// Explain returns one pod's decision and cgroups; pod is NAMESPACE/NAME.
func (c *Client) Explain(ctx context.Context, pod string) (ExplainView, error) {
	var v ExplainView
	return v, c.Get(ctx, PathExplain, url.Values{"pod": {pod}}, &v)
}

// Events returns the agent's recent Events, of one pod (NAMESPACE/NAME)
// when pod is not empty.
func (c *Client) Events(ctx context.Context, pod string) ([]EventRecord, error) {
	var v []EventRecord
	q := url.Values{}
	if pod != "" {
		q.Set("pod", pod)
	}
	return v, c.Get(ctx, PathEvents, q, &v)
}
