package agent

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

const uidIndex = "uid"

// newPodInformer watches only this node's pods (spec.nodeName field
// selector), indexed by UID for the cgroup watcher.
func newPodInformer(cs kubernetes.Interface, nodeName string, resync time.Duration) (informers.SharedInformerFactory, cache.SharedIndexInformer, error) {
	f := informers.NewSharedInformerFactoryWithOptions(cs, resync, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
	}))
	inf := f.Core().V1().Pods().Informer()
	err := inf.AddIndexers(cache.Indexers{uidIndex: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			return []string{string(p.UID)}, nil
		}
		return nil, nil
	}})
	return f, inf, err
}

// addHandlers turns informer events into workqueue keys: the single hand-off
// between the watch and the reconciler.
func (c *controller) addHandlers(inf cache.SharedIndexInformer) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueuePod(obj) },
		UpdateFunc: func(old, obj any) {
			o, _ := old.(*corev1.Pod)
			n, _ := obj.(*corev1.Pod)
			if o != nil && n != nil && o.ResourceVersion == n.ResourceVersion {
				return // periodic resync: the sweep covers it
			}
			c.enqueuePod(obj)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				c.rememberPod(p)
				c.enqueue(p.Namespace+"/"+p.Name, time.Now())
			}
		},
	})
	return err
}

func (c *controller) enqueuePod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	c.enqueue(p.Namespace+"/"+p.Name, time.Now())
}

// enqueue adds key and remembers when the first unprocessed change arrived,
// for the annotation-to-cgroup latency histogram.
func (c *controller) enqueue(key string, at time.Time) {
	c.mu.Lock()
	if _, pending := c.since[key]; !pending {
		c.since[key] = at
	}
	c.mu.Unlock()
	c.queue.Add(key)
}
