package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// queueMetrics gives client-go's work queues their series on the agent's
// registry (depth, waits, work time, retries, by queue name): a queue that
// falls behind shows here before pods go unserved.
type queueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

var _ workqueue.MetricsProvider = (*queueMetrics)(nil)

func newQueueMetrics(reg prometheus.Registerer) *queueMetrics {
	buckets := prometheus.ExponentialBuckets(0.0005, 4, 10) // 0.5 ms to ~2 min
	q := &queueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cgpilot_workqueue_depth",
			Help: "Keys waiting in a work queue, by queue: cgpilot-pods (reconcile), cgpilot-status (annotations)."}, []string{"name"}),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_workqueue_adds_total",
			Help: "Keys added to a work queue."}, []string{"name"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "cgpilot_workqueue_queue_duration_seconds",
			Help: "How long a key waited in a work queue before a worker took it.", Buckets: buckets}, []string{"name"}),
		work: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "cgpilot_workqueue_work_duration_seconds",
			Help: "How long a worker took with one key.", Buckets: buckets}, []string{"name"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cgpilot_workqueue_unfinished_work_seconds",
			Help: "Seconds of work in progress not yet done, summed over a queue's workers (a growing value means a stuck worker)."}, []string{"name"}),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cgpilot_workqueue_longest_running_processor_seconds",
			Help: "Seconds the longest-running worker of a queue has held its key."}, []string{"name"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_workqueue_retries_total",
			Help: "Keys requeued with backoff after a failure."}, []string{"name"}),
	}
	reg.MustRegister(q.depth, q.adds, q.latency, q.work, q.unfinished, q.longest, q.retries)
	return q
}

func (q *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(name)
}

func (q *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(name)
}

func (q *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.latency.WithLabelValues(name)
}

func (q *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.work.WithLabelValues(name)
}

func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(name)
}

func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longest.WithLabelValues(name)
}

func (q *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(name)
}
