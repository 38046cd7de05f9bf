//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/prometheus/common/expfmt"

	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/test/aggtest"
	"github.com/cgpilot/cgpilot/test/deploy"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

// applyCRDs installs every CRD of deploy/crds (RightsizePolicy,
// WorkloadRecommendation) on cp.
func applyCRDs(ctx context.Context, t *testing.T, cp *harness.ControlPlane) {
	t.Helper()
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "deploy", "crds", "cgpilot.io_*.yaml"))
	if len(files) < 2 {
		t.Fatalf("CRDs in deploy/crds: %v", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := deploy.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := deploy.Apply(ctx, cp.Config, objs, deploy.ApplyOptions{FieldManager: "cgpilot-test"}); err != nil {
			t.Fatal(err)
		}
	}
}

// viewerToken is a static user who may read all of the dashboard
// (tokenFiles writes it).
const viewerToken = "viewer-token"

// tokenFiles writes, for nodes 0..n-1 of fleet, a token file per node
// (dir/token-<i>) and the "token,node" file a replica with static tokens
// reads, whose path it returns; it also names viewerToken.
func tokenFiles(t *testing.T, dir string, fleet *aggtest.Fleet, n int) string {
	t.Helper()
	var lines strings.Builder
	lines.WriteString(viewerToken + ",@viewer,*\n")
	for i := range n {
		tok := fmt.Sprintf("tok-%d", i)
		fmt.Fprintf(&lines, "%s,%s\n", tok, fleet.NodeName(i))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("token-%d", i)), []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "tokens")
	if err := os.WriteFile(path, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// clientsFor returns a report client per node, reading dir/token-<i>.
func clientsFor(t *testing.T, dir string, fleet *aggtest.Fleet, n int, url string, certs *aggtest.TLS) []*report.Client {
	t.Helper()
	var out []*report.Client
	for i := range n {
		c, err := report.NewClient(report.ClientConfig{URL: url, TokenFile: filepath.Join(dir, fmt.Sprintf("token-%d", i)), CAFile: certs.CAFile,
			AgentID: fleet.Agent(i).ID, Started: fleet.Agent(i).Started})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// sendWindows has every client send its node's reports of the windows
// ending at ends (oldest first) and waits until all are accepted.
func sendWindows(ctx context.Context, t *testing.T, fleet *aggtest.Fleet, clients []*report.Client, ends []time.Time) {
	t.Helper()
	for _, end := range ends {
		for i, c := range clients {
			if err := c.Enqueue(fleet.Report(i, end)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, c := range clients {
		deadline := time.Now().Add(time.Minute)
		for {
			err := c.Flush(ctx)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: reports not accepted: %v (%+v)", i, err, c.Stats())
			}
			time.Sleep(200 * time.Millisecond)
		}
		if s := c.Stats(); s.Rejected != 0 || s.Buffered != 0 {
			t.Fatalf("node %d: %+v", i, s)
		}
	}
}

// pastWindows returns n consecutive window ends, the last one minute
// before now (so they close at once).
func pastWindows(n int) []time.Time {
	last := time.Now().UTC().Truncate(time.Minute).Add(-3 * time.Minute)
	out := make([]time.Time, n)
	for i := range out {
		out[i] = last.Add(-time.Duration(n-1-i) * time.Minute)
	}
	return out
}

// loopbackPorts returns two ports free on both 127.0.0.1 and 127.0.0.2,
// so two replicas can listen like two pods: same ports, different IPs.
func loopbackPorts(t *testing.T) (secure, plain int) {
	t.Helper()
	var ports []int
	for len(ports) < 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.2:%d", p))
		l.Close()
		if err != nil {
			continue
		}
		l2.Close()
		ports = append(ports, p)
	}
	return ports[0], ports[1]
}

// keepNodesAlive renews the kube-node-lease Leases of kubelet-less nodes
// until ctx ends, so the node lifecycle controller does not taint them
// unreachable while a test runs.
func keepNodesAlive(ctx context.Context, t *testing.T, cs kubernetes.Interface, names ...string) {
	t.Helper()
	renew := func() {
		for _, n := range names {
			now := metav1.NewMicroTime(time.Now())
			dur := int32(40)
			l, err := cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, n, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				_, _ = cs.CoordinationV1().Leases("kube-node-lease").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n},
					Spec: coordinationv1.LeaseSpec{HolderIdentity: &n, LeaseDurationSeconds: &dur, RenewTime: &now}}, metav1.CreateOptions{})
				continue
			}
			if err == nil {
				l.Spec.RenewTime = &now
				_, _ = cs.CoordinationV1().Leases("kube-node-lease").Update(ctx, l, metav1.UpdateOptions{})
			}
		}
	}
	renew()
	go func() {
		tk := time.NewTicker(5 * time.Second)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				renew()
			}
		}
	}()
}

// createNamespaces creates the fleet's namespaces (team-00 ...).
func createNamespaces(ctx context.Context, t *testing.T, cs kubernetes.Interface, n int) {
	t.Helper()
	for i := range n {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("team-%02d", i)}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// createReadyNode registers a kubelet-less Node with capacity and a Ready
// condition (harness.FakeNode).
func createReadyNode(ctx context.Context, t *testing.T, cp *harness.ControlPlane, name string) {
	t.Helper()
	if _, err := cp.CreateFakeNode(ctx, harness.FakeNode{Name: name}); err != nil {
		t.Fatal(err)
	}
}

// metricsOf is the replica's /metrics, read from its registry (the HTTP
// endpoint needs a token RBAC lets get /metrics).
func metricsOf(t *testing.T, r *aggtest.Replica) string {
	t.Helper()
	mfs, err := r.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// createFleetPods creates nodes 0..n-1's pods of fleet, bound to their
// nodes (no kubelet runs them; the aggregator only needs the API server
// to show them there), in the fleet's namespaces (createNamespaces).
func createFleetPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, fleet *aggtest.Fleet, n int) {
	t.Helper()
	yes := true
	for i := range n {
		for _, p := range fleet.Pods(i) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: p.OwnerKind, Name: p.OwnerName, UID: "00000000-0000-0000-0000-00000000f1ee", Controller: &yes}}},
				Spec: corev1.PodSpec{NodeName: fleet.NodeName(i), AutomountServiceAccountToken: new(bool),
					Containers: []corev1.Container{{Name: "app", Image: "docker.io/local/busybox:1"}}}}
			if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("fleet pod %s/%s: %v", p.Namespace, p.Name, err)
			}
		}
	}
}

// webhookCallers makes client certificates in dir for the kube-apiserver
// and cns, and the API server's admission configuration that presents
// its certificate to webhooks (the only caller the aggregator's webhooks
// answer). It returns the certificates and the kube-apiserver's flag.
func webhookCallers(t *testing.T, dir string, cns ...string) (*aggtest.ClientTLS, string) {
	t.Helper()
	callers, err := aggtest.ClientCerts(dir, append([]string{"kube-apiserver"}, cns...)...)
	if err != nil {
		t.Fatal(err)
	}
	admission, err := aggtest.WebhookAuth(dir, callers.Certs["kube-apiserver"])
	if err != nil {
		t.Fatal(err)
	}
	return callers, admission
}
