//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgpilot/cgpilot/aggregator"
	"github.com/cgpilot/cgpilot/aggregator/auth"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/test/aggtest"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

// TestAggregatorTokenReview: agents authenticate with real service-account
// tokens issued by the API server (TokenRequest bound to the agent's pod on
// its node, audience cgpilot-aggregator), reviewed by the API server. The
// token carries its node in the authentication.kubernetes.io/node-name
// extra; a report must be of that node. Every bad request gets its 4xx
// and its metric, and the replica keeps serving.
func TestAggregatorTokenReview(t *testing.T) {
	bins := tier.E2E(t)
	cp := harness.MustStart(t, bins, harness.Options{})
	cs := cp.Client
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	applyCRDs(ctx, t, cp)
	createNamespaces(ctx, t, cs, 20)
	const agentNS = "cgpilot-system"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"cgpilot-agent", "someone-else"} {
		if _, err := cs.CoreV1().ServiceAccounts(agentNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	fleet := aggtest.NewFleet(aggtest.FleetConfig{Nodes: 2, PodsPerNode: 10, Seed: 3})
	createFleetPods(ctx, t, cs, fleet, 2)
	// The agent's pods on their nodes (kubelet-less nodes: the API server
	// only needs the objects to bind tokens to).
	for i := range 2 {
		createReadyNode(ctx, t, cp, fleet.NodeName(i))
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + fleet.NodeName(i), Namespace: agentNS},
			Spec: corev1.PodSpec{NodeName: fleet.NodeName(i), ServiceAccountName: "cgpilot-agent", AutomountServiceAccountToken: new(bool),
				Containers: []corev1.Container{{Name: "agent", Image: "docker.io/local/busybox:1"}}}}
		if _, err := cs.CoreV1().Pods(agentNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	token := func(sa, pod, audience string) string {
		t.Helper()
		req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}}}
		if pod != "" {
			p, err := cs.CoreV1().Pods(agentNS).Get(ctx, pod, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}
		}
		tr, err := cs.CoreV1().ServiceAccounts(agentNS).CreateToken(ctx, sa, req, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenRequest %s/%s: %v", sa, pod, err)
		}
		return tr.Status.Token
	}
	node0 := token("cgpilot-agent", "agent-"+fleet.NodeName(0), auth.Audience)
	// The API server's own review: the token names the pod's node.
	rev, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: node0, Audiences: []string{auth.Audience}}}, metav1.CreateOptions{})
	if err != nil || !rev.Status.Authenticated {
		t.Fatalf("token review: %v %+v", err, rev.Status)
	}
	if got := rev.Status.User.Extra[auth.ExtraNodeName]; len(got) != 1 || got[0] != fleet.NodeName(0) {
		t.Fatalf("the token's %s extra is %v, want [%s]", auth.ExtraNodeName, got, fleet.NodeName(0))
	}

	dir := t.TempDir()
	certs, err := aggtest.Certs(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := aggtest.Start(t, aggregator.Config{RESTConfig: cp.Config, Namespace: agentNS, Identity: "auth-test",
		CertFile: certs.CertFile, KeyFile: certs.KeyFile, FoldInterval: 200 * time.Millisecond})
	aggtest.Wait(t, "leading", time.Minute, r.IsLeader)

	// A real agent client with the projected-token file; the kubelet would
	// rotate it: a second token replaces the file mid-way.
	tokFile := filepath.Join(dir, "token")
	write := func(tok string) {
		os.WriteFile(tokFile+".tmp", []byte(tok), 0o600)
		os.Rename(tokFile+".tmp", tokFile)
	}
	write(node0)
	c, err := report.NewClient(report.ClientConfig{URL: r.URL(), TokenFile: tokFile, CAFile: certs.CAFile, AgentID: "a0", Started: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	ends := pastWindows(3)
	c.Enqueue(fleet.Report(0, ends[0]))
	if err := c.Flush(ctx); err != nil || c.Stats().Accepted != 1 {
		t.Fatalf("report with the node's token: %v %+v", err, c.Stats())
	}
	write(token("cgpilot-agent", "agent-"+fleet.NodeName(0), auth.Audience) + "\n")
	c.Enqueue(fleet.Report(0, ends[1]))
	if err := c.Flush(ctx); err != nil || c.Stats().Accepted != 2 {
		t.Fatalf("report after the token rotated: %v %+v", err, c.Stats())
	}

	// Raw requests for the refusals.
	hc := aggtest.HTTPClient(certs.CAPEM)
	post := func(tok string, body []byte) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.URL()+report.PathReports, bytes.NewReader(body))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a report.Answer
		json.NewDecoder(resp.Body).Decode(&a)
		t.Logf("%d %s: %s", resp.StatusCode, a.Result, a.Error)
		return resp.StatusCode
	}
	body := func(node int, seq uint64, end time.Time) []byte {
		rep := fleet.Report(node, end)
		rep.Agent, rep.Sequence = report.Agent{ID: "raw", Started: time.Now().Add(time.Duration(seq) * time.Millisecond)}, seq
		b, _ := report.Encode(rep, false)
		return b
	}
	node1 := token("cgpilot-agent", "agent-"+fleet.NodeName(1), auth.Audience)
	good := body(1, 1, ends[2])
	for _, tc := range []struct {
		name   string
		tok    string
		body   []byte
		status int
	}{
		{"no token", "", good, 401},
		{"garbage token", "not-a-token", good, 401},
		{"wrong audience", token("cgpilot-agent", "agent-"+fleet.NodeName(1), "https://kubernetes.default.svc.cluster.local"), good, 401},
		{"token bound to no pod", token("cgpilot-agent", "", auth.Audience), good, 401},
		{"another service account", token("someone-else", "", auth.Audience), good, 401},
		{"node 0's token for node 1", node0, good, 403},
		{"malformed", node1, []byte(`{"apiVersion":"report.cgpilot.io/v1","node":`), 400},
		{"oversized", node1, bytes.Repeat([]byte("x"), report.MaxWireBytes+1), 413},
		{"accepted", node1, good, 202},
		{"replayed", node1, good, 409},
	} {
		if got := post(tc.tok, tc.body); got != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.status)
		}
	}
	metrics := metricsOf(t, r)
	for _, want := range []string{
		`cgpilot_aggregator_reports_total{result="unauthenticated"} 5`,
		`cgpilot_aggregator_reports_total{result="forbidden"} 1`,
		`cgpilot_aggregator_reports_total{result="malformed"} 1`,
		`cgpilot_aggregator_reports_total{result="oversized"} 1`,
		`cgpilot_aggregator_reports_total{result="replayed"} 1`,
		`cgpilot_aggregator_reports_total{result="accepted"} 3`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Deleting the agent's pod invalidates its tokens at the API server
	// (the aggregator's cache trusts a review for at most 5 minutes).
	if !r.IsLeader() {
		t.Error("the replica stopped leading")
	}
}

// get reads url as viewerToken.
func get(t *testing.T, url string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return b.String()
}
