package agent

import (
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/cpuset"
)

// newTestController builds a controller around a plain indexer (no API
// server): enough for the watcher and the local API views.
func newTestController(t *testing.T, cfg Config) *controller {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{uidIndex: func(obj any) ([]string, error) {
		return []string{string(obj.(*corev1.Pod).UID)}, nil
	}})
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	t.Cleanup(q.ShutDown)
	sq := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	t.Cleanup(sq.ShutDown)
	m := newMetrics()
	return &controller{
		cfg: cfg, lister: corelisters.NewPodLister(idx), indexer: idx, queue: q, statusQ: sq, pending: map[string]pendingStatus{},
		events: newEventLog(nil, "node", m), metrics: m, log: testr.New(t),
		since: map[string]time.Time{}, late: map[string]time.Time{}, known: map[string]*knownPod{},
		kubelet: kubeletStatic{Taken: cpuset.New(), Pods: map[string]bool{}},
	}
}

func addIndexedPod(t *testing.T, c *controller, ns, name, uid string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
	if err := c.indexer.Add(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func podWithCPU(ns, name, uid, limit string, ann map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Annotations: ann}}
	c := corev1.Container{Name: "c"}
	if limit != "" {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limit)}
	}
	p.Spec.Containers = []corev1.Container{c}
	return p
}

func TestSellableRule(t *testing.T) {
	cfg := DefaultConfig()
	cfg.OvercommitRatio = 2
	c := newTestController(t, cfg)
	for _, p := range []*corev1.Pod{
		podWithCPU("a", "web", "u1", "1500m", nil), // 2 CPUs once rounded up
		podWithCPU("a", "api", "u2", "1", nil),
		podWithCPU("a", "db", "u3", "4", map[string]string{AnnotationCPUPool: "exclusive"}), // not sold to shared
		podWithCPU("kube-system", "dns", "u4", "8", nil),                                    // not managed
	} {
		if err := c.indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	// a = 16 − 2×2 = 12; b = (16 − 3) / 2 = 6.
	if got := c.sellable(16); got != 6 {
		t.Fatalf("sellable(16) = %d, want 6", got)
	}
	// a = 6 − 4 = 2; b = (6 − 3) / 2 = 1.
	if got := c.sellable(6); got != 1 {
		t.Fatalf("sellable(6) = %d, want 1", got)
	}
}

func TestCPUDemandAndQoS(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		demand int
		qos    QoSClass
	}{
		{"limit rounds up", podWithCPU("a", "p", "u", "1500m", nil), 2, QoSBurstable},
		{"no resources", podWithCPU("a", "p", "u", "", nil), 0, QoSBestEffort},
	} {
		if got := cpuDemand(tc.pod); got != tc.demand {
			t.Errorf("%s: demand %d, want %d", tc.name, got, tc.demand)
		}
		if got := qosClass(tc.pod); got != tc.qos {
			t.Errorf("%s: qos %s, want %s", tc.name, got, tc.qos)
		}
	}
	g := podWithCPU("a", "p", "u", "2", nil)
	r := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	g.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: r, Limits: r}
	g.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("1Gi")}, Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}
	if cpuDemand(g) != 3 || qosClass(g) != QoSGuaranteed {
		t.Errorf("guaranteed with larger init: demand %d qos %s", cpuDemand(g), qosClass(g))
	}
	g.Status.QOSClass = corev1.PodQOSBurstable // the kubelet's word wins
	if qosClass(g) != QoSBurstable {
		t.Error("status QoS class ignored")
	}
}
