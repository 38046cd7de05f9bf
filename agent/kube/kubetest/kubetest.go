// Package kubetest adapts a client-go clientset (typically the fake one)
// and a dynamic client to kube.Interface, for tests of the agent that need
// no API server. Only tests may import it: it links the clientset that
// package kube keeps out of the agent.
package kubetest

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/cgpilot/cgpilot/agent/kube"
)

// New is kube.Interface over cs and dyn.
func New(cs kubernetes.Interface, dyn dynamic.Interface) kube.Interface { return &adapter{cs, dyn} }

type adapter struct {
	cs  kubernetes.Interface
	dyn dynamic.Interface
}

func (a *adapter) Pods(node string) cache.ListerWatcher {
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	return noWatchList(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return a.cs.CoreV1().Pods("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return a.cs.CoreV1().Pods("").Watch(ctx, o)
		},
	})
}

// noWatchList: client-go's fakes serve no streaming lists (watch with
// initial events), so the reflectors list and then watch.
func noWatchList(lw *cache.ListWatch) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(lw, unsupported{})
}

type unsupported struct{}

func (unsupported) IsWatchListSemanticsUnSupported() bool { return true }

func (a *adapter) PatchPod(ctx context.Context, ns, name string, pt types.PatchType, data []byte, fm string, sub ...string) error {
	_, err := a.cs.CoreV1().Pods(ns).Patch(ctx, name, pt, data, metav1.PatchOptions{FieldManager: fm}, sub...)
	return err
}

func (a *adapter) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, fm string) error {
	_, err := a.cs.CoreV1().Nodes().Patch(ctx, name, pt, data, metav1.PatchOptions{FieldManager: fm})
	return err
}

func (a *adapter) Events(ctx context.Context) record.EventSink {
	return eventSink{ctx, a.cs}
}

// eventSink writes Events with a context, as kube.Client's does.
type eventSink struct {
	ctx context.Context
	cs  kubernetes.Interface
}

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.cs.CoreV1().Events(e.Namespace).Create(s.ctx, e, metav1.CreateOptions{})
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.cs.CoreV1().Events(e.Namespace).Update(s.ctx, e, metav1.UpdateOptions{})
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.cs.CoreV1().Events(e.Namespace).Patch(s.ctx, e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}

func (a *adapter) OwnerReferences(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) ([]metav1.OwnerReference, error) {
	switch gvr.Resource {
	case "replicasets":
		o, err := a.cs.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return o.OwnerReferences, nil
	default:
		o, err := a.cs.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return o.OwnerReferences, nil
	}
}

// Namespaces converts namespaces to their metadata, as the metadata client
// serves them.
func (a *adapter) Namespaces() cache.ListerWatcher {
	meta := func(ns *corev1.Namespace) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: ns.ObjectMeta}
	}
	return noWatchList(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := a.cs.CoreV1().Namespaces().List(ctx, o)
			if err != nil {
				return nil, err
			}
			out := &metav1.PartialObjectMetadataList{ListMeta: l.ListMeta}
			for i := range l.Items {
				out.Items = append(out.Items, *meta(&l.Items[i]))
			}
			return out, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := a.cs.CoreV1().Namespaces().Watch(ctx, o)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				if ns, ok := e.Object.(*corev1.Namespace); ok {
					e.Object = meta(ns)
				}
				return e, true
			}), nil
		},
	})
}

func (a *adapter) Resources(_ context.Context, gv string) ([]metav1.APIResource, error) {
	l, err := a.cs.Discovery().ServerResourcesForGroupVersion(gv)
	if err != nil {
		return nil, err
	}
	return l.APIResources, nil
}

func (a *adapter) Dynamic() dynamic.Interface { return a.dyn }

func (a *adapter) Node(ctx context.Context, name string) (*corev1.Node, error) {
	return a.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (a *adapter) LimitRanges() cache.ListerWatcher {
	return noWatchList(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return a.cs.CoreV1().LimitRanges("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return a.cs.CoreV1().LimitRanges("").Watch(ctx, o)
		},
	})
}
