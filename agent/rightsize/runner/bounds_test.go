package runner

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/agent/kube/kubetest"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
)

// TestNodeBounds: a namespace's LimitRanges merge into the tightest of
// each bound (other namespaces' do not count), and the Node's allocatable
// is read once per nodeBoundsEvery, a failed read keeping the last.
func TestNodeBounds(t *testing.T) {
	q := resource.MustParse
	lr := func(ns, name string, items ...corev1.LimitRangeItem) *corev1.LimitRange {
		return &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.LimitRangeSpec{Limits: items}}
	}
	cs := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: q("3500m"), corev1.ResourceMemory: q("12Gi")}}},
		lr("shop", "a", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("8Gi")}}),
		lr("shop", "b", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: corev1.ResourceList{corev1.ResourceCPU: q("2")},
			MaxLimitRequestRatio: corev1.ResourceList{corev1.ResourceMemory: q("2")}},
			corev1.LimitRangeItem{Type: corev1.LimitTypePod, Max: corev1.ResourceList{corev1.ResourceMemory: q("10Gi")}}),
		lr("other", "c", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: corev1.ResourceList{corev1.ResourceCPU: q("100m")}}),
	)
	b := newNodeBounds(kubetest.New(cs, nil), "n1", 0, logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), b.lr.HasSynced) {
		t.Fatal("LimitRange cache never synced")
	}
	now := time.Now()
	b.refresh(ctx, now)
	got, alloc := b.of("shop")
	if got.Max.CPU != 2 || got.Max.Memory != 8<<30 || got.MaxLimitRequestRatio.Memory != 2 || got.PodMax.Memory != 10<<30 {
		t.Fatalf("shop's LimitRanges: %+v", got)
	}
	if alloc.CPU != 3.5 || alloc.Memory != 12<<30 {
		t.Fatalf("allocatable %+v", alloc)
	}
	if none, _ := b.of("empty"); none.Max.CPU != 0 || none.PodMax.Memory != 0 {
		t.Fatalf("a namespace without LimitRanges: %+v", none)
	}
	// The Node goes away: the next read (after nodeBoundsEvery) fails and
	// keeps the last allocatable; reads within it are not made.
	if err := cs.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gets := func() int {
		n := 0
		for _, a := range cs.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" {
				n++
			}
		}
		return n
	}
	before := gets()
	b.refresh(ctx, now.Add(time.Minute))
	if gets() != before {
		t.Fatal("the Node read again within nodeBoundsEvery")
	}
	b.refresh(ctx, now.Add(nodeBoundsEvery))
	if _, alloc := b.of("shop"); gets() != before+1 || alloc.CPU != 3.5 {
		t.Fatalf("after a failed read: %d gets, allocatable %+v", gets()-before, alloc)
	}
	var nilBounds *nodeBounds
	if lr, alloc := nilBounds.of("shop"); lr.Max.CPU != 0 || alloc.CPU != 0 {
		t.Fatal("nil bounds bound something")
	}
}

// TestLastAppliedOf: the last resize survives a restart in the
// recommendation annotation; one the tenant set in the future counts as
// now (it cannot hold resizes off longer than a step), and an unreadable
// one as none.
func TestLastAppliedOf(t *testing.T) {
	now := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	pod := func(ann string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationRecommendation: ann}}}
	}
	at := func(t time.Time) string {
		return local.Recommendation{LastApplied: &t}.Encode()
	}
	for _, tc := range []struct {
		ann  string
		want time.Time
	}{
		{at(now.Add(-time.Hour)), now.Add(-time.Hour)},
		{at(now.Add(1000 * time.Hour)), now},
		{"{not json", time.Time{}},
		{"", time.Time{}},
		{local.Recommendation{}.Encode(), time.Time{}},
	} {
		if got := lastAppliedOf(pod(tc.ann), now); !got.Equal(tc.want) {
			t.Errorf("%q: %v, want %v", tc.ann, got, tc.want)
		}
	}
}
