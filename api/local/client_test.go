package local

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serve answers the client's questions on a unix socket in a test
// directory: 503 "starting" for the first starting questions, then 200.
func serve(t *testing.T, starting int32) (*Client, *atomic.Int32) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if asked.Add(1) <= starting {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"starting: the pool state is not restored yet"}`))
			return
		}
		_, _ = w.Write([]byte(`{"cpus":"0-1"}`))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return NewClient(sock), &asked
}

func TestClientWaitsForAStartingAgent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		starting int32         // 503 answers before the 200
		wait     time.Duration // StartingWait
		asked    int32
		err      string
	}{
		{name: "ready", starting: 0, wait: DefaultStartingWait, asked: 1},
		{name: "starting then ready", starting: 3, wait: DefaultStartingWait, asked: 4},
		{name: "no wait", starting: 3, wait: 0, asked: 1, err: "agent: starting: the pool state is not restored yet"},
		{name: "still starting", starting: 100, wait: 600 * time.Millisecond, asked: 3, err: "not restored yet (asked for 600ms)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, asked := serve(t, tc.starting)
			c.StartingWait = tc.wait
			v, err := c.Pools(context.Background())
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
			} else if err != nil || v.CPUs != "0-1" {
				t.Fatalf("got %+v, %v; want the pools", v, err)
			}
			if got := asked.Load(); got != tc.asked {
				t.Errorf("asked %d times, want %d", got, tc.asked)
			}
		})
	}
}

// A canceled context ends the wait at once with the agent's answer.
func TestClientStartingWaitEndsWithTheContext(t *testing.T) {
	c, asked := serve(t, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	_, err := c.Pools(ctx)
	if err == nil || !strings.Contains(err.Error(), "starting") {
		t.Fatalf("error %v, want the starting answer", err)
	}
	if n := asked.Load(); n < 1 || n > 3 {
		t.Errorf("asked %d times in 400ms at one question each %v", n, startingPoll)
	}
}
