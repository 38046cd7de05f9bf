package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// ApplyOptions configure Apply.
type ApplyOptions struct {
	// FieldManager names the applier (server-side apply); default "cgpilot".
	FieldManager string
	// DryRun asks the API server to validate and admit every object
	// without storing it (kubectl apply --server-side --dry-run=server).
	DryRun bool
	// CRDTimeout bounds the wait for an applied CRD to be established
	// (default 60 s; not used with DryRun).
	CRDTimeout time.Duration
}

// Apply server-side-applies objs in order, as kubectl apply --server-side
// does, taking over fields from other managers. An applied
// CustomResourceDefinition is waited for until it is established, so later
// objects may be of its kind.
func Apply(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured, o ApplyOptions) error {
	if o.FieldManager == "" {
		o.FieldManager = "cgpilot"
	}
	if o.CRDTimeout == 0 {
		o.CRDTimeout = 60 * time.Second
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRender, err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRender, err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	force := true
	opts := metav1.PatchOptions{FieldManager: o.FieldManager, Force: &force}
	if o.DryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			mapper.Reset() // a CRD applied since the last discovery
			m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrRender, Key(obj), err)
		}
		body, err := json.Marshal(obj.Object)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrRender, Key(obj), err)
		}
		var ri dynamic.ResourceInterface = dc.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dc.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, opts); err != nil {
			return fmt.Errorf("%w: apply %s: %v", ErrRender, Key(obj), err)
		}
		if gvk.Kind == "CustomResourceDefinition" && !o.DryRun {
			if err := waitEstablished(ctx, dc.Resource(m.Resource), obj.GetName(), o.CRDTimeout); err != nil {
				return err
			}
			mapper.Reset()
		}
	}
	return nil
}

func waitEstablished(ctx context.Context, ri dynamic.ResourceInterface, name string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "not read"
	for {
		u, err := ri.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			last = fmt.Sprint(conds)
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: CRD %s not established within %v: %s", ErrRender, name, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
