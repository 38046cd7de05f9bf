//go:build linux

package collector

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the collector's series, all prefixed cgpilot_collector_.
type metrics struct {
	updates    *prometheus.CounterVec // by collector and result
	round      prometheus.Histogram
	targets    prometheus.Gauge
	gone       prometheus.Counter
	readErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_collector_updates_total",
			Help: "Per-container updates by collector and result: ok, nodata (the kernel lacks the files), error."}, []string{"collector", "result"}),
		round: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cgpilot_collector_round_seconds",
			Help: "Duration of one sampling round over every container.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		targets: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cgpilot_collector_targets", Help: "Containers sampled."}),
		gone: prometheus.NewCounter(prometheus.CounterOpts{Name: "cgpilot_collector_gone_total",
			Help: "Containers dropped because their cgroup went away."}),
		readErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "cgpilot_collector_read_errors_total",
			Help: "Failed cgroup reads other than a vanished cgroup."}),
	}
	if reg != nil {
		reg.MustRegister(m.updates, m.round, m.targets, m.gone, m.readErrors)
	}
	return m
}

func (m *metrics) observe(collector string, err error) {
	result := "ok"
	switch {
	case errors.Is(err, ErrNoData):
		result = "nodata"
	case err != nil:
		result = "error"
	}
	m.updates.WithLabelValues(collector, result).Inc()
}
