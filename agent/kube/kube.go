package kube

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// Interface is what the agent asks of the API server. Client implements
// it against a real one; kubetest adapts a (fake) clientset.
type Interface interface {
	// Pods lists and watches the pods bound to node.
	Pods(node string) cache.ListerWatcher
	// PatchPod patches a pod, or its subresource ("resize", "status").
	PatchPod(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, fieldManager string, subresource ...string) error
	// PatchNode patches a Node.
	PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, fieldManager string) error
	// Events is where recorded Events go; every write is made with ctx,
	// so that cancelling it ends a write the API server has not answered.
	Events(ctx context.Context) record.EventSink
	// OwnerReferences are the owners of a namespaced object, read as
	// metadata only.
	OwnerReferences(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) ([]metav1.OwnerReference, error)
	// Namespaces lists and watches namespaces as metadata
	// (*metav1.PartialObjectMetadata).
	Namespaces() cache.ListerWatcher
	// Resources are the resources the API server serves in groupVersion
	// ("v1", "cgpilot.io/v1alpha1"); an error wrapping a NotFound status
	// when it serves none.
	Resources(ctx context.Context, groupVersion string) ([]metav1.APIResource, error)
	// Dynamic is the dynamic client (the RightsizePolicy CRD).
	Dynamic() dynamic.Interface
	// Node reads one Node (its allocatable bounds right-sizing).
	Node(ctx context.Context, name string) (*corev1.Node, error)
	// LimitRanges lists and watches every namespace's LimitRanges
	// (*corev1.LimitRange): their bounds apply to what right-sizing
	// writes straight to the cgroups, which the API server never sees.
	LimitRanges() cache.ListerWatcher
}

// Scheme knows core/v1 (and the meta types every group version has): all
// the agent decodes with types, and what its event recorder refers to.
var Scheme = runtime.NewScheme()

func init() {
	if err := corev1.AddToScheme(Scheme); err != nil {
		panic(err)
	}
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
}

var parameterCodec = runtime.NewParameterCodec(Scheme)

// Client is Interface against an API server.
type Client struct {
	core *rest.RESTClient // /api/v1, decoding with Scheme
	meta metadata.Interface
	dyn  dynamic.Interface
}

// New makes the agent's clients from one rest.Config.
func New(cfg *rest.Config) (*Client, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath = "/api"
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(Scheme).WithoutConversion()
	// Protobuf, as the kubelet speaks it: every pod event of the node is
	// decoded on the way to a cgroup write (see the package doc).
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	core, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("core/v1 client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return &Client{core: core, meta: meta, dyn: dyn}, nil
}

func (c *Client) Pods(node string) cache.ListerWatcher {
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			list := &corev1.PodList{}
			err := c.core.Get().Resource("pods").VersionedParams(&o, parameterCodec).Do(ctx).Into(list)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector, o.Watch = sel, true
			return c.core.Get().Resource("pods").VersionedParams(&o, parameterCodec).Watch(ctx)
		},
	}
}

func (c *Client) PatchPod(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, fieldManager string, subresource ...string) error {
	return c.core.Patch(pt).Namespace(namespace).Resource("pods").Name(name).SubResource(subresource...).
		VersionedParams(&metav1.PatchOptions{FieldManager: fieldManager}, parameterCodec).Body(data).Do(ctx).Error()
}

func (c *Client) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, fieldManager string) error {
	return c.core.Patch(pt).Resource("nodes").Name(name).
		VersionedParams(&metav1.PatchOptions{FieldManager: fieldManager}, parameterCodec).Body(data).Do(ctx).Error()
}

func (c *Client) Events(ctx context.Context) record.EventSink { return eventSink{ctx, c.core} }

func (c *Client) OwnerReferences(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) ([]metav1.OwnerReference, error) {
	m, err := c.meta.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return m.OwnerReferences, nil
}

var namespacesGVR = corev1.SchemeGroupVersion.WithResource("namespaces")

func (c *Client) Namespaces() cache.ListerWatcher {
	r := c.meta.Resource(namespacesGVR)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return r.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return r.Watch(ctx, o)
		},
	}
}

func (c *Client) Resources(ctx context.Context, groupVersion string) ([]metav1.APIResource, error) {
	path := "/apis/" + groupVersion
	if groupVersion == "v1" {
		path = "/api/v1"
	}
	// Discovery answers in JSON here: it is read raw, without the scheme.
	raw, err := c.core.Get().AbsPath(path).SetHeader("Accept", runtime.ContentTypeJSON).Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("discovery %s: %w", path, err)
	}
	if list.GroupVersion != groupVersion {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "discovery"}, groupVersion)
	}
	return list.APIResources, nil
}

func (c *Client) Dynamic() dynamic.Interface { return c.dyn }

func (c *Client) Node(ctx context.Context, name string) (*corev1.Node, error) {
	out := &corev1.Node{}
	err := c.core.Get().Resource("nodes").Name(name).Do(ctx).Into(out)
	return out, err
}

func (c *Client) LimitRanges() cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list := &corev1.LimitRangeList{}
			err := c.core.Get().Resource("limitranges").VersionedParams(&o, parameterCodec).Do(ctx).Into(list)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.Watch = true
			return c.core.Get().Resource("limitranges").VersionedParams(&o, parameterCodec).Watch(ctx)
		},
	}
}

// eventSink writes Events as the kubelet and controllers do (create,
// update, strategic-merge patch of a repeated one).
type eventSink struct {
	ctx  context.Context
	core *rest.RESTClient
}

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.core.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(s.ctx).Into(out)
	return out, err
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.core.Put().Namespace(e.Namespace).Resource("events").Name(e.Name).Body(e).Do(s.ctx).Into(out)
	return out, err
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.core.Patch(types.StrategicMergePatchType).Namespace(e.Namespace).Resource("events").Name(e.Name).Body(data).Do(s.ctx).Into(out)
	return out, err
}
