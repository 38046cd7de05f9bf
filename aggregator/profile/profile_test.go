package profile

import (
	"math"
	"testing"
	"time"
	"unsafe"

	"github.com/cgpilot/cgpilot/api/report"
)

var day0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// TestRingSummary feeds 9 days of minute windows whose usage peaks at
// 14:00 UTC (higher on later days) and checks the 7-day maximum and the
// 7-day average of the busiest hour against values computed directly.
func TestRingSummary(t *testing.T) {
	var r Ring
	usage := func(d, h, m int) float64 {
		base := 1.0 + 0.1*float64(d)
		if h == 14 {
			return base*3 + float64(m)/60
		}
		return base + 0.01*float64(h)
	}
	for d := range 9 {
		for h := range 24 {
			for m := range 60 {
				ts := day0.Add(time.Duration(d)*24*time.Hour + time.Duration(h)*time.Hour + time.Duration(m)*time.Minute)
				r.Add(ts, usage(d, h, m), 2*usage(d, h, m))
			}
		}
	}
	now := day0.Add(9*24*time.Hour - time.Minute)
	s := r.Summary(now)
	if s.Days != 7 {
		t.Errorf("days %d, want 7", s.Days)
	}
	wantMax := usage(8, 14, 59)
	var wantPeak float64
	for d := 2; d < 9; d++ { // the last 7 days
		var sum float64
		for m := range 60 {
			sum += usage(d, 14, m)
		}
		wantPeak += sum / 60
	}
	wantPeak /= 7
	if s.CPU.Hour != 14 || s.Memory.Hour != 14 {
		t.Errorf("busiest hours %d, %d; want 14", s.CPU.Hour, s.Memory.Hour)
	}
	// Maxima are float32, hourly means bfloat16 (within 0.4 %).
	if math.Abs(s.CPU.Max7d-wantMax) > 1e-6*wantMax || math.Abs(s.CPU.PeakHour-wantPeak) > 4e-3*wantPeak {
		t.Errorf("CPU max %v peak %v, want %v %v", s.CPU.Max7d, s.CPU.PeakHour, wantMax, wantPeak)
	}
	if math.Abs(s.Memory.PeakHour-2*wantPeak) > 8e-3*wantPeak {
		t.Errorf("memory peak %v, want %v", s.Memory.PeakHour, 2*wantPeak)
	}
	// Three days later only four of those days are within the horizon.
	if s := r.Summary(now.Add(3 * 24 * time.Hour)); s.Days != 4 {
		t.Errorf("days after 3 more days: %d, want 4", s.Days)
	}
	// Data older than a row's day is outside the horizon and ignored.
	before := r
	r.Add(day0, 100, 100)
	if r != before {
		t.Error("a sample 9 days old changed the ring")
	}
	if unsafe.Sizeof(r) > 900 {
		t.Errorf("a ring takes %d bytes", unsafe.Sizeof(r))
	}
}

func TestProfilesWorkloadsAndHotNodes(t *testing.T) {
	p := New(Config{HotWatermark: 0.75})
	web := report.Workload{Namespace: "shop", Kind: report.KindDeployment, Name: "web"}
	end := day0.Add(10 * time.Minute)
	for i, node := range []string{"a", "b", "c"} {
		d := &report.Decoded{Report: report.Report{Node: node, WindowEnd: end, Usage: report.NodeUsage{
			CPUAllocatable: 4, CPUUsage: float64(i + 1), MemoryAllocatable: 8e9, MemoryUsage: 1e9 * float64(3*i+1)}}}
		d.Containers = []report.Container{
			{Key: report.Key{Workload: web, Container: "app"}, Pods: 2, UsageCPU: 0.5, UsageMemory: 2e8},
			{Key: report.Key{Workload: web, Container: "sidecar"}, Pods: 2, UsageCPU: 0.1, UsageMemory: 1e8},
		}
		p.Observe(d, end)
	}
	if _, ok := p.Workload(web, end); ok {
		t.Error("a workload profile before its window closed")
	}
	p.Close(end.Add(2 * time.Minute))
	w, ok := p.Workload(web, end)
	if !ok || math.Abs(w.PerPodCPU-0.3) > 1e-6 || math.Abs(w.PerPodMem-1.5e8) > 1 {
		t.Fatalf("workload %+v: want 0.3 cores and 150 MB per pod (3 × 0.6 cores over 6 pods)", w)
	}
	if math.Abs(w.Profile.CPU.Max7d-1.8) > 1e-6 {
		t.Errorf("workload max %v, want 1.8", w.Profile.CPU.Max7d)
	}
	hot := p.Hot(end)
	// b: 2/4 CPU, 4/8 GB; c: 3/4 CPU (0.75, not above), 7/8 GB (hot).
	if len(hot) != 1 || hot[0].Name != "c" {
		t.Errorf("hot nodes %+v, want c", hot)
	}
	if hot := p.Hot(end.Add(time.Hour)); len(hot) != 0 {
		t.Errorf("stale nodes listed hot: %+v", hot)
	}
	p.Forget([]report.Workload{web}, end.Add(time.Second))
	if _, ok := p.Workload(web, end); ok || len(p.Nodes(end)) != 0 {
		t.Error("Forget kept the workload or the old nodes")
	}
}
