package agent

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cgpilot/cgpilot/agent/kube/kubetest"
)

// TestSweepSlices: the safety-net sweep checks each pod once per interval,
// a slice at a time, never two slices less than minSweepTick apart; short
// intervals (tests, users who want the old behaviour) sweep everything
// every interval.
func TestSweepSlices(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		slices   int
		tick     time.Duration
	}{
		{100 * time.Millisecond, 1, 100 * time.Millisecond},
		{2 * time.Second, 1, 2 * time.Second},
		{10 * time.Second, 1, 10 * time.Second},
		{25 * time.Second, 2, 12500 * time.Millisecond},
		{time.Minute, 6, 10 * time.Second},
		{5 * time.Minute, 30, 10 * time.Second},
		{time.Hour, 30, 2 * time.Minute},
	} {
		if n, tick := sweepSlices(tc.interval), sweepTick(tc.interval); n != tc.slices || tick != tc.tick {
			t.Errorf("%v: %d slices every %v, want %d every %v", tc.interval, n, tick, tc.slices, tc.tick)
		}
		if got := time.Duration(sweepSlices(tc.interval)) * sweepTick(tc.interval); got != tc.interval {
			t.Errorf("%v: a full pass takes %v", tc.interval, got)
		}
	}
	// Every pod falls in one slice, and the slices share 1,000 pods
	// evenly enough that no tick does much more than its share.
	n := sweepSlices(5 * time.Minute)
	count := make([]int, n)
	for i := range 1000 {
		s := sweepSlice(fmt.Sprintf("%08x-0000-4000-8000-%012x", i*7919, i), n)
		if s < 0 || s >= n {
			t.Fatalf("slice %d of %d", s, n)
		}
		count[s]++
	}
	for s, c := range count {
		if c > 2*1000/n {
			t.Errorf("slice %d holds %d of 1,000 pods (fair share %d)", s, c, 1000/n)
		}
	}
}

// TestSweepSliceIndex: the pod cache's slice index hands each sweep tick
// the pods of its slice, every pod in exactly one slice, as sweepSlice
// places them.
func TestSweepSliceIndex(t *testing.T) {
	interval := 5 * time.Minute
	inf, err := newPodInformer(kubetest.New(fake.NewClientset(), nil), "node-a", 0, interval)
	if err != nil {
		t.Fatal(err)
	}
	idx := inf.GetIndexer()
	const pods = 300
	for i := range pods {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i*7919, i))}}
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	n := sweepSlices(interval)
	seen := map[string]int{}
	for s := range n {
		objs, err := idx.ByIndex(sliceIndex, strconv.Itoa(s))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			p := o.(*corev1.Pod)
			if got := sweepSlice(string(p.UID), n); got != s {
				t.Errorf("%s indexed in slice %d, sweepSlice says %d", p.Name, s, got)
			}
			seen[p.Name]++
		}
	}
	if len(seen) != pods {
		t.Errorf("the slices hold %d of %d pods", len(seen), pods)
	}
	for name, c := range seen {
		if c != 1 {
			t.Errorf("%s in %d slices", name, c)
		}
	}
}
