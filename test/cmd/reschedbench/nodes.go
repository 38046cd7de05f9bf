//go:build linux

package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cgpilot/cgpilot/test/harness"
)

// Why the bench keeps its nodes alive itself: the harness's FakeNode
// heartbeat (a GET and PUT of the Lease and of the Node's status per node
// and period, through the test bed's one client at 100 QPS) is a kubelet's
// two heartbeats, right for a handful of nodes; at 500 nodes it takes that
// client's whole budget and starves everything else the bench does. The
// node lifecycle controller accepts a renewed Lease alone as a heartbeat,
// so the bench writes each Node's status once (Ready, by CreateFakeNode),
// raises the controller's grace period (nodeGrace, an extra flag of
// kube-controller-manager) and renews only the Leases, spread evenly over
// leasePeriod, with a client and a QPS budget of their own.
const (
	nodeGrace   = 5 * time.Minute
	leasePeriod = time.Minute
)

// createNodes registers the nodes (capacity, Ready) with workers at once.
func createNodes(ctx context.Context, cp *harness.ControlPlane, names []string, cpu, mem string) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	work := make(chan string)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				if _, err := cp.CreateFakeNode(ctx, harness.FakeNode{Name: n, CPU: cpu, Memory: mem}); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i, n := range names {
		if i%100 == 0 {
			logf("nodes: %d of %d", i, len(names))
		}
		work <- n
	}
	close(work)
	wg.Wait()
	return first
}

// leases renews the nodes' Leases: one PUT per node and period (the last
// answer is kept, so no GET), a node every period/len(nodes).
type leases struct {
	cs     kubernetes.Interface
	period time.Duration
	held   map[string]*coordinationv1.Lease
	renews atomic.Uint64
	errs   atomic.Uint64
}

// keepLeases creates every node's Lease now and renews them until ctx ends.
func keepLeases(ctx context.Context, cs kubernetes.Interface, nodes []string, period time.Duration) (*leases, error) {
	l := &leases{cs: cs, period: period, held: map[string]*coordinationv1.Lease{}}
	for _, n := range nodes {
		if err := l.renew(ctx, n); err != nil {
			return nil, err
		}
	}
	go func() {
		step := period / time.Duration(len(nodes))
		t := time.NewTicker(step)
		defer t.Stop()
		for i := 0; ; i = (i + 1) % len(nodes) {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := l.renew(ctx, nodes[i]); err != nil && ctx.Err() == nil {
				l.errs.Add(1)
			}
		}
	}()
	return l, nil
}

func (l *leases) renew(ctx context.Context, node string) error {
	api := l.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	if cur := l.held[node]; cur != nil {
		cur.Spec.RenewTime = &now
		got, err := api.Update(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			l.held[node] = got
			l.renews.Add(1)
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return err
		}
		delete(l.held, node) // someone else wrote it: start again from the server's
	}
	secs := int32(l.period / time.Second * 3)
	cur, err := api.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &secs, RenewTime: &now}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		if cur, err = api.Get(ctx, node, metav1.GetOptions{}); err == nil {
			cur.Spec.RenewTime = &now
			cur, err = api.Update(ctx, cur, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("lease of %s: %w", node, err)
	}
	l.held[node] = cur
	l.renews.Add(1)
	return nil
}

// notReady counts the nodes the node lifecycle controller no longer sees
// Ready (a heartbeat gap) or has tainted.
func notReady(ctx context.Context, cs kubernetes.Interface) (int, error) {
	ns, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, node := range ns.Items {
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				n++
			}
		}
	}
	return n, nil
}
