package agent

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cgpilot/cgpilot/agent/pools"
	"github.com/cgpilot/cgpilot/agent/rightsize/runner"
	local "github.com/cgpilot/cgpilot/api/local"
)

// handler serves the series, uncompressed whatever the scraper offers:
// no series is per pod, so the text does not grow with the node, while
// promhttp's pooled gzip writer held 1.8 MiB of compressor state between
// scrapes, the third largest item of the agent's heap with 1,000 pods
// (a BenchmarkAgentFootprint heap profile).
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{DisableCompression: true})
}

// metrics are the agent's Prometheus series, all prefixed cgpilot_.
type metrics struct {
	reg          *prometheus.Registry
	poolCPUs     *prometheus.GaugeVec
	exclPods     prometheus.Gauge
	allocations  *prometheus.CounterVec
	refusals     *prometheus.CounterVec
	applyLatency prometheus.Histogram
	lateLatency  prometheus.Histogram
	writes       prometheus.Counter
	writeErrors  prometheus.Counter
	drift        prometheus.Counter
	recovered    *prometheus.CounterVec // panics recovered, by loop (loops.go)
	apiRefused   *prometheus.CounterVec // local API connections turned away, by reason
	kubeletReads *prometheus.CounterVec // the kubelet's CPU manager view read, by why

	rs *runner.Metrics // right-sizing's, registered whether it is on or not
}

func newMetrics() *metrics {
	buckets := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		poolCPUs: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cgpilot_pool_cpus",
			Help: "CPUs per pool: shared, exclusive, reserved, kubelet_static."}, []string{"pool"}),
		exclPods: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cgpilot_exclusive_pods", Help: "Pods holding exclusive CPUs."}),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_allocations_total",
			Help: "Exclusive allocation changes by action: allocated, resized, released."}, []string{"action"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_refusals_total",
			Help: "Refused pool requests by reason."}, []string{"reason"}),
		applyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cgpilot_apply_latency_seconds",
			Help: "From a pod change seen by the informer to its cgroups written.", Buckets: buckets}),
		lateLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cgpilot_late_container_seconds",
			Help: "From a new container cgroup seen by inotify to its cpuset written.", Buckets: buckets}),
		writes:      prometheus.NewCounter(prometheus.CounterOpts{Name: "cgpilot_cgroup_writes_total", Help: "cpuset.cpus files written."}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "cgpilot_cgroup_write_errors_total", Help: "Failed cgroup writes."}),
		drift: prometheus.NewCounter(prometheus.CounterOpts{Name: "cgpilot_drift_corrections_total",
			Help: "Cgroups found changed behind the agent's back and set again."}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_recovered_panics_total",
			Help: "Panics recovered by a long-lived loop of the agent, by loop; the loop went on (a reconcile's pod was reported and requeued). Any non-zero value is a bug to report."}, []string{"loop"}),
	}
	for _, l := range loops {
		m.recovered.WithLabelValues(l) // every loop's series, at 0
	}
	m.rs = runner.NewMetrics(buckets)
	m.apiRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_api_refused_connections_total",
		Help: "Local API connections closed unserved, by reason: peer-not-allowed (neither uid 0 nor the socket group), no-credentials."}, []string{"reason"})
	m.reg.MustRegister(m.rs.Collectors()...)
	m.kubeletReads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_kubelet_view_reads_total",
		Help: "Reads of the kubelet's CPU manager view (PodResources or its checkpoint), by why: start, sweep, pod (a reconcile of a Guaranteed pod the kubelet's static CPU manager may own)."}, []string{"why"})
	for _, why := range []string{"start", "sweep", "pod"} {
		m.kubeletReads.WithLabelValues(why)
	}
	m.reg.MustRegister(m.apiRefused, m.kubeletReads)
	m.reg.MustRegister(m.poolCPUs, m.exclPods, m.allocations, m.refusals, m.applyLatency, m.lateLatency, m.writes, m.writeErrors, m.drift, m.recovered,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observe(s pools.Reader, res pools.Result, since time.Time, timed bool) {
	m.poolCPUs.WithLabelValues("shared").Set(float64(s.SharedPool().Size()))
	m.poolCPUs.WithLabelValues("exclusive").Set(float64(s.Exclusive().Size()))
	m.poolCPUs.WithLabelValues("reserved").Set(float64(s.Reserved().Size()))
	m.poolCPUs.WithLabelValues("kubelet_static").Set(float64(s.KubeletTaken().Size()))
	m.exclPods.Set(float64(len(s.Assignments())))
	for _, ev := range res.Events {
		switch ev.Reason {
		case local.EventCPUsAllocated:
			m.allocations.WithLabelValues("allocated").Inc()
		case local.EventCPUsResized:
			m.allocations.WithLabelValues("resized").Inc()
		case local.EventReleased:
			m.allocations.WithLabelValues("released").Inc()
		}
	}
	if res.Refusal != "" {
		m.refusals.WithLabelValues(res.Refusal).Inc()
	}
	m.writes.Add(float64(res.Written))
	m.writeErrors.Add(float64(len(res.Failed)))
	m.drift.Add(float64(res.Drift))
	if timed && res.Written > 0 {
		m.applyLatency.Observe(time.Since(since).Seconds())
	}
}
