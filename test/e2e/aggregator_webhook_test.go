//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/cgpilot/cgpilot/aggregator"
	"github.com/cgpilot/cgpilot/aggregator/kube"
	"github.com/cgpilot/cgpilot/aggregator/webhook"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/test/aggtest"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

// TestAdmissionWebhook registers the aggregator's mutating webhook with a
// real API server and an Auto RightsizePolicy on namespace shop. The API
// server presents a client certificate (its AdmissionConfiguration's
// kubeconfig), the only callers the webhook answers. New pods
// of a workload with a merged recommendation get it as their requests;
// the QoS class the API server computes never changes (checked on random
// pods against the same pods created without the webhook); pods without a
// recommendation are admitted unchanged with an Event on the policy; when
// the aggregator is gone the API server admits pods unchanged (fail open)
// and counts it, and an agent's report of such pods becomes an Event.
func TestAdmissionWebhook(t *testing.T) {
	bins := tier.E2E(t)
	dir := t.TempDir()
	callers, admission := webhookCallers(t, dir)
	cp := harness.MustStart(t, bins, harness.Options{ExtraFlags: map[string][]string{"kube-apiserver": {admission}}})
	cs := cp.Client
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	applyCRDs(ctx, t, cp)
	for _, ns := range []string{"shop", "other"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dc, _ := dynamic.NewForConfig(cp.Config)
	policy := &v1alpha1.RightsizePolicy{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "RightsizePolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: "shop-auto"},
		// An hour of history, which the 70 reported minutes span (the
		// default, 24h, holds merged recommendations back as it does the
		// agents' own).
		Spec: v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeAuto, Limits: v1alpha1.LimitsKeepRatio, MinHistory: &metav1.Duration{Duration: time.Hour},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "shop"}}}}
	u, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(policy)
	if _, err := dc.Resource(kube.RightsizePolicies).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	certs, err := aggtest.Certs(dir)
	if err != nil {
		t.Fatal(err)
	}
	fleet := aggtest.NewFleet(aggtest.FleetConfig{Nodes: 1, PodsPerNode: 4, Seed: 5})
	tokens := tokenFiles(t, dir, fleet, 1)
	// web's pod on the reporting node: the aggregator believes the node's
	// reports of web, and matches web's policy, by it.
	yes := true
	webPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", Labels: map[string]string{"pod-template-hash": "7d9f5"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f5", UID: "00000000-0000-0000-0000-000000000001", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: fleet.NodeName(0), Containers: []corev1.Container{{Name: "app", Image: "docker.io/local/busybox:1"}, {Name: "side", Image: "docker.io/local/busybox:1"}}}}
	if _, err := cs.CoreV1().Pods("shop").Create(ctx, webPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agg := aggtest.Start(t, aggregator.Config{RESTConfig: cp.Config, Namespace: "default", Identity: "webhook", CertFile: certs.CertFile, KeyFile: certs.KeyFile,
		StaticTokens: tokens, FoldInterval: 200 * time.Millisecond, EventInterval: time.Second, Step: time.Nanosecond, WebhookClientCAFile: callers.CAFile})
	aggtest.Wait(t, "leading", time.Minute, agg.IsLeader)

	// 70 minutes of Deployment web's two containers on the node.
	web := report.Workload{Namespace: "shop", Kind: report.KindDeployment, Name: "web"}
	app, side := report.Key{Workload: web, Container: "app"}, report.Key{Workload: web, Container: "side"}
	c := clientsFor(t, dir, fleet, 1, agg.URL(), certs)[0]
	rng := rand.New(rand.NewPCG(1, 2))
	for _, end := range pastWindows(70) {
		b, _ := report.NewBuilder(report.BuilderConfig{Node: fleet.NodeName(0)})
		b.Describe(app, report.ContainerInfo{Policy: "shop-auto", Mode: "Auto", Adjustable: true})
		for s := range 6 {
			ts := end.Add(-time.Minute + time.Duration(s)*10*time.Second)
			b.Sample(app, "web-1", ts, 0.2+0.05*rng.NormFloat64(), 300<<20)
			b.Sample(side, "web-1", ts, 0.02, 40<<20)
		}
		c.Enqueue(b.Cut(end)[0])
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	aggtest.Wait(t, "recommendations for web", time.Minute, func() bool {
		return agg.Store.Recommendation(app) != nil && agg.Store.Recommendation(side) != nil
	})
	recApp, recSide := agg.Store.Recommendation(app).Recommendation, agg.Store.Recommendation(side).Recommendation
	t.Logf("web/app: %.3f cores, %.0f MiB; web/side: %.3f cores, %.0f MiB", recApp.CPU.Target, recApp.Memory.Target/(1<<20), recSide.CPU.Target, recSide.Memory.Target/(1<<20))
	if p := agg.Store.Recommendation(side).Policy; p != "shop-auto" {
		t.Errorf("web/side's recommendation is of policy %q: the aggregator matches web's pods to shop-auto whatever the report said", p)
	}
	// Anyone else is refused: no client certificate, or one of another CA.
	review := fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},`+
		`"operation":"CREATE","namespace":"shop","object":%s}}`, mustJSON(t, webPod))
	for name, c := range map[string]*http.Client{"anonymous": aggtest.HTTPClient(certs.CAPEM)} {
		resp, err := c.Post(agg.URL()+webhook.PathMutate, "application/json", strings.NewReader(review))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || strings.Contains(string(body), "patch") {
			t.Errorf("%s POST of a pod to the webhook: %d %s", name, resp.StatusCode, body)
		}
	}

	fail := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	timeout := int32(2)
	url := agg.URL() + webhook.PathMutate
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "cgpilot-aggregator"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "pods.aggregator.cgpilot.io", AdmissionReviewVersions: []string{"v1"},
			SideEffects: &none, FailurePolicy: &fail, TimeoutSeconds: &timeout,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: certs.CAPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"}}}},
		}}}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	n := 0
	create := func(ns, owner string, rs ...corev1.ResourceRequirements) *corev1.Pod {
		t.Helper()
		n++
		yes := true
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", n), Namespace: ns}}
		if owner != "" {
			p.Labels = map[string]string{"pod-template-hash": "7d9f5"}
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner + "-7d9f5", UID: "00000000-0000-0000-0000-000000000001", Controller: &yes}}
		}
		for i, r := range rs {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: []string{"app", "side"}[i], Image: "docker.io/local/busybox:1", Resources: r})
		}
		got, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod: %v", err)
		}
		return got
	}
	// The API server picks the configuration up asynchronously.
	waitFor(t, "the webhook in effect", 30*time.Second, func() bool {
		p := create("shop", "web", res("1", "1Gi", "2", "2Gi"))
		return p.Annotations[v1alpha1.AnnotationAdmission] != ""
	})

	// Burstable, limits keep their ratio; the sidecar without limits gets requests only.
	p := create("shop", "web", res("1", "1Gi", "2", "2Gi"), res("100m", "128Mi", "", ""))
	if p.Annotations[v1alpha1.AnnotationAdmission] != "applied" || p.Status.QOSClass != corev1.PodQOSBurstable {
		t.Errorf("burstable pod: annotation %q, QoS %s", p.Annotations[v1alpha1.AnnotationAdmission], p.Status.QOSClass)
	}
	a := p.Spec.Containers[0].Resources
	if !near(a.Requests.Cpu(), recApp.CPU.Target) || !near(a.Requests.Memory(), recApp.Memory.Target) ||
		!near(a.Limits.Cpu(), 2*a.Requests.Cpu().AsApproximateFloat64()) {
		t.Errorf("app resources %v / %v, want requests %.3f / %.0f and limits ×2", a.Requests, a.Limits, recApp.CPU.Target, recApp.Memory.Target)
	}
	if s := p.Spec.Containers[1].Resources; !near(s.Requests.Cpu(), recSide.CPU.Target) || len(s.Limits) != 0 {
		t.Errorf("side resources %v / %v", s.Requests, s.Limits)
	}
	// Guaranteed stays Guaranteed.
	p = create("shop", "web", res("1", "1Gi", "1", "1Gi"), res("100m", "128Mi", "100m", "128Mi"))
	if p.Status.QOSClass != corev1.PodQOSGuaranteed || p.Annotations[v1alpha1.AnnotationAdmission] != "applied" || !near(p.Spec.Containers[0].Resources.Limits.Cpu(), recApp.CPU.Target) {
		t.Errorf("guaranteed pod: QoS %s, %q, %v", p.Status.QOSClass, p.Annotations[v1alpha1.AnnotationAdmission], p.Spec.Containers[0].Resources)
	}
	// BestEffort is left alone.
	p = create("shop", "web", corev1.ResourceRequirements{})
	if p.Status.QOSClass != corev1.PodQOSBestEffort || len(p.Spec.Containers[0].Resources.Requests) != 0 || p.Annotations[v1alpha1.AnnotationAdmission] != "qos-class" {
		t.Errorf("best-effort pod: QoS %s, %v, %q", p.Status.QOSClass, p.Spec.Containers[0].Resources, p.Annotations[v1alpha1.AnnotationAdmission])
	}
	// No recommendation: unchanged, annotated, an Event on the policy.
	p = create("shop", "api", res("1", "1Gi", "", ""))
	if p.Annotations[v1alpha1.AnnotationAdmission] != "no-recommendation" || p.Spec.Containers[0].Resources.Requests.Cpu().String() != "1" {
		t.Errorf("pod without a recommendation: %q, %v", p.Annotations[v1alpha1.AnnotationAdmission], p.Spec.Containers[0].Resources)
	}
	waitFor(t, "a NoRecommendation Event on the policy", 30*time.Second, func() bool { return policyEvent(ctx, t, cp, "NoRecommendation") })
	// Outside the policy: untouched, no annotation.
	if p = create("other", "web", res("1", "1Gi", "", "")); p.Annotations[v1alpha1.AnnotationAdmission] != "" {
		t.Errorf("pod outside the policy annotated %q", p.Annotations[v1alpha1.AnnotationAdmission])
	}

	// The QoS class of random pods: created through the webhook (shop) and
	// without it (other), the API server computes the same class.
	qty := []string{"", "50m", "100m", "250m", "1", "2"}
	mem := []string{"", "16Mi", "64Mi", "256Mi", "1Gi"}
	mutated := 0
	for i := range 24 {
		var rs []corev1.ResourceRequirements
		for range 1 + i%2 {
			r := res(qty[rng.IntN(len(qty))], mem[rng.IntN(len(mem))], qty[rng.IntN(len(qty))], mem[rng.IntN(len(mem))])
			switch rng.IntN(3) {
			case 0: // Guaranteed-shaped
				r = res("500m", "256Mi", "500m", "256Mi")
			case 1: // limits below requests are invalid: keep requests ≤ limits
				r = valid(r)
			}
			rs = append(rs, valid(r))
		}
		with, without := create("shop", "web", rs...), create("other", "web", rs...)
		if with.Status.QOSClass != without.Status.QOSClass {
			t.Errorf("pod %d: QoS %s through the webhook, %s without (%v)", i, with.Status.QOSClass, without.Status.QOSClass, rs)
		}
		if webhook.QOSClass(without) != without.Status.QOSClass {
			t.Errorf("pod %d: webhook.QOSClass says %s, the API server %s", i, webhook.QOSClass(without), without.Status.QOSClass)
		}
		if with.Annotations[v1alpha1.AnnotationAdmission] == "applied" {
			mutated++
		}
	}
	if mutated == 0 {
		t.Error("no random pod was mutated: the property test proves nothing")
	}
	t.Logf("24 random pods, limits KeepRatio: %d mutated, every QoS class kept", mutated)
	// Limits Keep clamps requests to the limits, which can turn a
	// Burstable pod Guaranteed: those are refused, the rest applied.
	patch := []byte(`{"spec":{"limits":"Keep"}}`)
	if _, err := dc.Resource(kube.RightsizePolicies).Patch(ctx, "shop-auto", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the policy change seen", 30*time.Second, func() bool {
		p := create("shop", "web", res("100m", "64Mi", "200m", "64Mi"))
		return p.Spec.Containers[0].Resources.Requests.Cpu().MilliValue() == 200 || p.Annotations[v1alpha1.AnnotationAdmission] == "qos-class"
	})
	results := map[string]int{}
	for i := range 24 {
		r := valid(res(qty[1+rng.IntN(len(qty)-1)], mem[1+rng.IntN(len(mem)-1)], qty[1+rng.IntN(len(qty)-1)], mem[1+rng.IntN(len(mem)-1)]))
		with, without := create("shop", "web", r), create("other", "web", r)
		if with.Status.QOSClass != without.Status.QOSClass {
			t.Errorf("Keep, pod %d: QoS %s through the webhook, %s without (%v)", i, with.Status.QOSClass, without.Status.QOSClass, r)
		}
		results[with.Annotations[v1alpha1.AnnotationAdmission]]++
	}
	t.Logf("24 random pods, limits Keep: %v, every QoS class kept", results)

	// The aggregator goes away: the API server admits pods unchanged.
	before := failOpenCount(ctx, t, cp)
	if err := agg.Stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p = create("shop", "web", res("1", "1Gi", "2", "2Gi"))
	if p.Annotations[v1alpha1.AnnotationAdmission] != "" || p.Spec.Containers[0].Resources.Requests.Cpu().String() != "1" {
		t.Errorf("with the aggregator gone: %q %v", p.Annotations[v1alpha1.AnnotationAdmission], p.Spec.Containers[0].Resources)
	}
	if after := failOpenCount(ctx, t, cp); after <= before {
		t.Errorf("apiserver_admission_webhook_fail_open_count %v → %v", before, after)
	}
	t.Logf("admitted without the webhook in %v", time.Since(start).Round(time.Millisecond))

	// The agent reports that pod as unadmitted: the next leader says so.
	agg2 := aggtest.Start(t, aggregator.Config{RESTConfig: cp.Config, Namespace: "default", Identity: "webhook-2", CertFile: certs.CertFile, KeyFile: certs.KeyFile,
		StaticTokens: tokens, FoldInterval: 200 * time.Millisecond, EventInterval: time.Second, WebhookClientCAFile: callers.CAFile})
	aggtest.Wait(t, "leading", time.Minute, agg2.IsLeader)
	c2 := clientsFor(t, dir, fleet, 1, agg2.URL(), certs)[0]
	b, _ := report.NewBuilder(report.BuilderConfig{Node: fleet.NodeName(0)})
	b.Describe(app, report.ContainerInfo{Policy: "shop-auto", Mode: "Auto", Adjustable: true, Unadmitted: 1})
	end := pastWindows(1)[0].Add(time.Minute)
	b.Sample(app, p.Name, end.Add(-time.Second), 0.2, 300<<20)
	c2.Enqueue(b.Cut(end)[0])
	if err := c2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "an AdmittedWithoutWebhook Event on the policy", 30*time.Second, func() bool { return policyEvent(ctx, t, cp, "AdmittedWithoutWebhook") })
	if m := metricsOf(t, agg2); !strings.Contains(m, "cgpilot_aggregator_unadmitted_pods 1") {
		t.Error("cgpilot_aggregator_unadmitted_pods is not 1")
	}
}

func res(reqCPU, reqMem, limCPU, limMem string) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{}
	add := func(l *corev1.ResourceList, name corev1.ResourceName, v string) {
		if v == "" {
			return
		}
		if *l == nil {
			*l = corev1.ResourceList{}
		}
		(*l)[name] = resource.MustParse(v)
	}
	add(&r.Requests, corev1.ResourceCPU, reqCPU)
	add(&r.Requests, corev1.ResourceMemory, reqMem)
	add(&r.Limits, corev1.ResourceCPU, limCPU)
	add(&r.Limits, corev1.ResourceMemory, limMem)
	return r
}

// valid raises limits below their requests to the requests.
func valid(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	for name, req := range r.Requests {
		if lim, ok := r.Limits[name]; ok && lim.Cmp(req) < 0 {
			r.Limits[name] = req
		}
	}
	return r
}

func near(q *resource.Quantity, want float64) bool {
	got := q.AsApproximateFloat64()
	return got >= want && got <= want*1.001+0.001
}

// policyEvent reports whether an Event with reason is on the policy.
func policyEvent(ctx context.Context, t *testing.T, cp *harness.ControlPlane, reason string) bool {
	t.Helper()
	l, err := cp.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, e := range l.Items {
		if e.Reason == reason && e.Regarding.Kind == "RightsizePolicy" && e.Regarding.Name == "shop-auto" {
			t.Logf("Event %s on RightsizePolicy/%s: %s", e.Reason, e.Regarding.Name, e.Note)
			return true
		}
	}
	return false
}

// failOpenCount reads the API server's count of webhook calls that failed
// open.
func failOpenCount(ctx context.Context, t *testing.T, cp *harness.ControlPlane) float64 {
	t.Helper()
	raw, err := cp.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "apiserver_admission_webhook_fail_open_count{") && strings.Contains(l, `name="pods.aggregator.cgpilot.io"`) {
			var v float64
			fmt.Sscan(l[strings.LastIndex(l, " ")+1:], &v)
			sum += v
		}
	}
	return sum
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
