package kube

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
)

// TestLimits: a namespace's LimitRanges merge to their tightest bounds,
// other namespaces' do not count, and the largest node's allocatable is
// read from nodes kept as their allocatable only.
func TestLimits(t *testing.T) {
	q := resource.MustParse
	lr := func(ns, name string, items ...corev1.LimitRangeItem) *corev1.LimitRange {
		return &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.LimitRangeSpec{Limits: items}}
	}
	node := func(name, cpu, mem string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"big": "label"}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"cpu": q(cpu), "memory": q(mem), "pods": q("110")},
				Images: []corev1.ContainerImage{{Names: []string{"a-large-image"}}}}}
	}
	cs := fake.NewClientset(
		lr("shop", "a", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: corev1.ResourceList{"cpu": q("4")}, Min: corev1.ResourceList{"memory": q("64Mi")}}),
		lr("shop", "b", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: corev1.ResourceList{"cpu": q("2"), "memory": q("8Gi")},
			MaxLimitRequestRatio: corev1.ResourceList{"cpu": q("3")}},
			corev1.LimitRangeItem{Type: corev1.LimitTypePod, Max: corev1.ResourceList{"memory": q("16Gi")}}),
		lr("other", "c", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: corev1.ResourceList{"cpu": q("100m")}}),
		node("small", "3500m", "14Gi"), node("big", "63", "250Gi"), node("odd", "96", "64Gi"))
	nodes := NewNodes(cs, time.Hour)
	l := NewLimits(cs, time.Hour, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nodes.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	want := policy.LimitRange{Max: policy.Values{CPU: 2, Memory: 8 << 30}, Min: policy.Values{Memory: 64 << 20},
		MaxLimitRequestRatio: policy.Values{CPU: 3}, PodMax: policy.Values{Memory: 16 << 30}}
	if got := l.LimitRange("shop"); got != want {
		t.Errorf("shop: %+v\nwant %+v", got, want)
	}
	if got := l.LimitRange("empty"); got != (policy.LimitRange{}) {
		t.Errorf("empty: %+v", got)
	}
	if got := l.LargestAllocatable(); got != (policy.Values{CPU: 96, Memory: 250 << 30}) {
		t.Errorf("largest allocatable %+v", got)
	}
	for _, obj := range nodes.informer.GetStore().List() {
		if n := obj.(*corev1.Node); len(n.Labels) > 0 || len(n.Status.Images) > 0 || len(n.Status.Allocatable) != 3 {
			t.Errorf("node %s kept %+v", n.Name, n)
		}
	}
}
