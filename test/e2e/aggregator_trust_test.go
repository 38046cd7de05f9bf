//go:build linux

package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cgpilot/cgpilot/aggregator"
	"github.com/cgpilot/cgpilot/aggregator/auth"
	"github.com/cgpilot/cgpilot/aggregator/kube"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/test/aggtest"
	"github.com/cgpilot/cgpilot/test/deploy"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

const trustNS = "cgpilot-system"

// agentTokens creates the agents' ServiceAccount and, per node, a pod of
// it bound there, and returns a function issuing that node's token (as the
// kubelet projects it: bound to the pod, audience cgpilot-aggregator).
func agentTokens(ctx context.Context, t *testing.T, cs kubernetes.Interface, nodes ...string) func(node string) string {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: trustNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(trustNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "cgpilot-agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := map[string]*corev1.Pod{}
	for _, n := range nodes {
		p, err := cs.CoreV1().Pods(trustNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + n},
			Spec: corev1.PodSpec{NodeName: n, ServiceAccountName: "cgpilot-agent", AutomountServiceAccountToken: new(bool),
				Containers: []corev1.Container{{Name: "agent", Image: "docker.io/local/busybox:1"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[n] = p
	}
	return func(node string) string {
		t.Helper()
		p := pods[node]
		tr, err := cs.CoreV1().ServiceAccounts(trustNS).CreateToken(ctx, "cgpilot-agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
			Audiences: []string{auth.Audience}, BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
}

// deploymentPod is a pod of Deployment name (its ReplicaSet name-abc12)
// bound to node.
func deploymentPod(ns, name, pod, node string) *corev1.Pod {
	yes := true
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns, Labels: map[string]string{"app": name, "pod-template-hash": "abc12"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-abc12", UID: "00000000-0000-0000-0000-0000000abc12", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "app", Image: "docker.io/local/busybox:1"}}}}
}

// postAs sends a report body with token and returns the status.
func postAs(ctx context.Context, t *testing.T, hc *http.Client, url, token string, r *report.Report) int {
	t.Helper()
	body, err := report.Encode(r, true)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+report.PathReports, strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestAggregatorTrustsNodesOnlyForTheirPods (issue 19, a compromised node
// holding one agent's token): on the real API server, node "evil" forges
// reports of shop/Deployment/web, whose pods run on node "good", with a
// low usage, claims 4,096 made-up containers, a size of 1e300 cores and
// to be idle, and names a looser policy than web's. The merged
// recommendation stays the good node's alone under web's own policy;
// nothing of the fake containers is kept; evil's size is its Node's. Once
// the scheduler binds a web pod to evil (here: a pod created bound to it),
// evil's reports of web count, bounded by that pod.
func TestAggregatorTrustsNodesOnlyForTheirPods(t *testing.T) {
	bins := tier.E2E(t)
	cp := harness.MustStart(t, bins, harness.Options{})
	cs := cp.Client
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	applyCRDs(ctx, t, cp)
	for _, n := range []harness.FakeNode{{Name: "good", CPU: "8", Memory: "32Gi"}, {Name: "evil", CPU: "8", Memory: "32Gi"}} {
		if _, err := cp.CreateFakeNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	token := agentTokens(ctx, t, cs, "good", "evil")
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"web-abc12-1", "web-abc12-2"} {
		if _, err := cs.CoreV1().Pods("shop").Create(ctx, deploymentPod("shop", "web", p, "good"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dc, _ := dynamic.NewForConfig(cp.Config)
	pol := &v1alpha1.RightsizePolicy{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "RightsizePolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: "shop-strict"}, Spec: v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeDryRun, MinHistory: &metav1.Duration{Duration: time.Hour}, Step: &metav1.Duration{Duration: time.Second},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "shop"}}}}
	u, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(pol)
	if _, err := dc.Resource(kube.RightsizePolicies).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	certs, err := aggtest.Certs(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := aggtest.Start(t, aggregator.Config{RESTConfig: cp.Config, Namespace: trustNS, Identity: "trust", CertFile: certs.CertFile, KeyFile: certs.KeyFile,
		FoldInterval: 200 * time.Millisecond, Step: time.Nanosecond, Grace: 5 * time.Second})
	aggtest.Wait(t, "leading", time.Minute, r.IsLeader)
	hc := aggtest.HTTPClient(certs.CAPEM)
	web := report.Key{Workload: report.Workload{Namespace: "shop", Kind: report.KindDeployment, Name: "web"}, Container: "app"}
	// The samples merged so far.
	samples := func() int64 {
		var n int64
		r.Store.Entries(func(e stateEntry) {
			if e.Key == web {
				n = e.Samples
			}
		})
		return n
	}
	build := func(node string, seq uint64, end time.Time, cpu float64, pods []string, policy string, extra func(*report.Builder)) *report.Report {
		b, _ := report.NewBuilder(report.BuilderConfig{Node: node})
		b.Describe(web, report.ContainerInfo{Policy: policy, Mode: "InPlace", Preset: "cgpilot-aggressive", Adjustable: true})
		for s := range 6 {
			ts := end.Add(-time.Minute + time.Duration(s)*10*time.Second)
			for _, p := range pods {
				b.Sample(web, p, ts, cpu, 400<<20)
			}
			b.NodeSample(ts, 1.2, 2<<30)
		}
		b.SetNode(report.NodeUsage{CPUCapacity: 8, CPUAllocatable: 8, MemoryCapacity: 32 << 30, MemoryAllocatable: 32 << 30})
		if extra != nil {
			extra(b)
		}
		rep := b.Cut(end)[0]
		rep.APIVersion, rep.Agent, rep.Sequence = report.APIVersion, report.Agent{ID: node, Started: time.Now()}, seq
		return rep
	}
	goodTok, evilTok := token("good"), token("evil")
	ends := pastWindows(72)
	for i, end := range ends[:70] {
		if st := postAs(ctx, t, hc, r.URL(), goodTok, build("good", uint64(i+1), end, 0.6, []string{"web-abc12-1", "web-abc12-2"}, "", nil)); st != 202 {
			t.Fatalf("good window %d: %d", i, st)
		}
		forged := build("evil", uint64(i+1), end, 0.1, []string{"web-forged"}, "loose", func(b *report.Builder) {
			if i == 0 { // 4,096 made-up containers, once
				for c := range report.MaxContainers - 1 {
					k := report.Key{Workload: report.Workload{Namespace: fmt.Sprintf("ns-%d", c%50), Kind: report.KindDeployment, Name: fmt.Sprintf("fake-%d", c)}, Container: "c"}
					b.Sample(k, "p", end.Add(-time.Second), 0.1, 1<<20)
				}
			}
		})
		// Idle, and 1e300 cores big.
		forged.Usage = report.NodeUsage{CPUCapacity: 1e300, CPUAllocatable: 1e300, MemoryCapacity: 1e300, MemoryAllocatable: 1e300}
		if st := postAs(ctx, t, hc, r.URL(), evilTok, forged); st != 202 {
			t.Fatalf("evil window %d: %d", i, st)
		}
	}
	var rec *report.WorkloadRecommendation
	aggtest.Wait(t, "web's merged recommendation of the 70 windows", time.Minute, func() bool {
		rec = r.Store.Recommendation(web)
		return rec != nil && rec.Samples >= 70*12
	})
	if rec.Nodes != 1 || rec.Samples != 70*12 || rec.Policy != "shop-strict" || rec.CPU.Target < 0.5 {
		t.Errorf("web's recommendation %+v: want the good node's 840 samples alone (about 0.6 cores) under shop-strict", rec)
	}
	st := r.Store.Stats()
	if st.Workloads != 1 || st.Containers != 1 {
		t.Errorf("the store holds %d workloads, %d containers: want web's alone (no fake container)", st.Workloads, st.Containers)
	}
	dropped := func(reason string) float64 {
		var v float64
		for _, l := range strings.Split(metricsOf(t, r), "\n") {
			if strings.HasPrefix(l, `cgpilot_aggregator_report_items_dropped_total{reason="`+reason+`"} `) {
				fmt.Sscan(strings.Fields(l)[1], &v)
			}
		}
		return v
	}
	// 70 forged windows of web and 4,095 made-up containers: each dropped,
	// as not on the node or past the 1,024 a report may hold.
	if n := dropped("not_on_node") + dropped("over_keys"); n != 70+report.MaxContainers-1 || dropped("node_size") != 70 {
		t.Errorf("dropped %v not on the node, %v over the keys, %v node sizes: want 4,165 containers and 70 sizes", dropped("not_on_node"), dropped("over_keys"), dropped("node_size"))
	}
	evil, ok := r.Profiles.Node("evil", time.Now())
	if !ok || evil.Usage.CPUAllocatable != 8 || evil.Usage.MemoryAllocatable != 32<<30 {
		t.Errorf("evil's size as the aggregator holds it: %+v (want its Node's 8 cores, 32 GiB)", evil.Usage)
	}
	t.Logf("web/app: %.3f cores, %.0f MiB from %d samples of %d node(s), policy %s; evil's forged reports dropped",
		rec.CPU.Target, rec.Memory.Target/(1<<20), rec.Samples, rec.Nodes, rec.Policy)

	// A web pod bound to evil: its reports of web count now, for that pod.
	if _, err := cs.CoreV1().Pods("shop").Create(ctx, deploymentPod("shop", "web", "web-abc12-3", "evil"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	aggtest.Wait(t, "the pod on evil in the aggregator's pod cache", 30*time.Second, func() bool { return r.BoundPods("evil", web.Workload) == 1 })
	before := samples()
	if st := postAs(ctx, t, hc, r.URL(), goodTok, build("good", 71, ends[70], 0.6, []string{"web-abc12-1", "web-abc12-2"}, "", nil)); st != 202 {
		t.Fatal(st)
	}
	// Claiming two pods and 60 samples each: one pod of 7 rounds at most.
	if st := postAs(ctx, t, hc, r.URL(), evilTok, build("evil", 71, ends[70], 0.6, []string{"web-abc12-3", "web-abc12-9"}, "", nil)); st != 202 {
		t.Fatal(st)
	}
	if st := postAs(ctx, t, hc, r.URL(), evilTok, build("evil", 72, ends[71], 0.6, []string{"web-abc12-3"}, "", nil)); st != 202 {
		t.Fatal(st)
	}
	deadline := time.Now().Add(time.Minute)
	for samples() != before+12+6 {
		if time.Now().After(deadline) {
			t.Fatalf("web's samples %d, want %d + the good node's 12 + evil's own pod's 6 (dropped: over_samples %v, pods_capped %v, not_on_node %v)",
				samples(), before, dropped("over_samples"), dropped("pods_capped"), dropped("not_on_node"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if dropped("over_samples") != 1 {
		t.Error("evil's window of two claimed pods was not refused as over pods × rounds")
	}
}

// TestAggregatorEndpointsAuthorize (issue 19, the unauthenticated client
// and the tenant): on the real API server, the JSON API and /metrics
// answer what TokenReview and SubjectAccessReview allow with the roles
// deploy/ ships: a cluster viewer reads every namespace, a namespace's
// reader only its namespace, anyone else nothing; tokens for the API
// server's audience are refused before any review; and a spray of junk
// and forged tokens from one client neither reaches the API server beyond
// its small budget nor stops a real agent from reporting with a freshly
// rotated token.
func TestAggregatorEndpointsAuthorize(t *testing.T) {
	bins := tier.E2E(t)
	cp := harness.MustStart(t, bins, harness.Options{})
	cs := cp.Client
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	applyCRDs(ctx, t, cp)
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	roles, err := os.ReadFile(filepath.Join(root, "deploy", "kustomize", "components", "aggregator", "dashboard-rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := deploy.Decode(roles)
	if err != nil {
		t.Fatal(err)
	}
	if err := deploy.Apply(ctx, cp.Config, objs, deploy.ApplyOptions{FieldManager: "cgpilot-test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.CreateFakeNode(ctx, harness.FakeNode{Name: "n1"}); err != nil {
		t.Fatal(err)
	}
	agentToken := agentTokens(ctx, t, cs, "n1")
	for _, ns := range []string{"shop", "bank"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, deploymentPod(ns, "app", "app-abc12-1", "n1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Users: a cluster viewer, shop's reader, and someone with no role.
	users := map[string]string{}
	for _, u := range []struct{ ns, name, binding string }{{trustNS, "dashboard", "cluster"}, {"shop", "dev", "shop"}, {"bank", "nobody", ""}} {
		if _, err := cs.CoreV1().ServiceAccounts(u.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: u.name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		subj := []rbacv1.Subject{{Kind: "ServiceAccount", Name: u.name, Namespace: u.ns}}
		ref := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cgpilot-dashboard-viewer"}
		switch u.binding {
		case "cluster":
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "cgpilot-dashboard"}, Subjects: subj, RoleRef: ref}, metav1.CreateOptions{})
		case "shop":
			_, err = cs.RbacV1().RoleBindings("shop").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "cgpilot-dashboard"}, Subjects: subj, RoleRef: ref}, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(u.ns).CreateToken(ctx, u.name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{auth.Audience}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		users[u.name] = tr.Status.Token
	}
	apiAudience, err := cs.CoreV1().ServiceAccounts(trustNS).CreateToken(ctx, "dashboard", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	certs, err := aggtest.Certs(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := aggtest.Start(t, aggregator.Config{RESTConfig: cp.Config, Namespace: trustNS, Identity: "authz", CertFile: certs.CertFile, KeyFile: certs.KeyFile,
		FoldInterval: 200 * time.Millisecond})
	aggtest.Wait(t, "leading", time.Minute, r.IsLeader)
	hc := aggtest.HTTPClient(certs.CAPEM)
	// The agent of n1 reports both namespaces' apps.
	agentTok := agentToken("n1")
	end := pastWindows(1)[0]
	b, _ := report.NewBuilder(report.BuilderConfig{Node: "n1"})
	for _, ns := range []string{"shop", "bank"} {
		k := report.Key{Workload: report.Workload{Namespace: ns, Kind: report.KindDeployment, Name: "app"}, Container: "app"}
		b.Sample(k, "app-abc12-1", end.Add(-time.Second), 0.2, 100<<20)
		b.OOM(report.OOMKill{Key: k, Pod: "app-abc12-1", Time: end.Add(-2 * time.Second), UsageBytes: 100 << 20})
	}
	rep := b.Cut(end)[0]
	rep.APIVersion, rep.Agent, rep.Sequence = report.APIVersion, report.Agent{ID: "a1", Started: time.Now()}, 1
	if st := postAs(ctx, t, hc, r.URL(), agentTok, rep); st != 202 {
		t.Fatalf("the agent's report: %d", st)
	}

	// Each caller from an address of its own, as nodes and users are: the
	// users from 127.0.0.2, the agent from 127.0.0.1, a sprayer from
	// 127.0.0.3.
	from := func(ip string, base *http.Client) *http.Client {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if base != nil {
			tr = base.Transport.(*http.Transport).Clone()
		}
		tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}).DialContext
		return &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	users2 := from("127.0.0.2", nil)
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.HTTPURL()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := users2.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, tc := range []struct {
		who, token, path string
		status           int
		has, hasNot      string
	}{
		{"anonymous", "", "/api/v1/workloads", 401, "", "shop"},
		{"anonymous", "", "/api/v1/history", 401, "", "app-abc12-1"},
		{"anonymous", "", "/metrics", 401, "", "cgpilot_"},
		{"the API server's audience", apiAudience.Status.Token, "/api/v1/workloads", 401, "audience", "shop"},
		{"the agent", agentTok, "/api/v1/workloads", 403, "", "shop"},
		{"the cluster viewer", users["dashboard"], "/api/v1/workloads", 200, "bank", ""},
		{"the cluster viewer", users["dashboard"], "/api/v1/history", 200, "app-abc12-1", ""},
		{"the cluster viewer", users["dashboard"], "/metrics", 200, "cgpilot_aggregator_reports_total", ""},
		{"shop's reader", users["dev"], "/api/v1/workloads?namespace=shop", 200, "shop", "bank"},
		{"shop's reader", users["dev"], "/api/v1/history?namespace=shop", 200, "shop", "bank"},
		{"shop's reader", users["dev"], "/api/v1/workloads?namespace=bank", 403, "", "app-abc12-1"},
		{"shop's reader", users["dev"], "/api/v1/workloads", 403, "", "app-abc12-1"},
		{"shop's reader", users["dev"], "/api/v1/nodes", 403, "", "n1"},
		{"shop's reader", users["dev"], "/metrics", 403, "", "cgpilot_"},
		{"a user with no role", users["nobody"], "/api/v1/workloads?namespace=bank", 403, "", "app-abc12-1"},
	} {
		st, body := get(tc.path, tc.token)
		if st != tc.status || (tc.has != "" && !strings.Contains(body, tc.has)) || (tc.hasNot != "" && strings.Contains(body, tc.hasNot)) {
			t.Errorf("%s GET %s: %d %.300s; want %d, containing %q and not %q", tc.who, tc.path, st, body, tc.status, tc.has, tc.hasNot)
		}
	}
	if st, _ := get("/", ""); st != 200 {
		t.Errorf("the page itself (no data): %d", st)
	}

	// A spray of junk and forged tokens from 127.0.0.3 while the agent,
	// from 127.0.0.1, reports with a freshly rotated token.
	reviews := func(result string) float64 {
		var v float64
		for _, l := range strings.Split(metricsOf(t, r), "\n") {
			if strings.HasPrefix(l, `cgpilot_aggregator_token_reviews_total{result="`+result+`"} `) {
				fmt.Sscan(strings.Fields(l)[1], &v)
			}
		}
		return v
	}
	reviewedBefore := reviews("reviewed")
	enc := base64.RawURLEncoding.EncodeToString
	sprayer, plain := from("127.0.0.3", aggtest.HTTPClient(certs.CAPEM)), from("127.0.0.3", nil)
	const spray = 2000
	sprayStart := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < spray; i += 8 {
				tok := fmt.Sprintf("junk-%d", i)
				if i%2 == 0 {
					tok = enc([]byte(`{"alg":"RS256"}`)) + "." + enc(fmt.Appendf(nil, `{"aud":["cgpilot-aggregator"],"exp":%d,"sub":"system:serviceaccount:x:y%d"}`, time.Now().Add(time.Hour).Unix(), i)) + ".c2ln"
				}
				url, c := r.URL()+report.PathReports, sprayer
				if i%4 == 1 {
					url, c = r.HTTPURL()+"/api/v1/workloads", plain
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
				if strings.HasPrefix(url, r.HTTPURL()) {
					req.Method = http.MethodGet
				}
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			}
		}()
	}
	// Meanwhile the kubelet rotates the agent's token: a review it needs.
	time.Sleep(200 * time.Millisecond)
	rotated := agentToken("n1")
	rep2 := *rep
	rep2.WindowEnd, rep2.Sequence = end.Add(time.Minute), 2
	agentStatus := postAs(ctx, t, hc, r.URL(), rotated, &rep2)
	wg.Wait()
	elapsed := time.Since(sprayStart)
	if agentStatus != 202 {
		var lines []string
		for _, l := range strings.Split(metricsOf(t, r), "\n") {
			if strings.Contains(l, "reports_total") || strings.Contains(l, "refused_total") || strings.Contains(l, "token_reviews") {
				lines = append(lines, l)
			}
		}
		t.Errorf("the agent's report during the spray, with a rotated token: %d\n%s", agentStatus, strings.Join(lines, "\n"))
	}
	reviewed := reviews("reviewed") - reviewedBefore
	t.Logf("%d junk and forged tokens from one client: statuses %v; %.0f token reviews in all (the agent's included), %.0f refused before any, %.0f throttled",
		spray, statuses, reviewed, reviews("precheck"), reviews("throttled"))
	// The sprayer's budget: a burst of 5, then one a second; and the
	// agent's review.
	if budget := 5 + elapsed.Seconds() + 2; reviewed > budget {
		t.Errorf("the spray made %.0f TokenReviews in %v: want at most the sprayer's budget and the agent's (%.0f)", reviewed, elapsed.Round(time.Millisecond), budget)
	}
	if statuses[http.StatusOK] != 0 || statuses[http.StatusAccepted] != 0 {
		t.Errorf("junk tokens were served: %v", statuses)
	}
}
