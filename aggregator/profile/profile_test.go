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

// TestPlacementLoads: a node's load is the sum over the pods of its
// latest report of their workload's 7-day peak per pod, the highest per
// pod on any node in any window (not the mean over the pods), and follows
// the pods when a later report shows them gone.
func TestPlacementLoads(t *testing.T) {
	p := New(Config{})
	web := report.Workload{Namespace: "shop", Kind: report.KindDeployment, Name: "web"}
	batch := report.Workload{Namespace: "shop", Kind: report.KindDeployment, Name: "batch"}
	send := func(node string, end time.Time, cs ...report.Container) {
		d := &report.Decoded{Report: report.Report{Node: node, WindowEnd: end,
			Usage: report.NodeUsage{CPUAllocatable: 4, MemoryAllocatable: 8e9, CPUUsage: 1, MemoryUsage: 1e9}}}
		d.Containers = cs
		p.Observe(d, end)
	}
	c := func(w report.Workload, name string, pods int, cpu, mem float64) report.Container {
		return report.Container{Key: report.Key{Workload: w, Container: name}, Pods: pods, UsageCPU: cpu, UsageMemory: mem}
	}
	end := day0.Add(10 * time.Minute)
	// Window 1: web runs 2 pods on a (0.4 cores per pod: two containers
	// summed) and 1 pod on b at 1.0 core: its peak per pod is 1.0.
	send("a", end, c(web, "app", 2, 0.6, 2e8), c(web, "sidecar", 2, 0.2, 1e8))
	send("b", end, c(web, "app", 1, 0.9, 1e8), c(web, "sidecar", 1, 0.1, 1e8), c(batch, "job", 1, 0.5, 1e9))
	// Window 2: web is quieter everywhere.
	send("a", end.Add(time.Minute), c(web, "app", 2, 0.2, 1e8))
	send("b", end.Add(time.Minute), c(web, "app", 1, 0.2, 1e8), c(batch, "job", 1, 0.1, 5e8))
	p.Close(end.Add(5 * time.Minute))
	w, _ := p.Workload(web, end)
	if math.Abs(w.PeakPodCPU-1.0) > 1e-6 || math.Abs(w.PeakPodMem-2e8) > 1 {
		t.Fatalf("web's peak per pod %v cores %v bytes, want 1.0 and 2e8 (b's pod in window 1)", w.PeakPodCPU, w.PeakPodMem)
	}
	p.RefreshLoads(end.Add(5 * time.Minute))
	la, ok := p.NodeLoad("a")
	if !ok || la.Pods != 2 || math.Abs(la.CPU-2.0) > 1e-6 || math.Abs(la.Memory-4e8) > 1 {
		t.Errorf("a's load %+v: want 2 pods × 1.0 core, 2 × 2e8 bytes", la)
	}
	lb, _ := p.NodeLoad("b")
	if math.Abs(lb.CPU-1.5) > 1e-6 || math.Abs(lb.Memory-(2e8+1e9)) > 1 {
		t.Errorf("b's load %+v: want web 1.0 + batch 0.5 cores, 2e8 + 1e9 bytes", lb)
	}
	// A workload with no closed window counts its usage on the node.
	fresh := report.Workload{Namespace: "shop", Kind: report.KindDeployment, Name: "new"}
	send("a", end.Add(6*time.Minute), c(fresh, "app", 3, 2.5, 3e9))
	p.RefreshLoads(end.Add(6 * time.Minute))
	if la, _ = p.NodeLoad("a"); la.Pods != 3 || math.Abs(la.CPU-2.5) > 1e-6 {
		t.Errorf("a after web left and a new workload came: %+v, want 3 pods and 2.5 cores", la)
	}
	// The snapshot only moves every LoadInterval through Close.
	send("a", end.Add(7*time.Minute))
	p.Close(end.Add(6*time.Minute + 30*time.Second))
	if la, _ = p.NodeLoad("a"); la.Pods != 3 {
		t.Errorf("load recomputed before LoadInterval: %+v", la)
	}
	p.Close(end.Add(7*time.Minute + time.Second))
	if la, _ = p.NodeLoad("a"); la.Pods != 0 || la.CPU != 0 {
		t.Errorf("load after an empty report: %+v", la)
	}
	if !la.Fresh(end.Add(7*time.Minute), 3*time.Minute) || la.Fresh(end.Add(20*time.Minute), 3*time.Minute) {
		t.Error("freshness")
	}
}

func TestPeakRingHorizon(t *testing.T) {
	var r peakRing
	for d := range 10 {
		r.add(day0.Add(time.Duration(d)*24*time.Hour+time.Hour), float64(10-d), float64(d))
	}
	now := day0.Add(9*24*time.Hour + 2*time.Hour)
	cpu, mem := r.max(now)
	if cpu != 7 || mem != 9 { // days 3..9: cpu 10-d, mem d
		t.Errorf("max %v %v, want 7 (day 3) and 9 (day 9)", cpu, mem)
	}
	r.add(day0, 100, 100) // older than the horizon: ignored
	if c, _ := r.max(now); c != cpu {
		t.Error("an old sample counted")
	}
	if unsafe.Sizeof(r) > 100 {
		t.Errorf("peakRing takes %d bytes", unsafe.Sizeof(r))
	}
}

// TestHot is the hot-node rule's table: real use strictly above the
// watermark's share of allocatable, either resource; a resource whose
// allocatable was not reported never makes a node hot.
func TestHot(t *testing.T) {
	for _, tc := range []struct {
		name     string
		l        Load
		cpu, mem float64 // the HotExcess wanted
	}{
		{"cold", Load{CPUUsage: 1, CPUAllocatable: 4, MemoryUsage: 1e9, MemoryAllocatable: 8e9}, 0, 0},
		{"at the watermark", Load{CPUUsage: 3.2, CPUAllocatable: 4, MemoryUsage: 6.4e9, MemoryAllocatable: 8e9}, 0, 0},
		{"cpu over", Load{CPUUsage: 3.6, CPUAllocatable: 4, MemoryUsage: 1e9, MemoryAllocatable: 8e9}, 0.4, 0},
		{"memory over", Load{CPUUsage: 1, CPUAllocatable: 4, MemoryUsage: 7.4e9, MemoryAllocatable: 8e9}, 0, 1e9},
		{"no allocatable", Load{CPUUsage: 100, MemoryUsage: 1e12}, 0, 0},
		{"no cpu allocatable", Load{CPUUsage: 100, MemoryUsage: 7.4e9, MemoryAllocatable: 8e9}, 0, 1e9},
		{"NaN allocatable", Load{CPUUsage: 1, CPUAllocatable: math.NaN()}, 0, 0},
	} {
		c, m := tc.l.HotExcess(0.8)
		if math.Abs(c-tc.cpu) > 1e-9 || math.Abs(m-tc.mem) > 1 {
			t.Errorf("%s: excess %v cores %v bytes, want %v %v", tc.name, c, m, tc.cpu, tc.mem)
		}
		if want := tc.cpu > 0 || tc.mem > 0; tc.l.Hot(0.8) != want {
			t.Errorf("%s: hot %v, want %v", tc.name, !want, want)
		}
	}
}

func TestRule(t *testing.T) {
	r := Rule{CPU: 0.8, Memory: 0.5}
	l := Load{CPU: 3, Memory: 3e9, CPUAllocatable: 4, MemoryAllocatable: 8e9}
	for _, tc := range []struct {
		cpu, mem float64
		want     string
	}{{0.2, 0, ""}, {0.21, 0, "cpu"}, {0, 1e9, ""}, {0, 1.1e9, "memory"}, {0.5, 2e9, "cpu"}} {
		if got := r.Exceeds(l, tc.cpu, tc.mem); got != tc.want {
			t.Errorf("pod %v cores %v bytes: %q, want %q", tc.cpu, tc.mem, got, tc.want)
		}
	}
	if got := r.Ratio(l); math.Abs(got-3/3.2) > 1e-9 {
		t.Errorf("ratio %v", got)
	}
	if c, m := r.Excess(Load{CPU: 4, Memory: 5e9, CPUAllocatable: 4, MemoryAllocatable: 8e9}); math.Abs(c-0.8) > 1e-9 || math.Abs(m-1e9) > 1 {
		t.Errorf("excess %v %v", c, m)
	}
	if r.Exceeds(Load{CPU: 100}, 1, 1) != "" {
		t.Error("a node without allocatable was filtered")
	}
	if c, m := r.Excess(Load{CPU: 3, Memory: 9e9, MemoryAllocatable: 8e9}); c != 0 || math.Abs(m-5e9) > 1 {
		t.Errorf("excess without CPU allocatable: %v cores %v bytes, want 0 cores", c, m)
	}
	for _, bad := range []Rule{{0, 0.5}, {0.5, 1.1}, {math.NaN(), 0.5}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}
