package aggregator

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the state, analysis and profiles as gauges and
// counters, computed at scrape time (no bookkeeping on the ingest path).
// Totals summed over namespaces are the cluster's: sum() in PromQL.
type collector struct {
	a *Aggregator

	leader, nodes, hot, workloads, containers, recs, pending        *prometheus.Desc
	coverage, notAdjustable, requests, released, usage, saturation  *prometheus.Desc
	anomalies, unadmitted, events, late, folded, mergeErr, notMerge *prometheus.Desc
}

func newCollector(a *Aggregator) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("cgpilot_aggregator_"+name, help, labels, nil)
	}
	return &collector{a: a,
		leader:        d("leader", "1 when this replica holds the Lease and serves."),
		nodes:         d("nodes", "Nodes known, by state: reporting, stale (silent for 3 periods).", "state"),
		hot:           d("hot_nodes", "Nodes whose real CPU or memory usage exceeds the hot watermark of allocatable."),
		workloads:     d("workloads", "Workloads with merged state."),
		containers:    d("containers", "Workload-containers with merged state."),
		recs:          d("recommendations", "Workload-containers with a merged recommendation."),
		pending:       d("pending_entries", "Workload-container counts waiting for their window to close."),
		coverage:      d("coverage_containers", "Workload-containers by coverage: adjustable, not_adjustable, no_policy, multiple_policies.", "state"),
		notAdjustable: d("not_adjustable_containers", "Workload-containers under a policy that cannot be adjusted, by reason.", "reason"),
		requests:      d("requests", "Requests of pods' containers per namespace (cores, bytes): before right-sizing (declared) and after (in force).", "namespace", "resource", "when"),
		released:      d("released", "Capacity released per namespace: declared requests minus requests in force (cores, bytes).", "namespace", "resource"),
		usage:         d("usage", "Real mean usage per namespace (cores, bytes).", "namespace", "resource"),
		saturation:    d("saturation", "Usage / requests in force per namespace.", "namespace", "resource"),
		anomalies:     d("anomalies", "Current anomalies by kind: failed_writes, multiple_policies, nodes_not_reporting, sampling_gaps, unadmitted.", "kind"),
		unadmitted:    d("unadmitted_pods", "Pods under an Auto policy created while the webhook was unreachable (from the reports)."),
		events:        d("events_total", "Events in reports since start: adjustment, failed_write, oom_kill, sampling_gap.", "kind"),
		late:          d("late_reports_total", "Reports for windows already merged (merged on arrival)."),
		folded:        d("merged_windows_total", "Report windows merged into the recommenders."),
		mergeErr:      d("merge_errors_total", "Counts that could not be merged (layout or bound)."),
		notMerge:      d("not_mergeable_containers", "Workload-containers whose preset cannot merge (vpa): agents keep their own."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leader, c.nodes, c.hot, c.workloads, c.containers, c.recs, c.pending, c.coverage, c.notAdjustable,
		c.requests, c.released, c.usage, c.saturation, c.anomalies, c.unadmitted, c.events, c.late, c.folded, c.mergeErr, c.notMerge} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	ct := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	a := c.a
	now := a.now()
	leader := 0.0
	if a.IsLeader() {
		leader = 1
	}
	g(c.leader, leader)
	st := a.Store.Stats()
	g(c.workloads, float64(st.Workloads))
	g(c.containers, float64(st.Containers))
	g(c.recs, float64(st.Recommendations))
	g(c.pending, float64(st.PendingEntries))
	g(c.notMerge, float64(st.NotMergeable))
	ct(c.late, float64(st.LateReports))
	ct(c.folded, float64(st.FoldedWindows))
	ct(c.mergeErr, float64(st.MergeErrors))
	var reporting, stale, hot float64
	for _, n := range a.Profiles.Nodes(now) {
		if n.Stale {
			stale++
		} else {
			reporting++
		}
		if n.Hot {
			hot++
		}
	}
	g(c.nodes, reporting, "reporting")
	g(c.nodes, stale, "stale")
	g(c.hot, hot)
	cov := a.Analysis.Coverage()
	notAdj := 0
	for reason, n := range cov.NotAdjustable {
		if reason != "MatchedByTwoPolicies" {
			g(c.notAdjustable, float64(n), reason)
			notAdj += n
		}
	}
	g(c.coverage, float64(cov.Adjustable), "adjustable")
	g(c.coverage, float64(notAdj), "not_adjustable")
	g(c.coverage, float64(cov.NoPolicy), "no_policy")
	g(c.coverage, float64(cov.MultiplePolicies), "multiple_policies")
	_, byNS := a.Analysis.Capacity(now)
	for _, n := range byNS {
		g(c.requests, n.BeforeCPU, n.Namespace, "cpu", "before")
		g(c.requests, n.AfterCPU, n.Namespace, "cpu", "after")
		g(c.requests, n.BeforeMemory, n.Namespace, "memory", "before")
		g(c.requests, n.AfterMemory, n.Namespace, "memory", "after")
		g(c.released, n.ReleasedCPU, n.Namespace, "cpu")
		g(c.released, n.ReleasedMemory, n.Namespace, "memory")
		g(c.usage, n.UsageCPU, n.Namespace, "cpu")
		g(c.usage, n.UsageMemory, n.Namespace, "memory")
		if n.AfterCPU > 0 {
			g(c.saturation, n.UsageCPU/n.AfterCPU, n.Namespace, "cpu")
		}
		if n.AfterMemory > 0 {
			g(c.saturation, n.UsageMemory/n.AfterMemory, n.Namespace, "memory")
		}
	}
	an := a.Analysis.Anomalies(now, 0)
	unadmitted := 0
	for _, u := range an.Unadmitted {
		unadmitted += u.Pods
	}
	g(c.anomalies, float64(len(an.FailedWrites)), "failed_writes")
	g(c.anomalies, float64(len(an.MultiplePolicies)), "multiple_policies")
	g(c.anomalies, float64(len(an.NodesNotReport)), "nodes_not_reporting")
	g(c.anomalies, float64(len(an.SamplingGaps)), "sampling_gaps")
	g(c.anomalies, float64(len(an.Unadmitted)), "unadmitted")
	g(c.unadmitted, float64(unadmitted))
	tot := a.Analysis.Totals()
	ct(c.events, float64(tot.Adjustments), "adjustment")
	ct(c.events, float64(tot.FailedWrites), "failed_write")
	ct(c.events, float64(tot.OOMKills), "oom_kill")
	ct(c.events, float64(tot.Gaps), "sampling_gap")
}
