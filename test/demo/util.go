//go:build linux

package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ctl runs cgpilotctl cmd against the agent's socket and returns its output.
func ctl(ctx context.Context, bin, cmd, socket string, args ...string) (string, error) {
	b, err := exec.CommandContext(ctx, bin, append([]string{cmd, "--socket", socket}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w: cgpilotctl %s: %v: %s", ErrDemo, cmd, err, strings.TrimSpace(string(b)))
	}
	return strings.TrimRight(string(b), "\n"), nil
}

// agentLogTail returns the last n lines of the agent container's log,
// which the harness kubelet keeps under its node directory, and after a
// restart also the end of the previous container's log: why the last one
// ended is the first thing to read (a make demo-v2 VM is gone afterwards).
func agentLogTail(nodeDir string, n int) string {
	files, _ := filepath.Glob(filepath.Join(nodeDir, "pod-logs", agentNS+"_"+agentDS+"-*", "agent", "*.log"))
	if len(files) == 0 {
		return "(no agent container log yet)"
	}
	// The kubelet names them by restart count: 0.log, 1.log, ... 10.log.
	sort.Slice(files, func(i, j int) bool {
		if len(files[i]) != len(files[j]) {
			return len(files[i]) < len(files[j])
		}
		return files[i] < files[j]
	})
	out := logTail(files[len(files)-1], n)
	if len(files) > 1 {
		out = fmt.Sprintf("the agent's container restarted %d times; the previous one's %s\n%s", len(files)-1, logTail(files[len(files)-2], n/2), out)
	}
	return out
}

// logTail is "agent log FILE:" and the file's last n lines.
func logTail(f string, n int) string {
	b, err := os.ReadFile(f)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "agent log " + f + ":\n" + strings.Join(lines, "\n")
}

// agentMetrics summarizes the agent's apply latency histogram and error
// counters from its /metrics text.
func agentMetrics(ctx context.Context, port int) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return "", err
	}
	v := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && strings.HasPrefix(f[0], "cgpilot_") {
			v[f[0]] = f[1]
		}
	}
	const h = "cgpilot_apply_latency_seconds"
	if v[h+"_count"] == "" {
		return "", fmt.Errorf("no %s in the agent's metrics", h)
	}
	return fmt.Sprintf("%s changes: %s within 10 ms, %s within 100 ms, %s within 250 ms; cgroup writes %s, write errors %s, drift corrections %s",
		v[h+"_count"], v[h+`_bucket{le="0.01"}`], v[h+`_bucket{le="0.1"}`], v[h+`_bucket{le="0.25"}`],
		v["cgpilot_cgroup_writes_total"], v["cgpilot_cgroup_write_errors_total"], v["cgpilot_drift_corrections_total"]), nil
}

// timeScale multiplies every wait of the demo: Options.Slow sets it for
// the run of Up (one Up at a time per process, as the demo's directory
// allows one demo per host).
var timeScale time.Duration = 1

// scaled is a wait of the demo on this node.
func scaled(d time.Duration) time.Duration { return d * timeScale }

// waited says why a poll stopped: its timeout, or an interrupt.
func waited(err error, timeout time.Duration) string {
	if errors.Is(err, context.Canceled) {
		return "interrupted"
	}
	return fmt.Sprintf("gave up after %v", scaled(timeout))
}

func poll(ctx context.Context, timeout, every time.Duration, cond func() bool) error {
	if timeScale > 1 && every < 10*time.Millisecond {
		// Under TCG a 1 ms loop of cgroup reads takes a whole emulated
		// CPU from the agent and kubelet it is timing.
		every = 10 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, scaled(timeout))
	defer cancel()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("%w: free port: %v", ErrDemo, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrDemo, err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrDemo, err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrDemo, err)
	}
	return nil
}

// kubectl runs the test bed's kubectl with the demo's kubeconfig and
// returns its output; the error carries the output too.
func (r *run) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(r.o.BinDir, "kubectl"), append([]string{"--kubeconfig", r.cp.Kubeconfig()}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: kubectl %s: %v: %s", ErrDemo, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return strings.TrimRight(out.String(), "\n"), nil
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
