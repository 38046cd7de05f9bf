//go:build linux

package e2e

import (
	"context"
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

// TestAdmissionClampOnAPIServer: a node's forged report says Deployment
// web (whose pod runs on that node) uses 1,800 cores and 1.7 TB, and
// names a policy without bounds (issue 19: one report from a compromised
// node moved the merged recommendation so; the aggregator took the policy
// from the report, so its merge knew no maxAllowed). Now the aggregator
// resolves the policy itself, so tight's merge stays within its policy's
// maxAllowed; open's, under a policy without bounds, does not. New pods of web
// created through the webhook on a real API server, LimitRanger included,
// are admitted with values within every bound: in namespace tight, the
// policy's maxAllowed (1 core, 2Gi) and the LimitRange (container max 2
// cores and 4Gi, limit at most twice the request); in namespace open, with
// no bound but the cluster, the largest node's allocatable (4 cores, 8Gi;
// a pod with requests only, which stays Burstable: where the bounds make
// every limit equal its request, the QoS guard admits the pod unchanged).
// What the webhook's clamp moved is said on the pod and in an Event. Before, the webhook wrote the forged
// values: the LimitRanger refused the pod in tight, and in open the pod
// asked for more than any node has.
func TestAdmissionClampOnAPIServer(t *testing.T) {
	bins := tier.E2E(t)
	dir := t.TempDir()
	// The webhook answers only the API server's client certificate.
	callers, admission := webhookCallers(t, dir)
	cp := harness.MustStart(t, bins, harness.Options{ExtraFlags: map[string][]string{"kube-apiserver": {admission}}})
	cs := cp.Client
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	applyCRDs(ctx, t, cp)
	for _, ns := range []string{"tight", "open"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	q := resource.MustParse
	if _, err := cs.CoreV1().LimitRanges("tight").Create(ctx, &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "bounds"},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer,
			Max: corev1.ResourceList{"cpu": q("2"), "memory": q("4Gi")}, MaxLimitRequestRatio: corev1.ResourceList{"cpu": q("2"), "memory": q("2")}}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The cluster's nodes: the largest has 4 cores and 8Gi allocatable.
	for name, alloc := range map[string][2]string{"small": {"2", "4Gi"}, "large": {"4", "8Gi"}} {
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Capacity = corev1.ResourceList{"cpu": q(alloc[0]), "memory": q(alloc[1]), "pods": q("110")}
		n.Status.Allocatable = n.Status.Capacity
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dc, _ := dynamic.NewForConfig(cp.Config)
	one, twoGi := q("1"), q("2Gi")
	for name, spec := range map[string]v1alpha1.RightsizePolicySpec{
		"tight-auto": {Mode: v1alpha1.ModeAuto, MinHistory: &metav1.Duration{Duration: time.Hour},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "tight"}},
			CPU:               &v1alpha1.ResourcePolicy{MaxAllowed: &one}, Memory: &v1alpha1.ResourcePolicy{MaxAllowed: &twoGi}},
		"open-auto": {Mode: v1alpha1.ModeAuto, MinHistory: &metav1.Duration{Duration: time.Hour},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "open"}}},
	} {
		p := &v1alpha1.RightsizePolicy{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "RightsizePolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
		u, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
		if _, err := dc.Resource(kube.RightsizePolicies).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	fleet := aggtest.NewFleet(aggtest.FleetConfig{Nodes: 1, PodsPerNode: 4, Seed: 7})
	// The compromised node's own pods: the aggregator believes a node only
	// for the workloads of pods bound to it (issue 19, item 4), and a node
	// can still lie about those.
	seedOwner := true
	for _, ns := range []string{"tight", "open"} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-7d9f5-seed", Namespace: ns,
			Labels:          map[string]string{"pod-template-hash": "7d9f5"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f5", UID: "00000000-0000-0000-0000-000000000002", Controller: &seedOwner}}},
			Spec: corev1.PodSpec{NodeName: fleet.NodeName(0), AutomountServiceAccountToken: new(bool),
				Containers: []corev1.Container{{Name: "app", Image: "docker.io/local/busybox:1"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	certs, err := aggtest.Certs(dir)
	if err != nil {
		t.Fatal(err)
	}
	tokens := tokenFiles(t, dir, fleet, 1)
	agg := aggtest.Start(t, aggregator.Config{RESTConfig: cp.Config, Namespace: "default", Identity: "clamp", CertFile: certs.CertFile, KeyFile: certs.KeyFile,
		StaticTokens: tokens, FoldInterval: 200 * time.Millisecond, EventInterval: time.Second, Step: time.Nanosecond, WebhookClientCAFile: callers.CAFile})
	aggtest.Wait(t, "leading", time.Minute, agg.IsLeader)

	// The forged report: 70 minutes of web using 1,800 cores and 1.7 TB,
	// under the unbounded policy's name in both namespaces (the
	// aggregator resolves the policy itself and ignores that name).
	keys := map[string]report.Key{}
	for _, ns := range []string{"tight", "open"} {
		keys[ns] = report.Key{Workload: report.Workload{Namespace: ns, Kind: report.KindDeployment, Name: "web"}, Container: "app"}
	}
	c := clientsFor(t, dir, fleet, 1, agg.URL(), certs)[0]
	for _, end := range pastWindows(70) {
		b, _ := report.NewBuilder(report.BuilderConfig{Node: fleet.NodeName(0)})
		for _, k := range keys {
			b.Describe(k, report.ContainerInfo{Policy: "open-auto", Mode: "Auto", Adjustable: true})
			for s := range 6 {
				b.Sample(k, "web-7d9f5-seed", end.Add(-time.Minute+time.Duration(s)*10*time.Second), 1800, 1.7e12)
			}
		}
		c.Enqueue(b.Cut(end)[0])
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	aggtest.Wait(t, "the forged recommendations", time.Minute, func() bool {
		return agg.Store.Recommendation(keys["tight"]) != nil && agg.Store.Recommendation(keys["open"]) != nil
	})
	// Where the aggregator resolves the policy itself (issue 19, item 4),
	// tight's merge is bounded before the webhook sees it; open's cannot be.
	forged, forgedOpen := agg.Store.Recommendation(keys["tight"]).Recommendation, agg.Store.Recommendation(keys["open"]).Recommendation
	t.Logf("merged recommendations: tight %.0f cores, %.0f GiB; open %.0f cores, %.0f GiB", forged.CPU.Target, forged.Memory.Target/(1<<30),
		forgedOpen.CPU.Target, forgedOpen.Memory.Target/(1<<30))
	if forgedOpen.CPU.Target < 100 {
		t.Fatalf("the forged report did not move open's recommendation (%.1f cores): nothing to clamp", forgedOpen.CPU.Target)
	}
	if forged.CPU.Target > 1 || forged.Memory.Target > 2<<30 {
		t.Errorf("tight's merge %.1f cores, %.0f bytes: not within its policy's maxAllowed (1, 2Gi)", forged.CPU.Target, forged.Memory.Target)
	}

	fail := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	timeout := int32(2)
	url := agg.URL() + webhook.PathMutate
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "cgpilot-aggregator"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "pods.aggregator.cgpilot.io", AdmissionReviewVersions: []string{"v1"},
			SideEffects: &none, FailurePolicy: &fail, TimeoutSeconds: &timeout,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: certs.CAPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
		}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	yes := true
	create := func(ns string, r corev1.ResourceRequirements) (*corev1.Pod, error) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "web-7d9f5-", Namespace: ns, Labels: map[string]string{"pod-template-hash": "7d9f5"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f5", UID: "00000000-0000-0000-0000-000000000002", Controller: &yes}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "docker.io/local/busybox:1", Resources: r}}}}
		return cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	}
	var tight *corev1.Pod
	waitFor(t, "the webhook in effect", 30*time.Second, func() bool {
		p, err := create("tight", res("500m", "512Mi", "1", "1Gi"))
		if err != nil {
			t.Fatalf("the API server refused the pod the webhook admitted: %v", err)
		}
		tight = p
		return p.Annotations[v1alpha1.AnnotationAdmission] != ""
	})
	r := tight.Spec.Containers[0].Resources
	t.Logf("tight: requests %v limits %v; %s", r.Requests, r.Limits, tight.Annotations[webhook.AnnotationClamped])
	if tight.Annotations[v1alpha1.AnnotationAdmission] != "applied" || r.Requests.Cpu().Cmp(q("1")) != 0 || r.Requests.Memory().Cmp(q("2Gi")) != 0 ||
		r.Limits.Cpu().Cmp(q("2")) != 0 || r.Limits.Memory().Cmp(q("4Gi")) != 0 {
		t.Errorf("tight: %q, requests %v limits %v; want requests at the policy's max (1, 2Gi), limits twice that within the LimitRange (2, 4Gi)",
			tight.Annotations[v1alpha1.AnnotationAdmission], r.Requests, r.Limits)
	}
	if a := tight.Annotations[webhook.AnnotationClamped]; forged.CPU.Target > 1 && !strings.Contains(a, "PolicyMaxAllowed") {
		t.Errorf("tight: %s %q", webhook.AnnotationClamped, a)
	}
	open, err := create("open", res("500m", "512Mi", "", ""))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	r = open.Spec.Containers[0].Resources
	t.Logf("open: requests %v limits %v; %s", r.Requests, r.Limits, open.Annotations[webhook.AnnotationClamped])
	if open.Annotations[v1alpha1.AnnotationAdmission] != "applied" || r.Requests.Cpu().Cmp(q("4")) != 0 || r.Requests.Memory().Cmp(q("8Gi")) != 0 ||
		len(r.Limits) != 0 || open.Status.QOSClass != corev1.PodQOSBurstable {
		t.Errorf("open: %q, requests %v limits %v, %s; want requests at the largest node's allocatable (4, 8Gi), no limits", open.Annotations[v1alpha1.AnnotationAdmission],
			r.Requests, r.Limits, open.Status.QOSClass)
	}
	if a := open.Annotations[webhook.AnnotationClamped]; !strings.Contains(a, "NodeAllocatable") {
		t.Errorf("open: %s %q", webhook.AnnotationClamped, a)
	}
	// Only what the webhook moved is reported: open's pod (tight's merge
	// was already within its policy).
	waitFor(t, "a RecommendationClamped Event on open-auto", 30*time.Second, func() bool {
		l, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		on := map[string]bool{}
		for _, e := range l.Items {
			if e.Reason == "RecommendationClamped" && e.Regarding.Kind == "RightsizePolicy" {
				on[e.Regarding.Name] = true
			}
		}
		return on["open-auto"]
	})
}
