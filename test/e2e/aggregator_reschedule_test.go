//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/cgpilot/cgpilot/aggregator"
	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/aggregator/reschedule"
	"github.com/cgpilot/cgpilot/test/aggtest"
	"github.com/cgpilot/cgpilot/test/descheduler"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/simcluster"
	"github.com/cgpilot/cgpilot/test/tier"
)

// freeLoopbackPort returns a port free on 127.0.0.1 now.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// usageTable is the simulated pods' use by their app label (cores).
type usageTable struct {
	mu  sync.Mutex
	cpu map[string]float64
}

func (u *usageTable) set(app string, cpu float64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.cpu[app] = cpu
}

func (u *usageTable) usage(p *corev1.Pod, _ time.Time) (float64, float64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.cpu[p.Labels["app"]], 200 << 20
}

// TestReschedulingWithTheDescheduler runs the whole rescheduling on real
// parts: the test bed's API server, controllers and kube-scheduler (with
// the aggregator's filter and prioritize verbs), six registered nodes
// whose kubelets and agents are simulated (test/simcluster: pods become
// Ready, reports carry each pod's use), the aggregator with its
// rescheduler, the upstream descheduler (built from the module proxy) run
// in-cluster style as the component's service account, with the
// component's RBAC, policy and eviction webhook.
//
// hot-a and hot-b hold every pod at first. Their pods idle now but web's
// peaked yesterday (0.9 cores per pod): the sums of 7-day peaks (4.7 and
// 4.3 cores) break the 0.8 × 4 rule. The descheduler moves web pods to
// the cool nodes until the caps (3 moves of one workload, 2 per node, per
// hour) stop it: one node is left unresolved, its further evictions
// refused by the cap. api (BestEffort, so the descheduler tries it first)
// has a PodDisruptionBudget allowing no disruption: never evicted. The
// DaemonSet's pods, the emptyDir pods, a bare pod and a mirror pod are
// never moved. Then two batch pods on cool-4 start to use 1.8 cores
// each: the node crosses the emergency watermark and one moves away
// within a minute of the report that shows it.
func TestReschedulingWithTheDescheduler(t *testing.T) {
	bins := tier.E2E(t)
	deschedBin := tier.Descheduler(t)
	if os.Geteuid() != 0 {
		t.Skip("the descheduler runs in-cluster style in a private mount namespace: needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	certs, err := aggtest.Certs(dir)
	if err != nil {
		t.Fatal(err)
	}
	nodes := []string{"hot-a", "hot-b", "cool-1", "cool-2", "cool-3", "cool-4"}
	tokens, err := simcluster.Tokens(dir, nodes)
	if err != nil {
		t.Fatal(err)
	}
	// The API server presents a client certificate to the webhooks, the
	// scheduler to the extender: the only callers those answer.
	callers, admission := webhookCallers(t, dir, "system:kube-scheduler")
	sched := callers.Certs["system:kube-scheduler"]
	securePort, httpPort := freeLoopbackPort(t), freeLoopbackPort(t)
	aggSecure := "127.0.0.1:" + strconv.Itoa(securePort)
	schedCfg := extenderConfig(aggSecure, certs.CAPEM, sched)
	cp := harness.MustStart(t, bins, harness.Options{Controllers: true, SchedulerConfig: schedCfg,
		ExtraFlags: map[string][]string{"kube-apiserver": {admission}}})
	cs := cp.Client
	applyCRDs(ctx, t, cp)
	for _, ns := range []string{"cgpilot-system", "shop"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The component's descheduler identity, RBAC, policy and webhook, as
	// rendered for a cluster; only where they reach the aggregator changes
	// (loopback here, its Service there).
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	policy, err := descheduler.Install(ctx, cp.Config, root, descheduler.Endpoints{WebhookURL: "https://" + aggSecure + reschedule.PathEvictions,
		CABundle: certs.CAPEM, QueryURL: fmt.Sprintf("http://127.0.0.1:%d/prometheus", httpPort)})
	if err != nil {
		t.Fatal(err)
	}

	// The aggregator, as the component runs it but with a 5 s report
	// grid and short passes.
	const period = 5 * time.Second
	agg := aggtest.Start(t, aggregator.Config{RESTConfig: cp.Config, Namespace: "cgpilot-system", Identity: "agg",
		SecureAddr: aggSecure, HTTPAddr: "127.0.0.1:" + strconv.Itoa(httpPort), StaticTokens: tokens,
		CertFile: certs.CertFile, KeyFile: certs.KeyFile, Period: period, SampleInterval: time.Second, FoldInterval: 200 * time.Millisecond, LoadInterval: time.Second,
		Placement: profile.Rule{CPU: 0.8, Memory: 0.8}, HotWatermark: 0.8, Reschedule: true,
		RescheduleConfig: reschedule.Config{Emergency: 0.9, QueueInterval: 10 * time.Second, CheckInterval: 2 * time.Second,
			MoveTimeout: time.Minute, PerNode: 2, PerWorkload: 3, PerHour: 10},
		// The test bed's API server issues its pods' tokens for its
		// --service-account-issuer (no --api-audiences).
		DeschedulerAudiences: []string{"https://kubernetes.default.svc.cluster.local"},
		WebhookClientCAFile:  callers.CAFile, ExtenderClientCAFile: callers.CAFile})
	aggtest.Wait(t, "the aggregator leading", 60*time.Second, agg.IsLeader)
	rs := agg.Rescheduler

	for _, n := range nodes {
		if _, err := cp.CreateFakeNode(ctx, harness.FakeNode{Name: n, CPU: "4", Memory: "8Gi", Heartbeat: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	cordon := func(on bool, names ...string) {
		t.Helper()
		for _, n := range names {
			patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
			if _, err := cs.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	cordon(true, nodes[2:]...)
	waitFor(t, "default ServiceAccount", 60*time.Second, func() bool {
		_, err := cs.CoreV1().ServiceAccounts("shop").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})

	use := &usageTable{cpu: map[string]float64{"web": 0.3, "api": 0.5, "scratch": 0.5, "logs": 0.1, "bare": 0.4, "mirror": 0.2, "batch": 0.2}}
	sim, err := simcluster.Start(ctx, simcluster.Config{Client: cs, Nodes: nodes, NodeCPU: 4, NodeMemory: 8 << 30, BaseCPU: 0.1, BaseMemory: 1 << 30,
		Usage: use.usage, Period: period, URL: agg.URL(), CAFile: certs.CAFile, TokenDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	createShop(ctx, t, cs)
	waitFor(t, "every pod placed and Ready", 120*time.Second, func() bool {
		l, err := cs.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 6+4+2+6+2 {
			return false
		}
		for _, p := range l.Items {
			if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
				return false
			}
		}
		return true
	})
	cordon(false, nodes[2:]...)
	before := snapshotPods(ctx, t, cs)
	for _, p := range before {
		if !strings.HasPrefix(p.node, "hot-") {
			if p.app != "logs" {
				t.Fatalf("%s placed on %s with the cool nodes cordoned", p.name, p.node)
			}
		}
	}

	// Yesterday web peaked at 0.9 cores per pod (the other apps as now);
	// from now on each window reports the table.
	peak := func(p *corev1.Pod, ts time.Time) (float64, float64) {
		if p.Labels["app"] == "web" {
			return 0.9, 200 << 20
		}
		return use.usage(p, ts)
	}
	if err := sim.SendWindow(ctx, time.Now().Truncate(period).Add(-24*time.Hour), peak); err != nil {
		t.Fatal(err)
	}
	var crossedAt atomic.Int64 // when the first report of the emergency was accepted
	var emergency atomic.Bool
	go sim.Run(ctx, func(end time.Time, err error) {
		if err != nil {
			t.Logf("reports of %s: %v", end.Format(time.TimeOnly), err)
			return
		}
		if emergency.Load() && crossedAt.Load() == 0 {
			crossedAt.Store(time.Now().UnixNano())
		}
	})
	rule := profile.Rule{CPU: 0.8, Memory: 0.8}
	breaking := func() []string {
		var out []string
		for _, l := range agg.Profiles.Loads() {
			if rule.Ratio(l) > 1 {
				out = append(out, fmt.Sprintf("%s (%.2f of %.0f cores)", l.Node, l.CPU, l.CPUAllocatable))
			}
		}
		return out
	}
	aggtest.Wait(t, "the loads of the six nodes", 60*time.Second, func() bool {
		n := 0
		for _, l := range agg.Profiles.Loads() {
			if l.Pods > 0 || strings.HasPrefix(l.Node, "cool-") {
				n++
			}
		}
		return n == 6 && len(breaking()) == 2
	})
	hotBefore := breaking()
	t.Logf("nodes breaking the rule before: %v", hotBefore)

	// The descheduler, as its Deployment runs it, with its service
	// account's token.
	token, err := descheduler.Token(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	// Its query: the token reviewed (TokenReview) and the path authorized
	// (SubjectAccessReview) by the real API server; the component's role
	// grants it to the descheduler alone.
	exp := int64(600)
	other, err := cs.CoreV1().ServiceAccounts("shop").CreateToken(ctx, "default",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		who, token string
		want       int
	}{{"no token", "", 401}, {"a junk token", "junk", 401}, {"shop's default service account", other.Status.Token, 403}, {"the descheduler", token, 200}} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, agg.HTTPURL()+reschedule.PathQuery+"?query="+reschedule.Series, nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode != c.want || (c.want == 200 && strings.Count(string(body), `"instance"`) != len(nodes)) {
			t.Errorf("the query as %s: %d %.300s, want %d (and every node)", c.who, resp.StatusCode, body, c.want)
		}
	}
	ca, err := descheduler.CA(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ddir := filepath.Join(dir, "descheduler")
	if err := os.MkdirAll(ddir, 0o700); err != nil {
		t.Fatal(err)
	}
	dp, err := descheduler.Start(ctx, descheduler.Options{Bin: deschedBin, Dir: ddir, Server: cp.Config.Host, CA: ca, Token: token,
		Policy: policy, Interval: 5 * time.Second, Args: []string{"--v=3"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = dp.Stop()
		if t.Failed() {
			t.Logf("descheduler log (last 60 lines):\n%s", dp.Tail(60))
		}
	}()
	start := time.Now()

	// Phase 1: the peak rule, until the caps stop the moves.
	count := func(state string) int {
		n := 0
		for _, m := range rs.Moves(10000) {
			if m.State == state {
				n++
			}
		}
		return n
	}
	waitFor(t, "three web pods moved and a move refused by the workload cap", 180*time.Second, func() bool {
		if ok, err := dp.Exited(); ok {
			t.Fatalf("the descheduler exited: %v\n%s", err, dp.Tail(40))
		}
		capped := false
		for _, m := range rs.Moves(10000) {
			capped = capped || m.Code == reschedule.CodeCapWorkload
		}
		return count(reschedule.StateMoved) >= 3 && capped
	})
	converged := time.Since(start)
	time.Sleep(2 * period) // the moved pods' new nodes report them
	after := snapshotPods(ctx, t, cs)
	aggtest.Wait(t, "the loads after the moves", 30*time.Second, func() bool { return len(breaking()) <= 1 })
	hotAfter := breaking()
	moves := rs.Moves(10000)
	perNode, perWorkload := map[string]int{}, map[string]int{}
	var moved, pdbRefusals, capRefusals int
	for _, m := range moves {
		switch {
		case m.State == reschedule.StateDenied:
			if strings.HasPrefix(m.Code, "cap_") {
				capRefusals++
			}
			continue
		case m.Code == "pdb":
			pdbRefusals++
			continue
		}
		perNode[m.Node]++
		perWorkload[m.Workload.String()]++
		if m.State == reschedule.StateMoved {
			moved++
			if !strings.HasPrefix(m.To, "cool-") {
				t.Errorf("%s moved to %s, want a cool node", m.Pod, m.To)
			}
		}
		if !strings.HasPrefix(m.Pod, "web-") {
			t.Errorf("moved %s (%s): only web pods may move", m.Pod, m.State)
		}
	}
	for n, c := range perNode {
		if c > 2 {
			t.Errorf("%d moves from %s: the cap is 2 per node and hour", c, n)
		}
	}
	for w, c := range perWorkload {
		if c > 3 {
			t.Errorf("%d moves of %s: the cap is 3 per workload and hour", c, w)
		}
	}
	if pdbRefusals == 0 {
		t.Error("no eviction of api (BestEffort: tried first) was refused for its PodDisruptionBudget")
	}
	if capRefusals == 0 {
		t.Error("no move was refused by a cap")
	}
	// Pods that must never move, and the PDB's pods, are where they were.
	for key, p := range before {
		if p.app == "web" {
			continue
		}
		if q, ok := after[key]; !ok || q.node != p.node {
			t.Errorf("%s (%s) moved or went: before %+v, after %+v", key, p.app, p, q)
		}
	}
	if len(hotAfter) >= len(hotBefore) {
		t.Errorf("nodes breaking the rule before %v, after %v", hotBefore, hotAfter)
	}
	t.Logf("phase 1 (7-day peaks): breaking the rule before %v, after %v; %d pods moved in %v; refused: %d by caps, %d by the PDB (per node %v)",
		hotBefore, hotAfter, moved, converged.Round(time.Second), capRefusals, pdbRefusals, perNode)

	// Phase 2: an emergency on cool-4.
	cordon(true, "hot-a", "hot-b", "cool-1", "cool-2", "cool-3")
	batch := &appsDeployment{name: "batch", ns: "shop", replicas: 2, labels: map[string]string{"app": "batch"}, spec: podSpec(nil, "100m")}
	if err := batch.create(ctx, cs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the batch pods on cool-4", 60*time.Second, func() bool {
		n := 0
		for _, p := range sim.PodsOn("cool-4") {
			if p.Labels["app"] == "batch" && p.Status.Phase == corev1.PodRunning {
				n++
			}
		}
		return n == 2
	})
	cordon(false, "hot-a", "hot-b", "cool-1", "cool-2", "cool-3")
	aggtest.Wait(t, "cool-4 reporting its batch pods", 30*time.Second, func() bool {
		l, ok := agg.Profiles.NodeLoad("cool-4")
		return ok && l.Pods >= 3
	})
	use.set("batch", 1.8) // 3.6 cores of batch: cool-4 above 0.9 × 4
	emergency.Store(true)
	var em reschedule.Move
	waitFor(t, "a batch pod moved off cool-4 by the emergency pass", 120*time.Second, func() bool {
		for _, m := range rs.Moves(10000) {
			if m.Node == "cool-4" && m.Reason == reschedule.ReasonEmergency && m.State != reschedule.StateDenied && !strings.HasPrefix(m.Code, "pdb") {
				em = m
				return true
			}
		}
		return false
	})
	crossed := time.Unix(0, crossedAt.Load())
	if crossedAt.Load() == 0 {
		t.Fatal("no report was accepted after the batch pods' use rose")
	}
	took := em.Time.Sub(crossed)
	if took > time.Minute {
		t.Errorf("the emergency pass acted %v after the report that crossed the watermark, want within a minute", took)
	}
	waitFor(t, "the emergency move's replacement placed", 90*time.Second, func() bool {
		for _, m := range rs.Moves(10000) {
			if m.ID == em.ID {
				em = m
			}
		}
		return em.State == reschedule.StateMoved || em.State == reschedule.StateFailed || em.State == reschedule.StateUnresolved
	})
	if em.State != reschedule.StateMoved || em.To == "cool-4" {
		t.Errorf("the emergency move ended %+v", em)
	}
	rep := rs.ReportFor("test", start.Add(-time.Minute), time.Now().Add(time.Minute))
	t.Logf("phase 2 (emergency): %s moved from cool-4 to %s, %v after the report that showed cool-4 above 0.9; report: asked %d, moved %d, failed %d %v, denied %d %v, success rate %.2f",
		em.Pod, em.To, took.Round(time.Millisecond), rep.Asked, rep.Moved, rep.Failed, rep.Failures, rep.Denied, rep.Denials, rep.SuccessRate)
	if st := sim.Stats(); st.ReportErrors > 0 {
		t.Logf("simulated reports: %+v", st)
	}
}

type podState struct {
	name, app, node string
	uid             types.UID
}

// snapshotPods maps every pod of shop by name to where it runs.
func snapshotPods(ctx context.Context, t *testing.T, cs kubernetes.Interface) map[string]podState {
	t.Helper()
	l, err := cs.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]podState{}
	for _, p := range l.Items {
		out[p.Name] = podState{name: p.Name, app: p.Labels["app"], node: p.Spec.NodeName, uid: p.UID}
	}
	return out
}

func podSpec(volumes []corev1.Volume, cpu string) corev1.PodSpec {
	c := corev1.Container{Name: "c", Image: "docker.io/local/busybox:1"}
	if cpu != "" {
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Mi")}
	}
	for _, v := range volumes {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
	}
	return corev1.PodSpec{TerminationGracePeriodSeconds: new(int64), Containers: []corev1.Container{c}, Volumes: volumes}
}

// createShop creates the workloads on the (only schedulable) hot nodes:
// web (6), api (4, BestEffort, a PDB allowing no disruption), scratch (2,
// emptyDir), logs (a DaemonSet: one per node), a bare pod and a mirror
// pod.
func createShop(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	for _, d := range []*appsDeployment{
		{name: "web", ns: "shop", replicas: 6, labels: map[string]string{"app": "web"}, spec: podSpec(nil, "100m")},
		{name: "api", ns: "shop", replicas: 4, labels: map[string]string{"app": "api"}, spec: podSpec(nil, "")},
		{name: "scratch", ns: "shop", replicas: 2, labels: map[string]string{"app": "scratch"},
			spec: podSpec([]corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}, "100m")},
	} {
		if err := d.create(ctx, cs); err != nil {
			t.Fatal(err)
		}
	}
	minAvail := intstr.FromInt32(4)
	if _, err := cs.PolicyV1().PodDisruptionBudgets("shop").Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "api"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvail, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "logs", Namespace: "shop"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "logs"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "logs"}}, Spec: podSpec(nil, "10m")}}}
	if _, err := cs.AppsV1().DaemonSets("shop").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "shop", Labels: map[string]string{"app": "bare"}}, Spec: podSpec(nil, "100m")}
	bare.Spec.NodeName = "hot-a"
	if _, err := cs.CoreV1().Pods("shop").Create(ctx, bare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, "hot-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	mirror := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "static-hot-b", Namespace: "shop", Labels: map[string]string{"app": "mirror"},
		Annotations:     map[string]string{corev1.MirrorPodAnnotationKey: "cgpilot-test", "kubernetes.io/config.source": "file"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: &yes}}},
		Spec: podSpec(nil, "100m")}
	mirror.Spec.NodeName = "hot-b"
	if _, err := cs.CoreV1().Pods("shop").Create(ctx, mirror, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
