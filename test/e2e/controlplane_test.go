//go:build linux

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

func testPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			AutomountServiceAccountToken:  new(bool),
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "c", Image: "docker.io/local/busybox:1", ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "3600"},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
				ResizePolicy: []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired}},
			}},
		},
	}
}

// resizeCPU is the strategic-merge patch the agent will send to
// pods/resize: a merge patch would replace the whole container list.
func resizeCPU(container, req, lim string) []byte {
	return fmt.Appendf(nil, `{"spec":{"containers":[{"name":%q,"resources":{"requests":{"cpu":%q},"limits":{"cpu":%q}}}]}}`, container, req, lim)
}

// podEvents records what a node-scoped informer delivers.
type podEvents struct {
	mu      sync.Mutex
	added   map[string]int
	updated map[string]int
}

func (e *podEvents) count(m map[string]int, obj any) {
	if p, ok := obj.(*corev1.Pod); ok {
		e.mu.Lock()
		m[p.Name]++
		e.mu.Unlock()
	}
}

func (e *podEvents) snapshot() (added, updated map[string]int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	a, u := map[string]int{}, map[string]int{}
	for k, v := range e.added {
		a[k] = v
	}
	for k, v := range e.updated {
		u[k] = v
	}
	return a, u
}

func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestControlPlaneNodeScopedInformerAndResize is the agent's API contract
// against a real kube-apiserver: a spec.nodeName field-selected informer
// sees exactly its node's pods, annotation patches arrive as updates, and
// pods/resize changes a running pod's resources.
func TestControlPlaneNodeScopedInformerAndResize(t *testing.T) {
	bins := tier.E2E(t)
	cp := harness.MustStart(t, bins, harness.Options{})
	cs := cp.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server %s", v.GitVersion)

	const node = "node-a"
	ev := &podEvents{added: map[string]int{}, updated: map[string]int{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { ev.count(ev.added, o) },
		UpdateFunc: func(_, o any) { ev.count(ev.updated, o) },
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}

	for _, n := range []string{node, "node-b"} {
		if _, err := cp.CreateFakeNode(ctx, harness.FakeNode{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	mine := []string{"a0", "a1", "a2"}
	for _, name := range mine {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, testPod(name, node), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", name, err)
		}
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, testPod("b0", "node-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "3 adds", 20*time.Second, func() bool { a, _ := ev.snapshot(); return len(a) >= 3 })

	if _, err := cs.CoreV1().Pods("default").Patch(ctx, "a0", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"cgpilot.io/applied":"cpu=150m"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate: %v", err)
	}
	resized, err := cs.CoreV1().Pods("default").Patch(ctx, "a1", types.StrategicMergePatchType, resizeCPU("c", "150m", "300m"), metav1.PatchOptions{}, "resize")
	if err != nil {
		t.Fatalf("pods/resize: %v", err)
	}
	res := resized.Spec.Containers[0].Resources
	if res.Requests.Cpu().MilliValue() != 150 || res.Limits.Cpu().MilliValue() != 300 || res.Limits.Memory().Value() != 64<<20 {
		t.Fatalf("after resize: requests %v limits %v, want cpu 150m/300m and memory limit unchanged", res.Requests, res.Limits)
	}
	// Resources change only through the subresource.
	plain := resized.DeepCopy()
	plain.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("400m")
	if _, err := cs.CoreV1().Pods("default").Update(ctx, plain, metav1.UpdateOptions{}); err == nil {
		t.Error("a plain Update changed container resources; want it rejected")
	}

	waitFor(t, "annotation and resize updates", 20*time.Second, func() bool {
		_, u := ev.snapshot()
		return u["a0"] >= 1 && u["a1"] >= 1
	})
	var inCache []string
	for _, o := range inf.GetStore().List() {
		p := o.(*corev1.Pod)
		inCache = append(inCache, p.Name)
		if p.Name == "a0" && p.Annotations["cgpilot.io/applied"] != "cpu=150m" {
			t.Errorf("cached a0 annotations = %v", p.Annotations)
		}
		if p.Name == "a1" && p.Spec.Containers[0].Resources.Limits.Cpu().MilliValue() != 300 {
			t.Errorf("cached a1 cpu limit = %v, want 300m", p.Spec.Containers[0].Resources.Limits.Cpu())
		}
	}
	added, updated := ev.snapshot()
	if len(inCache) != 3 || len(added) != 3 {
		t.Fatalf("informer cache %v, adds %v: want exactly %v", inCache, added, mine)
	}
	for _, name := range mine {
		if added[name] != 1 {
			t.Errorf("pod %s added %d times, want 1", name, added[name])
		}
	}
	if added["b0"] != 0 || updated["b0"] != 0 {
		t.Errorf("pod b0 on node-b reached the node-a informer")
	}
	if updated["a2"] != 0 {
		t.Errorf("untouched pod a2 got %d updates", updated["a2"])
	}
}

// TestControllersRunWorkloads proves kube-controller-manager and
// kube-scheduler work: the ServiceAccount controller makes the default
// ServiceAccount, a Deployment gets a ReplicaSet and pods, and the
// scheduler binds them to the only schedulable (fake, kubelet-less) node.
func TestControllersRunWorkloads(t *testing.T) {
	bins := tier.E2E(t)
	cp := harness.MustStart(t, bins, harness.Options{Controllers: true})
	cs := cp.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if _, err := cp.CreateFakeNode(ctx, harness.FakeNode{Name: "sched-node"}); err != nil {
		t.Fatal(err)
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "workloads"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "default ServiceAccount in the new namespace", 60*time.Second, func() bool {
		_, err := cs.CoreV1().ServiceAccounts("workloads").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})

	replicas := int32(2)
	labels := map[string]string{"app": "web"}
	tmpl := testPod("", "").Spec
	tmpl.NodeName, tmpl.AutomountServiceAccountToken = "", nil // scheduler and SA admission decide
	dep := &appsDeployment{name: "web", ns: "workloads", replicas: replicas, labels: labels, spec: tmpl}
	if err := dep.create(ctx, cs); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	waitFor(t, "2 scheduled pods of the Deployment", 90*time.Second, func() bool {
		l, err := cs.CoreV1().Pods("workloads").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false
		}
		pods = l.Items
		n := 0
		for _, p := range pods {
			if p.Spec.NodeName == "sched-node" {
				n++
			}
		}
		return n == 2
	})
	rs, err := cs.AppsV1().ReplicaSets("workloads").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(rs.Items) != 1 {
		t.Fatalf("ReplicaSets of the Deployment: %v (err %v), want 1", len(rs.Items), err)
	}
	for _, p := range pods {
		if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Name != rs.Items[0].Name {
			t.Errorf("pod %s owners %v, want ReplicaSet %s", p.Name, p.OwnerReferences, rs.Items[0].Name)
		}
		if p.Spec.ServiceAccountName != "default" || !hasProjectedToken(p) {
			t.Errorf("pod %s: serviceAccount %q, projected token volume %v: ServiceAccount admission did not run", p.Name, p.Spec.ServiceAccountName, hasProjectedToken(p))
		}
	}
	// A token for the ServiceAccount can be issued (signing key wired).
	tr, err := cs.CoreV1().ServiceAccounts("workloads").CreateToken(ctx, "default", &authnTokenRequest, metav1.CreateOptions{})
	if err != nil || tr.Status.Token == "" {
		t.Fatalf("TokenRequest for workloads/default: %v", err)
	}
}

func hasProjectedToken(p corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.ServiceAccountToken != nil {
					return true
				}
			}
		}
	}
	return false
}
