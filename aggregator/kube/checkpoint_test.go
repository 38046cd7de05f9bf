package kube

import (
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/aggregator/state"
	"github.com/cgpilot/cgpilot/api/report"
)

func TestObjectRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	w := report.Workload{Namespace: "shop", Kind: report.KindDeployment, Name: "web"}
	rec := &report.WorkloadRecommendation{Updated: now, Recommendation: report.Recommendation{
		CPU: report.Estimate{Target: 0.25, Lower: 0.1, Upper: 0.9}, Memory: report.Estimate{Target: 300 << 20, Limit: 600 << 20}}}
	ws := state.WorkloadState{Workload: w, Containers: []state.ContainerState{
		{Entry: state.Entry{Key: report.Key{Workload: w, Container: "app"}, Policy: "shop", Preset: "cgpilot-balanced", Samples: 1000, Nodes: 3,
			Current: report.Resources{CPURequest: 0.5, MemoryRequest: 512 << 20}, Original: report.Resources{CPURequest: 1, MemoryRequest: 1 << 30},
			Adjustable: true, Rec: rec}, State: []byte("state-bytes")},
		{Entry: state.Entry{Key: report.Key{Workload: w, Container: "huge"}, Preset: "cgpilot-balanced"}, State: make([]byte, MaxStateBytes+1)},
	}}
	obj := ToObject(ws, &profile.Summary{Days: 2, CPU: profile.Resource{Max7d: 1.5, PeakHour: 1.1, Hour: 14}}, now)
	if obj.Name != "deployment-web" || obj.Namespace != "shop" || obj.Labels[LabelManagedBy] != ManagedBy {
		t.Errorf("meta %+v", obj.ObjectMeta)
	}
	st := obj.Status
	if st.CPU.String() != "250m" || st.Memory.String() != "300Mi" || st.RequestedCPU.String() != "500m" || st.Nodes != 3 || st.Samples != 1000 {
		t.Errorf("status cpu %v memory %v requested %v nodes %d samples %d", st.CPU, st.Memory, st.RequestedCPU, st.Nodes, st.Samples)
	}
	if st.Profile == nil || st.Profile.CPU.Max7d.String() != "1500m" || st.Profile.CPU.PeakHourOfDay != 14 {
		t.Errorf("profile %+v", st.Profile)
	}
	if len(st.Containers) != 2 || st.Containers[1].State != nil || !strings.Contains(st.Containers[1].Reason, "bound") {
		t.Errorf("oversized state kept: %+v", st.Containers[1])
	}
	back, err := FromObject(obj, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e := back.Containers[0].Entry
	if e.Key != ws.Containers[0].Entry.Key || e.Policy != "shop" || e.Samples != 1000 || string(back.Containers[0].State) != "state-bytes" ||
		e.Current.CPURequest != 0.5 || e.Original.MemoryRequest != 1<<30 || e.Rec == nil || e.Rec.CPU.Target != 0.25 ||
		e.Rec.Memory.Limit != 600<<20 || !e.Rec.FreshUntil.Equal(now.Add(time.Hour)) {
		t.Errorf("back %+v rec %+v", e, e.Rec)
	}
	obj.Spec.Workload.Kind = "bad kind"
	if _, err := FromObject(obj, time.Hour); err == nil {
		t.Error("a bad kind decoded")
	}
}

func TestObjectName(t *testing.T) {
	if n := ObjectName(report.Workload{Kind: "StatefulSet", Name: "db"}); n != "statefulset-db" {
		t.Errorf("%q", n)
	}
	long := ObjectName(report.Workload{Kind: "Deployment", Name: strings.Repeat("a", 253)})
	if len(long) > 253 || long == ObjectName(report.Workload{Kind: "Deployment", Name: strings.Repeat("a", 252) + "b"}) {
		t.Errorf("long names: %d bytes, or not distinct", len(long))
	}
}
