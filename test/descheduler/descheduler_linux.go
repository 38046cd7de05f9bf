// Package descheduler runs the upstream descheduler (the binary
// test/deschedbin builds from the Go module proxy) against the test bed
// as it runs in a cluster: with a service account's token and the
// cluster's CA at /var/run/secrets/kubernetes.io/serviceaccount and
// KUBERNETES_SERVICE_HOST/PORT, so that it takes its in-cluster
// configuration, the one the Deployment of deploy/ gives it (its
// Prometheus client, too, exists only in-cluster or with a Secret). The
// files are put there in a private mount namespace (a tmpfs on /run, seen
// by the descheduler alone): the host is not changed. Needs root.
//
// Install applies the component's descheduler objects (ServiceAccount,
// RBAC, eviction webhook) to a test bed and returns its policy, both
// pointed at a loopback aggregator.
//
// Error contract: Start returns what prevents the process from starting;
// Stop ends it (SIGTERM, then SIGKILL after 10 s) by its PID and returns
// how it ended.
package descheduler

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cgpilot/cgpilot/test/aggtest"
	"github.com/cgpilot/cgpilot/test/deploy"
)

// Options configure a descheduler process.
type Options struct {
	// Bin is the descheduler binary; Dir a directory for its files and
	// log (descheduler.log).
	Bin, Dir string
	// Server is the API server's URL (https://127.0.0.1:port), CA its
	// CA (PEM), Token the service account's token.
	Server string
	CA     []byte
	Token  string
	// Policy is the DeschedulerPolicy (YAML).
	Policy []byte
	// Interval between descheduling cycles; Args more flags (e.g.
	// --dry-run, --v=4).
	Interval time.Duration
	Args     []string
}

// Process is a running descheduler.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	// Log is the path of its output.
	Log string
}

// ErrNotRoot: the private mount namespace needs root.
var ErrNotRoot = errors.New("descheduler: running it in-cluster style needs root (a private mount namespace)")

// Start runs the descheduler until Stop or ctx.
func Start(ctx context.Context, o Options) (*Process, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	u, err := url.Parse(o.Server)
	if err != nil || u.Hostname() == "" || u.Port() == "" {
		return nil, fmt.Errorf("descheduler: API server URL %q: want https://host:port", o.Server)
	}
	sa := filepath.Join(o.Dir, "serviceaccount")
	if err := os.MkdirAll(sa, 0o700); err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{"ca.crt": o.CA, "token": []byte(o.Token), "namespace": []byte("cgpilot-system")} {
		if err := os.WriteFile(filepath.Join(sa, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	policy := filepath.Join(o.Dir, "policy.yaml")
	if err := os.WriteFile(policy, o.Policy, 0o600); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(o.Dir, "descheduler.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	args := []string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c",
		`mount -t tmpfs -o size=1m,mode=0755 cgpilot-descheduler /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount && ` +
			`cp "$1"/ca.crt "$1"/token "$1"/namespace /run/secrets/kubernetes.io/serviceaccount/ && shift && exec "$@"`,
		"sh", sa, o.Bin, "--policy-config-file=" + policy, "--descheduling-interval=" + o.Interval.String(), "--secure-port=0"}
	args = append(args, o.Args...)
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST="+u.Hostname(), "KUBERNETES_SERVICE_PORT="+u.Port())
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("descheduler: start: %w", err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{}), Log: log.Name()}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	go func() {
		select {
		case <-ctx.Done():
			_ = p.Stop()
		case <-p.done:
		}
	}()
	return p, nil
}

// Pid is the process's PID (unshare and sh exec into the descheduler).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop ends the process and returns how it ended.
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.err
}

// CPU is the CPU time the process has used (user + system).
func (p *Process) CPU() (time.Duration, error) { return aggtest.ProcCPU(p.Pid()) }

// RSS is the process's resident memory (bytes), and its peak.
func (p *Process) RSS() (cur, peak uint64, err error) { return aggtest.ProcRSS(p.Pid()) }

// Tail returns the last n lines of the log.
func (p *Process) Tail(n int) string {
	b, _ := os.ReadFile(p.Log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Endpoints are where a test bed's aggregator listens, for Install.
type Endpoints struct {
	// WebhookURL is the eviction webhook (https://.../admission/evictions)
	// and CABundle the CA of its certificate (PEM); QueryURL the
	// descheduler's Prometheus URL (http://.../prometheus).
	WebhookURL, QueryURL string
	CABundle             []byte
}

// Install applies what deploy/kustomize/components/rescheduling renders
// for the descheduler (its ServiceAccount, ClusterRole and binding, the
// eviction webhook pointed at e) to the API server of cfg, and returns
// its policy with the query URL pointed at e. The namespace
// cgpilot-system must exist.
func Install(ctx context.Context, cfg *rest.Config, root string, e Endpoints) ([]byte, error) {
	rendered, err := deploy.Kustomize(root, deploy.ComponentAggregator, deploy.ComponentRescheduling)
	if err != nil {
		return nil, err
	}
	objs, err := deploy.Decode(rendered)
	if err != nil {
		return nil, err
	}
	var apply []*unstructured.Unstructured
	for _, k := range [][2]string{{"ServiceAccount", "cgpilot-descheduler"}, {"ClusterRole", "cgpilot-descheduler"},
		{"ClusterRoleBinding", "cgpilot-descheduler"}, {"ValidatingWebhookConfiguration", "cgpilot-descheduler-evictions"}} {
		o := deploy.Find(objs, k[0], k[1])
		if o == nil {
			return nil, fmt.Errorf("descheduler: the rescheduling component renders no %s %s", k[0], k[1])
		}
		if k[0] == "ValidatingWebhookConfiguration" {
			whs, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			if len(whs) != 1 {
				return nil, fmt.Errorf("descheduler: %d eviction webhooks rendered", len(whs))
			}
			w := whs[0].(map[string]any)
			w["clientConfig"] = map[string]any{"url": e.WebhookURL, "caBundle": base64.StdEncoding.EncodeToString(e.CABundle)}
			if err := unstructured.SetNestedSlice(o.Object, whs, "webhooks"); err != nil {
				return nil, err
			}
		}
		apply = append(apply, o)
	}
	if err := deploy.Apply(ctx, cfg, apply, deploy.ApplyOptions{FieldManager: "cgpilot-test"}); err != nil {
		return nil, err
	}
	cm := deploy.Find(objs, "ConfigMap", "cgpilot-descheduler")
	if cm == nil {
		return nil, fmt.Errorf("descheduler: no policy ConfigMap rendered")
	}
	policy, _, _ := unstructured.NestedString(cm.Object, "data", "policy.yaml")
	const svc = "http://cgpilot-aggregator.cgpilot-system.svc/prometheus"
	if !strings.Contains(policy, svc) {
		return nil, fmt.Errorf("descheduler: the policy does not point at %s:\n%s", svc, policy)
	}
	return []byte(strings.ReplaceAll(policy, svc, e.QueryURL)), nil
}

// Token returns a token of the cgpilot-descheduler service account (an
// hour), as the kubelet projects one into its pod.
func Token(ctx context.Context, cs kubernetes.Interface) (string, error) {
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts("cgpilot-system").CreateToken(ctx, "cgpilot-descheduler",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("descheduler: token: %w", err)
	}
	return tr.Status.Token, nil
}

// CA returns the CA (PEM) that cfg trusts for the API server.
func CA(cfg *rest.Config) ([]byte, error) {
	if len(cfg.CAData) > 0 {
		return cfg.CAData, nil
	}
	return os.ReadFile(cfg.CAFile)
}
