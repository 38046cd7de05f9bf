//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgpilot/cgpilot/agent"
	"github.com/cgpilot/cgpilot/aggregator"
	"github.com/cgpilot/cgpilot/aggregator/auth"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/test/aggtest"
)

// aggregatorView is the agent's local view of its reports.
func aggregatorView(t testing.TB, socket string) local.AggregatorView {
	t.Helper()
	var v local.AggregatorView
	raw, err := local.NewClient(socket).Raw(context.Background(), local.PathAggregator, nil)
	if err != nil {
		return v
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return v
}

// TestNodeAgentReportsToAggregator: a real agent on the real node reports
// to a replica of the aggregator in this process, authenticated by a
// projected token the real API server issued for a pod on that node and
// reviewed (TokenReview). Before the aggregator runs, the agent buffers
// its reports and right-sizes on its own; once it runs, every buffered
// report is accepted, the aggregator merges the workload's samples into a
// recommendation, the agent prefers it while fresh (the annotation names
// the source) and applies it in place; the aggregator sees the adjustment,
// the coverage and the capacity released. When the aggregator goes away,
// the agent falls back to its own recommendation once the merged one is
// stale, and keeps its reports until a new replica takes them.
func TestNodeAgentReportsToAggregator(t *testing.T) {
	const period = 10 * time.Second
	dir := t.TempDir()
	certs, err := aggtest.Certs(dir)
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	tokFile := filepath.Join(dir, "token")
	b := startRightsizeNode(t, func(cfg *agent.Config) {
		cfg.Aggregator = agent.AggregatorConfig{URL: "https://" + addr, CAFile: certs.CAFile, TokenFile: tokFile,
			ReportPeriod: metav1.Duration{Duration: period}, MaxBufferBytes: 1 << 20}
	})
	ctx := context.Background()
	applyCRDs(ctx, t, b.cp)

	// The agent's identity: a token for ServiceAccount cgpilot-agent, bound
	// to a pod running on the node, with the aggregator's audience (what
	// the kubelet projects into the DaemonSet's pod).
	const ns = "cgpilot-system"
	if _, err := b.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := b.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "cgpilot-agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	holder := busyboxPod("agent-identity", nil, "exec sleep 3600", rl("10m", "16Mi"), nil)
	holder.Namespace, holder.Spec.NodeName, holder.Spec.ServiceAccountName = ns, b.node.Name(), "cgpilot-agent"
	holder, err = b.cs.CoreV1().Pods(ns).Create(ctx, holder, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := b.cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "cgpilot-agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{auth.Audience}, BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: holder.Name, UID: holder.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}

	// An over-provisioned Deployment under an InPlace policy.
	b.policy(t, "web", map[string]any{"mode": "InPlace", "step": "20s", "minHistory": "30s",
		"podSelector": map[string]any{"matchLabels": map[string]any{"app": "web"}}})
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: busyboxPod("", nil, "exec sleep 3600", rl("300m", "256Mi"), rl("600m", "512Mi")).Spec}}}
	if _, err := b.cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key := report.Key{Workload: report.Workload{Namespace: "default", Kind: report.KindDeployment, Name: "web"}, Container: "app"}

	// No aggregator yet: reports wait in the agent, which says why.
	within(t, 3*period+30*time.Second, "reports buffered while the aggregator is away", func() (bool, string) {
		v := aggregatorView(t, b.na.cfg.SocketPath)
		return v.Buffered >= 2 && v.Failures > 0 && v.LastError != "" && v.Accepted == 0, fmt.Sprintf("%+v", v)
	})

	start := func(identity string) *aggtest.Replica {
		r := aggtest.Start(t, aggregator.Config{RESTConfig: b.cp.Config, Namespace: ns, Identity: identity, SecureAddr: addr,
			CertFile: certs.CertFile, KeyFile: certs.KeyFile, Period: period, Grace: 2 * time.Second, Step: 10 * time.Second,
			// The agent samples every second (startRightsizeNode).
			SampleInterval: time.Second,
			FoldInterval:   time.Second, CheckpointInterval: 2 * time.Second, CheckpointMinAge: time.Second})
		aggtest.Wait(t, identity+" leading", time.Minute, r.IsLeader)
		return r
	}
	r := start("agg-1")
	within(t, 2*time.Minute, "the buffered reports accepted", func() (bool, string) {
		v := aggregatorView(t, b.na.cfg.SocketPath)
		return v.Accepted >= 3 && v.Buffered == 0 && v.Rejected == 0, fmt.Sprintf("%+v", v)
	})
	if n := metric(t, b.na.cfg.HealthAddr, `cgpilot_aggregator_reports_total{result="accepted"}`); n < 3 {
		t.Fatalf("cgpilot_aggregator_reports_total{result=\"accepted\"} = %v, want >= 3", n)
	}
	if n := metric(t, b.na.cfg.HealthAddr, "cgpilot_aggregator_buffered_reports"); n != 0 {
		t.Fatalf("cgpilot_aggregator_buffered_reports = %v after all were accepted", n)
	}
	within(t, 2*time.Minute, "a merged recommendation of the workload from the node's samples", func() (bool, string) {
		w := r.Store.Recommendation(key)
		return w != nil && w.Nodes == 1 && w.CPU.Target > 0 && w.Memory.Target > 0, fmt.Sprintf("%+v", w)
	})

	// The agent prefers the merged recommendation and applies it in place.
	var web *corev1.Pod
	within(t, 3*time.Minute, "requests lowered in place and the merged recommendation in force, the annotation naming it", func() (bool, string) {
		pods, err := b.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprint(err)
		}
		web = &pods.Items[0]
		rec := recommendationOf(web)
		req := web.Spec.Containers[0].Resources.Requests
		// The first resize may come from the node's own recommendation
		// (both need minHistory); the merged one is in force after it.
		ok := len(rec.Containers) == 1 && rec.Containers[0].Source == "aggregator" && rec.Containers[0].Nodes == 1 && rec.LastApplied != nil &&
			(rec.State == "Applied" || rec.State == "Unchanged" || rec.State == "Resized") &&
			milli(req, corev1.ResourceCPU) < 300 && rec.Containers[0].CPU != nil && rec.Containers[0].CPU.Original == "300m" &&
			rec.Containers[0].Memory.Original == "256Mi" && strings.HasPrefix(rec.Containers[0].CPU.Explain, "merged by the aggregator")
		forNode, _ := r.Store.ForNode(b.node.Name())
		return ok, fmt.Sprintf("requests %v, annotation %s; agent's reports %+v; the aggregator's answer for the node %+v, its merged %+v",
			req, web.Annotations["cgpilot.io/recommendation"], aggregatorView(t, b.na.cfg.SocketPath), forNode, r.Store.Recommendation(key))
	})
	if st := web.Status.ContainerStatuses; len(st) != 1 || st[0].RestartCount != 0 {
		t.Fatalf("web restarted: %+v", st)
	}

	// The aggregator's analysis: the adjustment, the coverage, the
	// capacity released against the original requests.
	within(t, time.Minute, "the adjustment, coverage and released capacity in the analysis", func() (bool, string) {
		adjusted := false
		for _, ev := range r.Analysis.History(100) {
			if ev.Key == key && ev.Kind == "adjustment" && ev.Resource == report.ResourceCPU && ev.From == 0.3 && ev.To < 0.3 && ev.Error == "" {
				adjusted = true
			}
		}
		cov := r.Analysis.Coverage()
		total, _ := r.Analysis.Capacity(time.Now())
		return adjusted && cov.UnderPolicy >= 1 && cov.Adjustable >= 1 && total.ReleasedCPU > 0 && total.BeforeCPU >= 0.3,
			fmt.Sprintf("adjusted %v, coverage %+v, capacity %+v", adjusted, cov, total)
	})
	node := r.Store.Nodes()
	if len(node) != 1 || node[0].Name != b.node.Name() {
		t.Fatalf("nodes reporting: %+v", node)
	}

	// The aggregator goes away: reports wait again, and once the merged
	// recommendation is stale the agent decides on its own.
	if err := r.Stop(); err != nil {
		t.Fatalf("replica stop: %v", err)
	}
	accepted := aggregatorView(t, b.na.cfg.SocketPath).Accepted
	within(t, 2*time.Minute, "the node's own recommendation once the merged one is stale", func() (bool, string) {
		p := b.pod(t, web.Name)
		rec := recommendationOf(p)
		v := aggregatorView(t, b.na.cfg.SocketPath)
		return len(rec.Containers) == 1 && rec.Containers[0].Source == "" && rec.Containers[0].CPU != nil && v.Buffered >= 1 && v.Fresh == 0,
			fmt.Sprintf("annotation %s; reports %+v", p.Annotations["cgpilot.io/recommendation"], v)
	})

	// A new replica continues from the checkpoints and takes what waited.
	r2 := start("agg-2")
	within(t, 2*time.Minute, "the reports kept while away accepted by the new replica", func() (bool, string) {
		v := aggregatorView(t, b.na.cfg.SocketPath)
		return v.Accepted > accepted && v.Buffered == 0 && v.Rejected == 0 && v.Fresh >= 1, fmt.Sprintf("%+v", v)
	})
	if w := r2.Store.Recommendation(key); w == nil || w.Nodes != 1 {
		t.Fatalf("the new replica's recommendation: %+v", w)
	}
}
