package extender

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/api/report"
)

// TestScoresFormula checks the score against the formula worked
// by hand for a CPU-heavy pod on two nodes.
func TestScoresFormula(t *testing.T) {
	cpuFree := Node{CPUAllocatable: 8, CPUUsed: 2, MemoryAllocatable: 32e9, MemoryUsed: 28e9, Known: true} // 6 cores, 4 GB free
	memFree := Node{CPUAllocatable: 8, CPUUsed: 7, MemoryAllocatable: 32e9, MemoryUsed: 8e9, Known: true}  // 1 core, 24 GB free
	nodes := []Node{cpuFree, memFree}
	// Average free: 3.5 cores, 14e9 bytes. Pod: 1 core, 1e9 bytes.
	d := Demand{CPU: 1, Memory: 1e9}
	dc, dm := 1/3.5, 1e9/14e9
	mean := (dc + dm) / 2
	wc, wm := dc/mean, dm/mean
	want := []float64{
		(6.0/8)*10*wc + (4.0/32)*10*wm,
		(1.0/8)*10*wc + (24.0/32)*10*wm,
	}
	got := Scores(d, nodes, nil)
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Errorf("node %d: score %v, want %v", i, got[i], want[i])
		}
	}
	if got[0] <= got[1] {
		t.Errorf("CPU-heavy pod: CPU-free node %v should beat memory-free %v", got[0], got[1])
	}
	// A memory-heavy pod prefers the other node.
	got = Scores(Demand{CPU: 0.05, Memory: 8e9}, nodes, nil)
	if got[1] <= got[0] {
		t.Errorf("memory-heavy pod: %v", got)
	}
	// Weights average 1; no demand weighs both 1.
	if wc, wm := Weights(Demand{CPU: 3, Memory: 5e9}, 2, 1e10); math.Abs((wc+wm)/2-1) > 1e-12 {
		t.Errorf("weights %v %v do not average 1", wc, wm)
	}
	if wc, wm := Weights(Demand{}, 2, 1e10); wc != 1 || wm != 1 {
		t.Errorf("no demand: %v %v", wc, wm)
	}
	// An unknown node scores the known candidates' mean free fraction.
	got = Scores(d, []Node{cpuFree, memFree, {}}, nil)
	mid := (got[0] + got[1]) / 2
	if math.Abs(got[2]-mid) > 1e-9 {
		t.Errorf("unknown node %v, want the mean %v", got[2], mid)
	}
	// Overloaded nodes clamp at 0.
	if s := Scores(d, []Node{{CPUAllocatable: 1, CPUUsed: 3, MemoryAllocatable: 1, MemoryUsed: 2, Known: true}}, nil); s[0] != 0 {
		t.Errorf("overloaded node %v", s[0])
	}
}

func TestHandler(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	p := profile.New(profile.Config{})
	for _, n := range []struct {
		name     string
		cpu, mem float64
	}{{"cpu-free", 1, 28e9}, {"mem-free", 7, 4e9}} {
		p.Observe(&report.Decoded{Report: report.Report{Node: n.name, WindowEnd: now, Usage: report.NodeUsage{
			CPUAllocatable: 8, CPUUsage: n.cpu, MemoryAllocatable: 32e9, MemoryUsage: n.mem}}}, now)
	}
	// A workload known to use 2 cores and little memory per pod.
	hungry := report.Workload{Namespace: "ml", Kind: report.KindDeployment, Name: "train"}
	p.Observe(&report.Decoded{Report: report.Report{Node: "cpu-free", WindowEnd: now, Usage: report.NodeUsage{
		CPUAllocatable: 8, CPUUsage: 1, MemoryAllocatable: 32e9, MemoryUsage: 28e9},
		Containers: []report.Container{{Key: report.Key{Workload: hungry, Container: "c"}, Pods: 1, UsageCPU: 2, UsageMemory: 1e8}}}}, now)
	p.Close(now.Add(3 * time.Minute))
	h := New(p, nil)
	h.Now = func() time.Time { return now }
	srv := httptest.NewServer(h)
	defer srv.Close()
	ask := func(pod *corev1.Pod) extenderv1.HostPriorityList {
		names := []string{"cpu-free", "mem-free", "new-node"}
		body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
		resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out extenderv1.HostPriorityList
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out) != 3 {
			t.Fatalf("answer %v %v", out, err)
		}
		return out
	}
	yes := true
	train := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", GenerateName: "train-5d8f-", Labels: map[string]string{"pod-template-hash": "5d8f"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "train-5d8f", Controller: &yes}}}}
	if s := ask(train); s[0].Score <= s[1].Score {
		t.Errorf("CPU-hungry workload: %+v", s)
	}
	// A pod of an unknown workload asking for much memory goes by its requests.
	big := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "cache"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("16Gi")}}}}}}
	// mem-free has 28 GB free against 4 GB: it must win.
	if s := ask(big); s[1].Score <= s[0].Score {
		t.Errorf("memory-heavy pod: %+v", s)
	}
	resp, _ := http.Post(srv.URL, "application/json", bytes.NewReader([]byte("{")))
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad args: %d", resp.StatusCode)
	}
}
