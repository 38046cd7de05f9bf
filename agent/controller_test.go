package agent

import (
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
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
	m := newMetrics()
	return &controller{
		cfg: cfg, lister: corelisters.NewPodLister(idx), indexer: idx, queue: q,
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
