package kube

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// Cluster is what the rescheduler reads of the API server: a pod, the
// PodDisruptionBudgets that cover it, a controller's newest placed pod,
// and the node names (from a metadata-only informer: names and labels,
// not whole Nodes).
type Cluster struct {
	Client kubernetes.Interface
	nodes  cache.SharedIndexInformer
}

// NewCluster returns a Cluster; Start runs its node informer.
func NewCluster(cs kubernetes.Interface, md metadata.Interface) *Cluster {
	f := metadatainformer.NewSharedInformerFactory(md, 10*time.Minute)
	return &Cluster{Client: cs, nodes: f.ForResource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}).Informer()}
}

// Start runs the node informer until ctx ends and waits for its first list.
func (c *Cluster) Start(ctx context.Context) error {
	go c.nodes.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.nodes.HasSynced) {
		return fmt.Errorf("kube: the node informer did not sync: %w", ctx.Err())
	}
	return nil
}

// Pod returns the pod, nil when it does not exist.
func (c *Cluster) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return p, err
}

// BlockingPDB names a PodDisruptionBudget of the pod's namespace that
// selects it and allows no disruption now ("" when none).
func (c *Cluster) BlockingPDB(ctx context.Context, pod *corev1.Pod) (string, error) {
	l, err := c.Client.PolicyV1().PodDisruptionBudgets(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	for _, pdb := range l.Items {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		if pdb.Status.DisruptionsAllowed <= 0 {
			return pdb.Name, nil
		}
	}
	return "", nil
}

// Replacement returns the node of the earliest pod with the given
// controller created after after and already placed ("" when none yet).
// Pods are listed by the evicted pod's labels, which its replacements
// share.
func (c *Cluster) Replacement(ctx context.Context, namespace string, owner types.UID, selector map[string]string, after time.Time) (string, error) {
	if owner == "" {
		return "", nil
	}
	l, err := c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(selector).String()})
	if err != nil {
		return "", err
	}
	var best *corev1.Pod
	for i := range l.Items {
		p := &l.Items[i]
		ctrl := metav1.GetControllerOf(p)
		if ctrl == nil || ctrl.UID != owner || p.Spec.NodeName == "" || p.CreationTimestamp.Time.Before(after) {
			continue
		}
		if best == nil || p.CreationTimestamp.Before(&best.CreationTimestamp) {
			best = p
		}
	}
	if best == nil {
		return "", nil
	}
	return best.Spec.NodeName, nil
}

// NodeNames lists the nodes the informer holds, sorted.
func (c *Cluster) NodeNames(context.Context) ([]string, error) {
	if !c.nodes.HasSynced() {
		return nil, fmt.Errorf("kube: the node informer has not synced")
	}
	keys := c.nodes.GetStore().ListKeys()
	sort.Strings(keys)
	return keys, nil
}
