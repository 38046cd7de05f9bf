package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

const (
	nodeA, nodeB = "node-a", "node-b"
	workNS       = "work"
	podA, podB   = "a1", "b1" // workload pods on node-a and node-b
	agentPod     = "agent"    // stands in for the agent's DaemonSet pod on node-a
	nodeNameKey  = "authentication.kubernetes.io/node-name"
	// Either of the agent's policies (cgpilot-agent, -policy-status).
	policyDenied = "ValidatingAdmissionPolicy 'cgpilot-agent"
	policyName   = "web-policy" // a RightsizePolicy whose status the agents write
)

// privOp is one write the agent's identity may or may not make. value
// differs per phase, so that no attempt is a no-op of an earlier one.
type privOp struct {
	name    string
	refused bool
	// rbac: refused by RBAC already (so also without the policy).
	rbac bool
	do   func(ctx context.Context, cs kubernetes.Interface, value string) error
	// landed reports whether the object now shows this value.
	landed func(ctx context.Context, admin kubernetes.Interface, value string) (bool, error)
}

func mergePatch(ctx context.Context, cs kubernetes.Interface, node bool, ns, name, sub string, body string) error {
	var err error
	if node {
		_, err = cs.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{}, subs(sub)...)
	} else {
		_, err = cs.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{}, subs(sub)...)
	}
	return err
}

func subs(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func pod(ctx context.Context, admin kubernetes.Interface, name string) (*corev1.Pod, error) {
	return admin.CoreV1().Pods(workNS).Get(ctx, name, metav1.GetOptions{})
}

func node(ctx context.Context, admin kubernetes.Interface, name string) (*corev1.Node, error) {
	return admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// cpuFor turns a phase value into a distinct CPU request.
func cpuFor(v string) string {
	return map[string]string{"p1": "110m", "p2": "120m", "admin": "130m"}[v]
}

func annotate(key, v string) string {
	return fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, v)
}

// matchedFor turns a phase value into a distinct count.
func matchedFor(v string) int {
	return map[string]int{"p1": 11, "p2": 12, "admin": 13}[v]
}

// applyPolicyStatus writes node's entry of the policy's status.nodes by
// server-side apply as that node's agent does (its own field manager).
func applyPolicyStatus(ctx context.Context, cs kubernetes.Interface, node, v string) error {
	body := fmt.Sprintf(`{"apiVersion":"cgpilot.io/v1alpha1","kind":"RightsizePolicy","metadata":{"name":%q},`+
		`"status":{"nodes":[{"node":%q,"matchedPods":%d,"adjustedPods":0,"observedGeneration":1,"lastUpdateTime":"2026-11-23T12:00:00Z"}]}}`,
		policyName, node, matchedFor(v))
	return cs.CoreV1().RESTClient().Patch(types.ApplyPatchType).AbsPath("/apis/cgpilot.io/v1alpha1/rightsizepolicies", policyName, "status").
		Param("fieldManager", "cgpilot-agent/"+node).Param("force", "true").Body([]byte(body)).Do(ctx).Error()
}

// policyNodeEntry reads node's matchedPods of the policy's status.
func policyNodeEntry(ctx context.Context, admin kubernetes.Interface, node string) (int, error) {
	raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/apis/cgpilot.io/v1alpha1/rightsizepolicies", policyName).DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	var pol struct {
		Status struct {
			Nodes []struct {
				Node        string `json:"node"`
				MatchedPods int    `json:"matchedPods"`
			} `json:"nodes"`
		} `json:"status"`
	}
	if err := json.Unmarshal(raw, &pol); err != nil {
		return 0, err
	}
	for _, e := range pol.Status.Nodes {
		if e.Node == node {
			return e.MatchedPods, nil
		}
	}
	return -1, nil
}

func resizeBody(v string) string {
	return fmt.Sprintf(`{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":%q}}}]}}`, cpuFor(v))
}

var privOps = []privOp{
	{name: "cgpilot.io annotation on its node's pod",
		do: func(ctx context.Context, cs kubernetes.Interface, v string) error {
			return mergePatch(ctx, cs, false, workNS, podA, "", annotate("cgpilot.io/status", v))
		},
		landed: func(ctx context.Context, a kubernetes.Interface, v string) (bool, error) {
			p, err := pod(ctx, a, podA)
			return err == nil && p.Annotations["cgpilot.io/status"] == v, err
		}},
	{name: "pods/resize of its node's pod",
		do: func(ctx context.Context, cs kubernetes.Interface, v string) error {
			return mergePatch(ctx, cs, false, workNS, podA, "resize", resizeBody(v))
		},
		landed: func(ctx context.Context, a kubernetes.Interface, v string) (bool, error) {
			p, err := pod(ctx, a, podA)
			return err == nil && p.Spec.Containers[0].Resources.Requests.Cpu().String() == cpuFor(v), err
		}},
	{name: "cgpilot.io annotation on its Node",
		do: func(ctx context.Context, cs kubernetes.Interface, v string) error {
			return mergePatch(ctx, cs, true, "", nodeA, "", annotate("cgpilot.io/shared-pool", v))
		},
		landed: func(ctx context.Context, a kubernetes.Interface, v string) (bool, error) {
			n, err := node(ctx, a, nodeA)
			return err == nil && n.Annotations["cgpilot.io/shared-pool"] == v, err
		}},

	{name: "image patch of its node's pod", refused: true,
		do: func(ctx context.Context, cs kubernetes.Interface, v string) error {
			return mergePatch(ctx, cs, false, workNS, podA, "", fmt.Sprintf(`{"spec":{"containers":[{"name":"c","image":"evil:%s"}]}}`, v))
		},
		landed: func(ctx context.Context, a kubernetes.Interface, v string) (bool, error) {
			p, err := pod(ctx, a, podA)
			return err == nil && p.Spec.Containers[0].Image == "evil:"+v, err
		}},
	{name: "label patch of its node's pod", refused: true,
		do: func(ctx context.Context, cs kubernetes.Interface, v string) error {
			return mergePatch(ctx, cs, false, workNS, podA, "", fmt.Sprintf(`{"metadata":{"labels":{"evil":%q}}}`, v))
		},
		landed: func(ctx context.Context, a kubernetes.Interface, v string) (bool, error) {
			p, err := pod(ctx, a, podA)
			return err == nil && p.Labels["evil"] == v, err
		}},
	{name: "other annotation on its node's pod", refused: true,
		do: func(ctx context.Context, cs kubernetes.Interface, v string) error {
			return mergePatch(ctx, cs, false, workNS, podA, "", annotate("example.com/x", v))
		},
		landed: func(ctx context.Context, a kubernetes.Interface, v string) (bool, error) {
			p, err := pod(ctx, a, podA)
			return err == nil && p.Annotations["example.com/x"] == v, err
		}},
	{name: "cgpilot.io annotation on a pod of node-b", refused: true,
		do: func(ctx context.Context, cs kubernetes.Interface, v string) error {
			return mergePatch(ctx, cs, false, workNS, podB, "", annotate("cgpilot.io/status", v))
		},
		landed: func(ctx context.Context, a kubernetes.Interface, v string) (bool, error) {
			p, err := pod(ctx, a, podB)
			return err == nil && p.Annotations["cgpilot.io/status"] == v, err
		}},
	{name: "pods/resize of a pod of node-b", refused: true,
		do: func(ctx context.Context, cs kubernetes.Interface, v string) error {
			return mergePatch(ctx, cs, false, workNS, podB, "resize", resizeBody(v))
		},
		landed: func(ctx context.Context, a kubernetes.Interface, v string) (bool, error) {
			p, err := pod(ctx, a, podB)
			return err == nil && p.Spec.Containers[0].Resources.Requests.Cpu().String() == cpuFor(v), err
		}},
	{name: "cgpilot.io annotation on node-b", refused: true,
		do: func(ctx context.Context, cs kubernetes.Interface, v string) error {
			return mergePatch(ctx, cs, true, "", nodeB, "", annotate("cgpilot.io/shared-pool", v))
		},
		landed: func(ctx context.Context, a kubernetes.Interface, v string) (bool, error) {
			n, err := node(ctx, a, nodeB)
			return err == nil && n.Annotations["cgpilot.io/shared-pool"] == v, err
		}},
	{name: "taint on its Node", refused: true,
		do: func(ctx context.Context, cs kubernetes.Interface, v string) error {
			return mergePatch(ctx, cs, true, "", nodeA, "", fmt.Sprintf(`{"spec":{"taints":[{"key":"evil","value":%q,"effect":"NoSchedule"}]}}`, v))
		},
		landed: func(ctx context.Context, a kubernetes.Interface, v string) (bool, error) {
			n, err := node(ctx, a, nodeA)
			return err == nil && len(n.Spec.Taints) == 1 && n.Spec.Taints[0].Value == v, err
		}},
	{name: "label on its Node", refused: true,
		do: func(ctx context.Context, cs kubernetes.Interface, v string) error {
			return mergePatch(ctx, cs, true, "", nodeA, "", fmt.Sprintf(`{"metadata":{"labels":{"evil":%q}}}`, v))
		},
		landed: func(ctx context.Context, a kubernetes.Interface, v string) (bool, error) {
			n, err := node(ctx, a, nodeA)
			return err == nil && n.Labels["evil"] == v, err
		}},
	{name: "its own entry of a RightsizePolicy's status",
		do: func(ctx context.Context, cs kubernetes.Interface, v string) error {
			return applyPolicyStatus(ctx, cs, nodeA, v)
		},
		landed: func(ctx context.Context, a kubernetes.Interface, v string) (bool, error) {
			n, err := policyNodeEntry(ctx, a, nodeA)
			return err == nil && n == matchedFor(v), err
		}},
	// Issue 19: one node could overwrite every node's entries.
	{name: "node-b's entry of a RightsizePolicy's status", refused: true,
		do: func(ctx context.Context, cs kubernetes.Interface, v string) error {
			return applyPolicyStatus(ctx, cs, nodeB, v)
		},
		landed: func(ctx context.Context, a kubernetes.Interface, v string) (bool, error) {
			n, err := policyNodeEntry(ctx, a, nodeB)
			return err == nil && n == matchedFor(v), err
		}},
	{name: "status of its node's pod", refused: true, rbac: true,
		do: func(ctx context.Context, cs kubernetes.Interface, v string) error {
			return mergePatch(ctx, cs, false, workNS, podA, "status", fmt.Sprintf(`{"status":{"message":%q}}`, v))
		},
		landed: func(ctx context.Context, a kubernetes.Interface, v string) (bool, error) {
			p, err := pod(ctx, a, podA)
			return err == nil && p.Status.Message == v, err
		}},
}

// TestAgentIdentityConfinedToItsNode is issue 11's least-privilege proof
// on the real API server: with the RBAC and admission policies of the
// kustomize base, a service-account token bound to a pod on node-a (as the
// kubelet projects into the agent's pod) may write only its node's pods'
// cgpilot.io/* annotations, their pods/resize, node-a's cgpilot.io/*
// annotations and node-a's entry of a RightsizePolicy's status (issue
// 19). Each refusal is shown to be the policy's doing: the same write
// succeeds for the agent before the policy is installed, and for an admin
// after.
func TestAgentIdentityConfinedToItsNode(t *testing.T) {
	bins := tier.E2E(t)
	cp := harness.MustStart(t, bins, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := cp.Client

	var policy, base []*unstructured.Unstructured
	for _, o := range render(t) {
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			policy = append(policy, o)
		case "DaemonSet": // no node runs it here; its pod is played by agentPod
		default:
			base = append(base, o)
		}
	}
	if len(policy) != 4 {
		t.Fatalf("the base renders %d admission policy objects, want the two policies and their bindings", len(policy))
	}
	if err := Apply(ctx, cp.Config, base, ApplyOptions{FieldManager: "cgpilot-test"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{nodeA, nodeB} {
		createNode(ctx, t, admin, n)
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(ctx, t, admin, workNS, podA, nodeA, "")
	createPod(ctx, t, admin, workNS, podB, nodeB, "")
	// A policy whose status node-b's agent wrote.
	if err := admin.CoreV1().RESTClient().Post().AbsPath("/apis/cgpilot.io/v1alpha1/rightsizepolicies").
		Body([]byte(`{"apiVersion":"cgpilot.io/v1alpha1","kind":"RightsizePolicy","metadata":{"name":"` + policyName + `"},"spec":{"mode":"DryRun"}}`)).
		Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	if err := applyPolicyStatus(ctx, admin, nodeB, "p1"); err != nil {
		t.Fatal(err)
	}
	ap := createPod(ctx, t, admin, Namespace, agentPod, nodeA, "cgpilot-agent")

	// The token the kubelet would project into the agent's pod: bound to it.
	tr, err := admin.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, "cgpilot-agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: ap.Name, UID: ap.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest bound to pod %s: %v", agentPod, err)
	}
	agent := clientFor(t, cp.Config, tr.Status.Token)
	who, err := agent.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ui := who.Status.UserInfo
	t.Logf("the agent's token: user %s, extra %v", ui.Username, ui.Extra)
	if got := ui.Extra[nodeNameKey]; len(got) != 1 || got[0] != nodeA {
		t.Fatalf("user info extra %s = %v, want [%s]: the API server does not put the bound pod's node in the token (feature gate ServiceAccountTokenPodNodeInfo?)", nodeNameKey, got, nodeA)
	}

	// Phase 1, RBAC only: every write the policy will refuse is allowed, so
	// RBAC alone does not stop it.
	for _, op := range privOps {
		err := op.do(ctx, agent, "p1")
		switch {
		case op.rbac && !apierrors.IsForbidden(err):
			t.Errorf("without the policy, %s: %v, want refused by RBAC", op.name, err)
		case !op.rbac && err != nil:
			t.Errorf("without the policy, %s: %v, want allowed by RBAC", op.name, err)
		}
	}

	if err := Apply(ctx, cp.Config, policy, ApplyOptions{FieldManager: "cgpilot-test"}); err != nil {
		t.Fatal(err)
	}
	// The policies take effect once the API server's policy informer has
	// them.
	for _, name := range []string{"label patch of its node's pod", "node-b's entry of a RightsizePolicy's status"} {
		probe := opNamed(t, name)
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; ; i++ {
			err := probe.do(ctx, agent, fmt.Sprintf("probe%d", i))
			if err != nil && strings.Contains(err.Error(), policyDenied) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the admission policy was not enforced within 30 s: %s: %v", probe.name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// Phase 2, with the policy.
	for _, op := range privOps {
		err := op.do(ctx, agent, "p2")
		landed, lerr := op.landed(ctx, admin, "p2")
		if lerr != nil {
			t.Fatalf("%s: read back: %v", op.name, lerr)
		}
		switch {
		case !op.refused && (err != nil || !landed):
			t.Errorf("%s: %v (landed %v), want allowed", op.name, err, landed)
		case op.refused && landed:
			t.Errorf("%s: landed, want refused (err %v)", op.name, err)
		case op.refused && !apierrors.IsForbidden(err):
			t.Errorf("%s: %v, want Forbidden", op.name, err)
		case op.refused && !op.rbac && !strings.Contains(err.Error(), policyDenied):
			t.Errorf("%s: %v, want refused by the admission policy", op.name, err)
		default:
			t.Logf("%s: %v", op.name, map[bool]string{true: "refused: " + fmt.Sprint(err), false: "allowed"}[op.refused])
		}
	}

	// A resize that also carries a label and an image changes only the
	// resources: the API server keeps nothing else of a resize.
	if err := mergePatch(ctx, agent, false, workNS, podA, "resize",
		`{"metadata":{"labels":{"sneaky":"1"}},"spec":{"containers":[{"name":"c","image":"evil:resize","resources":{"requests":{"cpu":"140m"}}}]}}`); err != nil {
		t.Errorf("resize with extra fields: %v", err)
	}
	if p, err := pod(ctx, admin, podA); err != nil || p.Labels["sneaky"] != "" || p.Spec.Containers[0].Image == "evil:resize" ||
		p.Spec.Containers[0].Resources.Requests.Cpu().String() != "140m" {
		t.Errorf("after a resize carrying a label and an image: labels %v image %s cpu %v (%v): want only the cpu changed",
			p.Labels, p.Spec.Containers[0].Image, p.Spec.Containers[0].Resources.Requests.Cpu(), err)
	}

	// Phase 3: the admin makes every refused write: the policy confines the
	// agent, not the writes.
	for _, op := range privOps {
		if !op.refused {
			continue
		}
		if err := op.do(ctx, admin, "admin"); err != nil {
			t.Errorf("admin %s: %v, want allowed", op.name, err)
		} else if landed, _ := op.landed(ctx, admin, "admin"); !landed {
			t.Errorf("admin %s: accepted but not landed", op.name)
		}
	}

	// A token of the same account bound to no pod carries no node: refused
	// even what the bound token may do.
	plain, err := admin.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, "cgpilot-agent", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allowed := opNamed(t, "cgpilot.io annotation on its node's pod")
	err = allowed.do(ctx, clientFor(t, cp.Config, plain.Status.Token), "unbound")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), nodeNameKey) {
		t.Errorf("unbound token, %s: %v, want refused for lack of %s", allowed.name, err, nodeNameKey)
	}
}

func opNamed(t *testing.T, name string) privOp {
	t.Helper()
	for _, op := range privOps {
		if op.name == name {
			return op
		}
	}
	t.Fatalf("no operation %q", name)
	return privOp{}
}

func clientFor(t *testing.T, admin *rest.Config, token string) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// createNode registers a kubelet-less Node with allocatable CPU and memory:
// pods/resize checks a resize against it.
func createNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
	n.Status = corev1.NodeStatus{Capacity: capacity, Allocatable: capacity,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Fake", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name, nodeName, sa string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:                     nodeName,
			ServiceAccountName:           sa,
			AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{
				Name: "c", Image: "docker.io/local/busybox:1",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
			}},
		},
	}
	p, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	return p
}
