//go:build linux

package harness

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// FakeNode is a Node object with no kubelet behind it: "another node" for
// scheduling, node-scoped watches and per-node policies.
type FakeNode struct {
	Name string
	// CPU and Memory are its capacity and allocatable (default "4" and
	// "8Gi"); it takes 110 pods.
	CPU, Memory string
	// Labels are added to kubernetes.io/hostname=Name.
	Labels map[string]string
	// Heartbeat, when set, renews the Node's Lease and its Ready condition
	// at this period, as a kubelet does, until the context given to
	// CreateFakeNode ends or the control plane stops. Without it the node
	// lifecycle controller (Options.Controllers) turns Ready to Unknown
	// and taints the Node unreachable once its grace period passes (50 s
	// by default).
	Heartbeat time.Duration
}

// CreateFakeNode creates a Node with capacity and a Ready condition (the
// scheduler and the resize admission check allocatable) and, with
// Heartbeat, keeps it alive in the background.
func (cp *ControlPlane) CreateFakeNode(ctx context.Context, f FakeNode) (*corev1.Node, error) {
	if f.Name == "" {
		return nil, fmt.Errorf("harness: fake node needs a name")
	}
	if f.CPU == "" {
		f.CPU = "4"
	}
	if f.Memory == "" {
		f.Memory = "8Gi"
	}
	cpu, err := resource.ParseQuantity(f.CPU)
	if err != nil {
		return nil, fmt.Errorf("harness: fake node %s: cpu %q: %w", f.Name, f.CPU, err)
	}
	mem, err := resource.ParseQuantity(f.Memory)
	if err != nil {
		return nil, fmt.Errorf("harness: fake node %s: memory %q: %w", f.Name, f.Memory, err)
	}
	labels := map[string]string{"kubernetes.io/hostname": f.Name}
	for k, v := range f.Labels {
		labels[k] = v
	}
	cs := cp.Client
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.Name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("harness: create node %s: %w", f.Name, err)
	}
	capacity := corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem, corev1.ResourcePods: resource.MustParse("110")}
	var node *corev1.Node
	// With the controllers running, the node lifecycle controller may
	// update the new Node (taints) between our create and our status write.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, f.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		n.Status.Capacity, n.Status.Allocatable = capacity, capacity
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "HarnessFakeNode",
			Message: "no kubelet: a harness fake node", LastHeartbeatTime: now, LastTransitionTime: now}}
		node, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("harness: node %s status: %w", f.Name, err)
	}
	if f.Heartbeat > 0 {
		if err := cp.renewFakeNode(ctx, f.Name, f.Heartbeat); err != nil {
			return nil, err
		}
		go cp.heartbeat(ctx, f.Name, f.Heartbeat)
	}
	return node, nil
}

// heartbeat renews a fake node every period; failures (an API server
// stopped by the test) are retried at the next tick.
func (cp *ControlPlane) heartbeat(ctx context.Context, name string, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-cp.stopped:
			return
		case <-tick.C:
			_ = cp.renewFakeNode(ctx, name, period)
		}
	}
}

// renewFakeNode renews the node's Lease (creating it) and its Ready
// condition's heartbeat time, as the kubelet's two heartbeats do.
func (cp *ControlPlane) renewFakeNode(ctx context.Context, name string, period time.Duration) error {
	leases := cp.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	duration := int32(max(40, 4*period/time.Second))
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: &duration, RenewTime: &now},
			}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		l.Spec.RenewTime = &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("harness: renew lease of %s: %w", name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				n.Status.Conditions[i].LastHeartbeatTime = metav1.Now()
				if c.Status != corev1.ConditionTrue {
					n.Status.Conditions[i].Status, n.Status.Conditions[i].LastTransitionTime = corev1.ConditionTrue, metav1.Now()
				}
			}
		}
		_, err = cp.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("harness: renew status of %s: %w", name, err)
	}
	return nil
}
