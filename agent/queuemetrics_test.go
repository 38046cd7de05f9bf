package agent

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/util/workqueue"
)

func TestQueueMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	qm := newQueueMetrics(reg)
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "test-q", MetricsProvider: qm})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	q.Add("a") // deduplicated: not a second key
	if d := testutil.ToFloat64(qm.depth.WithLabelValues("test-q")); d != 2 {
		t.Fatalf("depth %v, want 2", d)
	}
	k, _ := q.Get()
	time.Sleep(2 * time.Millisecond)
	q.AddRateLimited(k)
	q.Done(k)
	if d := testutil.ToFloat64(qm.depth.WithLabelValues("test-q")); d != 1 {
		t.Fatalf("depth after one taken %v, want 1", d)
	}
	if r := testutil.ToFloat64(qm.retries.WithLabelValues("test-q")); r != 1 {
		t.Fatalf("retries %v, want 1", r)
	}
	if n := testutil.CollectAndCount(qm.work, "cgpilot_workqueue_work_duration_seconds"); n != 1 {
		t.Fatalf("work duration series %d, want 1", n)
	}
	if n := testutil.CollectAndCount(reg); n < 7 {
		t.Fatalf("%d series registered, want the queue's 7 kinds", n)
	}
}
