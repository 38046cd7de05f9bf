package agent

import (
	"github.com/prometheus/client_golang/prometheus"
)

// state.go: the size of every table the agent keeps per pod, container or
// workload, exported as cgpilot_state_entries{table} at each scrape. Under
// pod churn each must follow the pods that live on the node and return to
// them when the churn stops (the churn soak in test/e2e reads them): a
// table that only grows is a leak.

var stateDesc = prometheus.NewDesc("cgpilot_state_entries",
	"Entries in the agent's per-pod, per-container and per-workload tables, by table; each follows the pods on the node (a table that only grows is a leak).",
	[]string{"table"}, nil)

// stateCollector reads the tables' sizes when scraped.
type stateCollector struct{ c *controller }

func (s stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- stateDesc }

func (s stateCollector) Collect(ch chan<- prometheus.Metric) {
	for table, n := range s.c.stateSizes() {
		ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, float64(n), table)
	}
}

// stateSizes are the tables' sizes now.
func (c *controller) stateSizes() map[string]int {
	out := map[string]int{}
	c.mu.Lock()
	out["known-pods"], out["pending-status"], out["change-times"], out["late-containers"] = len(c.known), len(c.pending), len(c.since), len(c.late)
	c.mu.Unlock()
	out["exclusive-allocations"] = len(c.pools.State().Assignments())
	if c.rs != nil {
		c.rs.Sizes(out)
	}
	return out
}
