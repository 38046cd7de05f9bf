package analysis

import (
	"math"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/api/report"
)

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

func key(ns, name, c string) report.Key {
	return report.Key{Workload: report.Workload{Namespace: ns, Kind: report.KindDeployment, Name: name}, Container: c}
}

func decoded(node string, end time.Time, cs ...report.Container) *report.Decoded {
	return &report.Decoded{Report: report.Report{Node: node, WindowEnd: end, Windows: 1, Containers: cs}}
}

func TestAnalysis(t *testing.T) {
	a := New(Config{})
	web := report.Container{Key: key("shop", "web", "app"), Pods: 3, UsageCPU: 0.6, UsageMemory: 6e8,
		Current: report.Resources{CPURequest: 0.25, MemoryRequest: 3e8}, Original: report.Resources{CPURequest: 1, MemoryRequest: 1e9},
		Policy: "shop", Mode: "InPlace", Adjustable: true, Unadmitted: 1}
	db := report.Container{Key: key("shop", "db", "pg"), Pods: 1, UsageCPU: 1.5, UsageMemory: 4e9,
		Current: report.Resources{CPURequest: 2, MemoryRequest: 8e9}, Policy: "shop", Mode: "InPlace", Reason: "ExclusiveCPUs"}
	batch := report.Container{Key: key("batch", "etl", "run"), Pods: 2, UsageCPU: 0.2, UsageMemory: 1e8,
		Current: report.Resources{CPURequest: 0.5, MemoryRequest: 2e8}, Conflicts: []string{"a", "b"}}
	bare := report.Container{Key: key("batch", "tool", "sh"), Pods: 1, Current: report.Resources{CPURequest: 0.1}}

	d1 := decoded("n1", t0, web, db)
	d1.Adjustments = []report.Adjustment{
		{Key: web.Key, Pod: "web-1", Time: t0, Resource: "cpu", From: 1, To: 0.25, Reason: report.ReasonRecommendation},
		{Key: web.Key, Pod: "web-2", Time: t0, Resource: "cpu", From: 1, To: 0.25, Reason: report.ReasonRecommendation, Error: "resize refused"},
	}
	d1.OOMKills = []report.OOMKill{{Key: db.Key, Pod: "db-0", Time: t0, UsageBytes: 8e9, LimitBytes: 8e9}}
	d1.MissedRounds = 2
	a.Observe(d1, t0)
	a.Observe(decoded("n2", t0, batch, bare), t0)
	a.Tick(t0)

	cov := a.Coverage()
	if cov.Workloads != 4 || cov.Containers != 4 || cov.UnderPolicy != 2 || cov.Adjustable != 1 || cov.NoPolicy != 1 ||
		cov.MultiplePolicies != 1 || cov.NotAdjustable["ExclusiveCPUs"] != 1 || cov.WorkloadsUnderPolicy != 2 || cov.ByMode["InPlace"] != 2 {
		t.Errorf("coverage %+v", cov)
	}
	cluster, byNS := a.Capacity(t0)
	// shop: before 3×1 + 2 = 5 cores, after 3×0.25 + 2 = 2.75; batch unchanged.
	if math.Abs(cluster.ReleasedCPU-2.25) > 1e-9 || math.Abs(cluster.ReleasedMemory-3*(1e9-3e8)) > 1 {
		t.Errorf("cluster %+v", cluster)
	}
	if len(byNS) != 2 || byNS[0].Namespace != "shop" || math.Abs(byNS[0].ReleasedCPU-2.25) > 1e-9 || byNS[1].ReleasedCPU != 0 {
		t.Errorf("namespaces %+v", byNS)
	}
	sat := a.Saturation("shop")
	if len(sat) != 1 || math.Abs(sat[0].CPU-(0.6+1.5)/2.75) > 1e-9 {
		t.Errorf("shop saturation %+v", sat)
	}
	if h := a.History(10); len(h) != 2 || h[0].Kind != "oom" || h[1].Kind != "adjustment" {
		t.Errorf("history %+v", h)
	}
	// n2 falls silent; n1 skips two windows.
	later := t0.Add(10 * time.Minute)
	d2 := decoded("n1", t0.Add(3*time.Minute), web, db)
	a.Observe(d2, later)
	an := a.Anomalies(later, 10)
	if len(an.FailedWrites) != 1 || len(an.MultiplePolicies) != 1 || len(an.NodesNotReport) != 1 || an.NodesNotReport[0].Node != "n2" {
		t.Errorf("anomalies %+v", an)
	}
	if len(an.Unadmitted) != 1 || an.Unadmitted[0].Pods != 1 || an.Unadmitted[0].Key != web.Key {
		t.Errorf("unadmitted %+v", an.Unadmitted)
	}
	if len(an.SamplingGaps) != 2 || an.SamplingGaps[0].MissedWindows != 2 || an.SamplingGaps[1].MissedRounds != 2 {
		t.Errorf("gaps %+v", an.SamplingGaps)
	}
	// Silent nodes leave the sums; forgotten ones leave everything.
	if cluster, _ := a.Capacity(later); cluster.Containers != 4 {
		t.Errorf("silent node still summed: %+v", cluster)
	}
	a.Tick(t0.Add(25 * time.Hour))
	if cov := a.Coverage(); cov.Containers != 0 {
		t.Errorf("forgotten containers still covered: %+v", cov)
	}
	tot := a.Totals()
	if tot.Adjustments != 1 || tot.FailedWrites != 1 || tot.OOMKills != 1 || tot.Gaps != 2 {
		t.Errorf("totals %+v", tot)
	}
}

func TestRing(t *testing.T) {
	r := newRing[int](3)
	for i := range 5 {
		r.add(i)
	}
	if got := r.items(); len(got) != 3 || got[0] != 2 || got[2] != 4 {
		t.Errorf("items %v, want [2 3 4]", got)
	}
}
