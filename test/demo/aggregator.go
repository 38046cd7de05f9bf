//go:build linux

package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgpilot/cgpilot/test/aggtest"
	"github.com/cgpilot/cgpilot/test/deploy"
)

// aggregator.go: the cluster aggregator in the demo. Its image is built
// and cached like the agent's (during the cluster's start), the test bed's
// overlay deploys it with the agent (deploy.AggregatorBed: the host
// network, a serving certificate the demo makes, no cert-manager), the
// API server presents its client certificate to the webhook (as kubeadm's
// apiserver-kubelet-client), and the last two steps show the agent's
// reports merged and the dashboard as a user of this cluster reaches it:
// refused without a token, read with a viewer's, and a screenshot in
// headless Chromium.

// AggregatorImage is the locally built aggregator image.
const AggregatorImage = "docker.io/local/cgpilot-aggregator:demo"

// aggregatorReportPeriod is the demo's report grid (the default is a
// minute): the agent's first report lands within seconds.
const aggregatorReportPeriod = 10 * time.Second

// chromiumPath is Debian's Chromium; without it the demo says how to look
// at the dashboard instead of taking its screenshot.
const chromiumPath = "/usr/bin/chromium"

// Dashboard is what the demo observed of the aggregator and its dashboard.
type Dashboard struct {
	URL string
	// AcceptedReports is the agent's count of reports the aggregator took.
	AcceptedReports int
	// AnonymousStatus and AnonymousMetrics are the answers to requests of
	// the JSON API and /metrics without a token; ViewerStatus with the
	// viewer's.
	AnonymousStatus, AnonymousMetrics, ViewerStatus int
	// Nodes, Workloads and Recommendations from the summary as the viewer
	// read it.
	Nodes, Workloads, Recommendations int
	// Screenshot is the PNG taken in headless Chromium ("" without it);
	// Drawn says the page drew its charts (body[data-ready]).
	Screenshot string
	Drawn      bool
}

// apiServerWebhookAuth writes the kube-apiserver's AdmissionConfiguration
// so that it presents the test bed's apiserver-kubelet-client certificate
// (CN kube-apiserver-kubelet-client, signed by the cluster CA) to
// admission webhooks, as a kubeadm control plane can, and returns its flag.
func (r *run) apiServerWebhookAuth() ([]string, error) {
	pki := filepath.Join(r.o.Dir, "pki")
	dir := filepath.Join(r.o.Dir, "aggregator")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	flag, err := aggtest.WebhookAuth(dir, aggtest.ClientCert{CertFile: filepath.Join(pki, "apiserver-kubelet-client.crt"), KeyFile: filepath.Join(pki, "apiserver-kubelet-client.key")})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	return []string{flag}, nil
}

// aggregatorBed is the test bed's aggregator: free ports, a serving
// certificate for 127.0.0.1, the cluster CA as its callers' CA.
func (r *run) aggregatorBed() (*deploy.AggregatorBed, error) {
	secure, err := freePort()
	if err != nil {
		return nil, err
	}
	plain, err := freePort()
	if err != nil {
		return nil, err
	}
	certs, err := aggtest.Certs(filepath.Join(r.o.Dir, "aggregator"))
	if err != nil {
		return nil, fmt.Errorf("%w: aggregator certificate: %v", ErrDemo, err)
	}
	return &deploy.AggregatorBed{Image: AggregatorImage, SecurePort: secure, HTTPPort: plain, CertFile: certs.CertFile, KeyFile: certs.KeyFile,
		CAFile: certs.CAFile, ClientCAFile: filepath.Join(r.o.Dir, "pki", "ca.crt"), ReportPeriod: aggregatorReportPeriod, SampleInterval: sampleInterval}, nil
}

// showAggregator waits for the aggregator's Deployment and for the agent's
// reports to be taken, and shows the agent's side (cgpilotctl report).
func (r *run) showAggregator(ctx context.Context) error {
	a := r.bed.Aggregator
	r.res.Dashboard.URL = a.DashboardURL()
	var last string
	err := poll(ctx, 2*time.Minute, 200*time.Millisecond, func() bool {
		d, err := r.cs.AppsV1().Deployments(deploy.Namespace).Get(ctx, "cgpilot-aggregator", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("ready %d of %d", d.Status.ReadyReplicas, d.Status.Replicas)
		return d.Status.ReadyReplicas >= 1
	})
	if err != nil {
		return fmt.Errorf("%w: the aggregator's Deployment is not ready (%v): %s", ErrDemo, waited(err, 2*time.Minute), last)
	}
	r.logf("the aggregator runs (1 replica, leading); the agent reports to %s every %v, authenticated by its projected token (TokenReview)",
		a.URL(), a.ReportPeriod)
	err = poll(ctx, 2*time.Minute, 500*time.Millisecond, func() bool {
		n, err := r.agentMetric(ctx, `cgpilot_aggregator_reports_total{result="accepted"}`)
		if err != nil {
			last = err.Error()
			return false
		}
		r.res.Dashboard.AcceptedReports = int(n)
		return n >= 1
	})
	if err != nil {
		return fmt.Errorf("%w: no report of the agent accepted (%v): %s\n%s", ErrDemo, waited(err, 2*time.Minute), last, agentLogTail(r.node.State.Dir, 20))
	}
	out, err := ctl(ctx, r.res.Cgpilotctl, "report", r.res.Socket)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.out, "\n$ cgpilotctl report\n%s\n", out)
	return nil
}

// agentMetric reads one sample of the agent's /metrics.
func (r *run) agentMetric(ctx context.Context, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", r.bed.HealthPort), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			var f float64
			_, err := fmt.Sscan(v, &f)
			return f, err
		}
	}
	return 0, fmt.Errorf("no %s in the agent's metrics", name)
}

// showDashboard is the dashboard as a user of this cluster reaches it:
// refused without a token; a ServiceAccount bound to the viewer role the
// aggregator's component ships, and its token for the aggregator's
// audience; the summary through the JSON API with it; the page in
// headless Chromium, its screenshot saved.
func (r *run) showDashboard(ctx context.Context) error {
	url := r.bed.Aggregator.DashboardURL()
	d := &r.res.Dashboard
	get := func(path, token string) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+path, nil)
		if err != nil {
			return 0, nil, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, fmt.Errorf("%w: GET %s: %v", ErrDemo, url+path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		return resp.StatusCode, b, nil
	}
	var body []byte
	var err error
	if d.AnonymousStatus, body, err = get("/api/v1/summary", ""); err != nil {
		return err
	}
	if d.AnonymousMetrics, _, err = get("/metrics", ""); err != nil {
		return err
	}
	if d.AnonymousStatus != http.StatusUnauthorized || d.AnonymousMetrics != http.StatusUnauthorized {
		return fmt.Errorf("%w: without a token the JSON API answered %d and /metrics %d, want 401", ErrDemo, d.AnonymousStatus, d.AnonymousMetrics)
	}
	r.logf("$ curl %s/api/v1/summary   (no token)", url)
	r.logf("refused: %d %s (and %d for /metrics): an unauthenticated client reads nothing", d.AnonymousStatus, strings.TrimSpace(string(body)), d.AnonymousMetrics)

	for _, args := range [][]string{
		{"create", "serviceaccount", "cgpilot-dashboard", "-n", deploy.Namespace},
		{"create", "clusterrolebinding", "cgpilot-dashboard", "--clusterrole=cgpilot-dashboard-viewer", "--serviceaccount=" + deploy.Namespace + ":cgpilot-dashboard"},
	} {
		out, err := r.kubectl(ctx, args...)
		if err != nil {
			return err
		}
		r.logf("$ kubectl %s\n      %s", strings.Join(args, " "), out)
	}
	tokenArgs := []string{"create", "token", "cgpilot-dashboard", "-n", deploy.Namespace, "--audience=cgpilot-aggregator", "--duration=1h"}
	token, err := r.kubectl(ctx, tokenArgs...)
	if err != nil {
		return err
	}
	r.logf("$ kubectl %s   (a viewer's token: %d bytes)", strings.Join(tokenArgs, " "), len(token))
	d.ViewerStatus, body, err = get("/api/v1/summary", token)
	if err != nil {
		return err
	}
	if d.ViewerStatus != http.StatusOK {
		return fmt.Errorf("%w: the viewer's GET /api/v1/summary: %d %s", ErrDemo, d.ViewerStatus, body)
	}
	var sum struct {
		Nodes    int `json:"nodes"`
		Coverage struct {
			Workloads, Containers int
		} `json:"coverage"`
		Recs int `json:"recommendations"`
	}
	if err := json.Unmarshal(body, &sum); err != nil {
		return fmt.Errorf("%w: summary: %v", ErrDemo, err)
	}
	d.Nodes, d.Workloads, d.Recommendations = sum.Nodes, sum.Coverage.Workloads, sum.Recs
	r.logf("with it: %d node reporting, %d workloads (%d workload-containers), %d merged recommendations", sum.Nodes, sum.Coverage.Workloads,
		sum.Coverage.Containers, sum.Recs)

	if r.o.NoBrowser != "" {
		r.logf("screenshot skipped: %s; the JSON API's answers above are checked all the same", r.o.NoBrowser)
		return nil
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		r.logf("screenshot skipped: no %s here (apt-get install chromium): open %s/ in a browser and paste the token", chromiumPath, url)
		return nil
	}
	d.Screenshot = filepath.Join(r.o.Dir, "dashboard.png")
	page := url + "/#token=" + token
	dom, err := chromium(ctx, filepath.Join(r.o.Dir, "chromium"), "--dump-dom", page)
	if err != nil {
		return err
	}
	d.Drawn = strings.Contains(dom, `data-ready="1"`)
	if _, err := chromium(ctx, filepath.Join(r.o.Dir, "chromium"), "--screenshot="+d.Screenshot, page); err != nil {
		return err
	}
	if !d.Drawn {
		return fmt.Errorf("%w: the dashboard did not draw its charts in Chromium", ErrDemo)
	}
	r.logf("headless Chromium: the page drew its charts; screenshot %s", d.Screenshot)
	r.logf("a user opens %s/ and pastes a token (the page keeps it in the tab), or %s/#token=<token>", url, url)
	return nil
}

// chromium runs Debian's Chromium headless on url with an empty profile
// (nothing of the host's), at the dashboard's size, and returns its
// output.
func chromium(ctx context.Context, profile string, args ...string) (string, error) {
	if err := os.RemoveAll(profile); err != nil {
		return "", fmt.Errorf("%w: %v", ErrDemo, err)
	}
	if err := os.MkdirAll(profile, 0o700); err != nil {
		return "", fmt.Errorf("%w: %v", ErrDemo, err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--user-data-dir=" + profile, "--window-size=1400,1000", "--hide-scrollbars",
		"--virtual-time-budget=10000"}
	cmd := exec.CommandContext(ctx, chromiumPath, append(base, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%w: chromium %s: %v: %s", ErrDemo, args[0], err, lastLines(stderr.String(), 5))
	}
	return string(out), nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
