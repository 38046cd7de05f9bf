package aggtest

import (
	"bytes"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/api/report"
)

func TestFleetReportsDecode(t *testing.T) {
	f := NewFleet(FleetConfig{Nodes: 20, PodsPerNode: 100, Seed: 1})
	w, c := f.Workloads()
	if w < 50 || c < w {
		t.Fatalf("%d workloads, %d containers", w, c)
	}
	end := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	pods := 0
	for i := range 20 {
		r := f.Report(i, end)
		body, err := report.Encode(r, false)
		if err != nil {
			t.Fatal(err)
		}
		d, err := report.Decode(bytes.NewReader(body), "")
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		for _, c := range d.Containers {
			if c.Container == "app" {
				pods += c.Pods
			}
		}
		if i == 0 {
			t.Logf("a 100-pod node's report: %d containers, %d bytes of JSON", len(d.Containers), len(body))
		}
		if d.Sequence != 1 || d.Rounds != 6 || d.MissedRounds != 0 {
			t.Errorf("node %d: sequence %d rounds %d missed %d", i, d.Sequence, d.Rounds, d.MissedRounds)
		}
	}
	if pods != 2000 {
		t.Errorf("%d pods reported, want 2000", pods)
	}
	t.Logf("%d workloads, %d workload-containers on 20 nodes", w, c)
}
