package reschedule

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/api/report"
)

const desched = "system:serviceaccount:cgpilot-system:cgpilot-descheduler"

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// fakeCluster is the API server's answers, set by each test.
type fakeCluster struct {
	mu          sync.Mutex
	pods        map[string]*corev1.Pod // ns/name
	pdb         map[string]string      // ns/name -> blocking PDB
	replacement map[types.UID]string   // owner -> node
	nodes       []string
}

func (f *fakeCluster) Pod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pods[ns+"/"+name], nil
}

func (f *fakeCluster) BlockingPDB(_ context.Context, pod *corev1.Pod) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pdb[pod.Namespace+"/"+pod.Name], nil
}

func (f *fakeCluster) Replacement(_ context.Context, _ string, owner types.UID, _ map[string]string, _ time.Time) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.replacement[owner], nil
}

func (f *fakeCluster) NodeNames(context.Context) ([]string, error) { return f.nodes, nil }

var web = report.Workload{Namespace: "shop", Kind: report.KindDeployment, Name: "web"}

// bed is profiles with reports for nodes, a rescheduler over them and a
// fake cluster.
type bed struct {
	t    *testing.T
	p    *profile.Profiles
	r    *Rescheduler
	c    *fakeCluster
	now  time.Time
	reg  *prometheus.Registry
	rule profile.Rule
}

func newBed(t *testing.T, cfg Config) *bed {
	b := &bed{t: t, p: profile.New(profile.Config{HotWatermark: 0.8}), now: t0, reg: prometheus.NewRegistry(),
		c: &fakeCluster{pods: map[string]*corev1.Pod{}, pdb: map[string]string{}, replacement: map[types.UID]string{}}}
	cfg.Rule, cfg.HotWatermark, cfg.DeschedulerUser = profile.Rule{CPU: 0.8, Memory: 0.8}, 0.8, desched
	r, err := New(cfg, b.p, b.c, logr.Discard(), b.reg)
	if err != nil {
		t.Fatal(err)
	}
	r.Now = func() time.Time { return b.now }
	b.r, b.rule = r, cfg.Rule
	return b
}

// send reports node's window ending at end: pods of web using cpu cores
// each (peaks come from earlier windows), the node using nodeCPU.
func (b *bed) send(node string, end time.Time, pods int, podCPU, nodeCPU float64) {
	d := &report.Decoded{Report: report.Report{Node: node, WindowEnd: end, Usage: report.NodeUsage{CPUAllocatable: 4, CPUUsage: nodeCPU,
		MemoryAllocatable: 8 << 30, MemoryUsage: 1 << 30}}}
	if pods > 0 {
		d.Containers = []report.Container{{Key: report.Key{Workload: web, Container: "c"}, Pods: pods, UsageCPU: podCPU * float64(pods), UsageMemory: 1e8 * float64(pods)}}
	}
	b.p.Observe(d, end)
	b.r.Observe(d, end)
}

func (b *bed) pressure() map[string]float64 {
	out := map[string]float64{}
	for _, p := range b.r.Pressure(b.now) {
		out[p.Node] = p.Value
	}
	return out
}

func (b *bed) pod(name, node, ctrlKind string, owner types.UID, mutate ...func(*corev1.Pod)) *corev1.Pod {
	yes := true
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": "web", "pod-template-hash": "7c9"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m")}}}}}}
	if ctrlKind != "" {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: ctrlKind, Name: "web-7c9", UID: owner, Controller: &yes}}
	}
	for _, m := range mutate {
		m(p)
	}
	b.c.mu.Lock()
	b.c.pods[p.Namespace+"/"+p.Name] = p
	b.c.mu.Unlock()
	return p
}

func (b *bed) evict(pod *corev1.Pod, user string) *admissionv1.AdmissionResponse {
	return b.r.Admit(context.Background(), &admissionv1.AdmissionRequest{UID: "x", Namespace: pod.Namespace, Name: pod.Name, Operation: admissionv1.Create,
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, SubResource: "eviction", UserInfo: authnv1.UserInfo{Username: user}})
}

// TestQueueAndPressure: a node whose pods' 7-day peaks break the rule and
// a hot node are queued by the queue pass and read above 0.5; a node with
// room reads its ratio halved; stale, unreported and never-loaded nodes
// read 0.5 (fail-open); outside Hours nothing is queued.
func TestQueueAndPressure(t *testing.T) {
	b := newBed(t, Config{})
	b.c.nodes = []string{"over", "hot", "roomy", "stale", "no-agent"}
	yday := t0.Add(-24 * time.Hour)
	// Yesterday web peaked at 1.0 core per pod.
	b.send("over", yday, 2, 1.0, 2.2)
	b.p.Close(yday.Add(5 * time.Minute))
	b.send("over", t0, 4, 0.1, 0.6)  // 4 pods × 1.0 = 4.0 > 3.2
	b.send("hot", t0, 0, 0, 3.5)     // real use 3.5 > 0.8 × 4
	b.send("roomy", t0, 1, 0.1, 0.5) // 1.0 of 3.2: ratio 0.3125
	b.send("stale", t0.Add(-time.Hour), 4, 1.0, 3.9)
	b.now = t0.Add(time.Minute)
	b.r.RefreshNodes(context.Background())
	b.r.QueuePass(b.now)
	q := b.r.Queue()
	if len(q) != 2 || q[0].Node != "over" || q[0].Reason != ReasonPeak || q[1].Node != "hot" || q[1].Reason != ReasonHot {
		t.Fatalf("queue %+v: want over (peak) then hot", q)
	}
	if math.Abs(q[0].CPU-0.8) > 1e-6 || math.Abs(q[0].Ratio-1.25) > 1e-6 {
		t.Errorf("over: %+v, want 0.8 cores to move (4.0 - 3.2) at ratio 1.25", q[0])
	}
	if math.Abs(q[1].CPU-0.3) > 1e-6 {
		t.Errorf("hot: %+v, want 0.3 cores to move (3.5 - 3.2)", q[1])
	}
	p := b.pressure()
	want := map[string]float64{"over": 0.625, "hot": 3.5 / 3.2 / 2, "roomy": 0.3125 / 2, "stale": 0.5, "no-agent": 0.5}
	for n, v := range want {
		if math.Abs(p[n]-v) > 1e-6 {
			t.Errorf("pressure of %s %v, want %v", n, p[n], v)
		}
	}
	// Outside the hours the pass queues nothing.
	h, err := ParseHours("1-5")
	if err != nil {
		t.Fatal(err)
	}
	b.r.cfg.Hours = h
	b.r.QueuePass(b.now)
	if q := b.r.Queue(); len(q) != 0 {
		t.Errorf("queued outside the hours: %+v", q)
	}
}

// TestAdmit: forbidden pods are refused whatever the queue; an allowed
// move takes its pod's peak off its node's excess and the node leaves the
// queue once enough has moved; caps per node, per workload and per hour
// hold; evictions by others are allowed untouched.
func TestAdmit(t *testing.T) {
	b := newBed(t, Config{PerNode: 3, PerWorkload: 10, PerHour: 4})
	b.c.nodes = []string{"over"}
	yday := t0.Add(-24 * time.Hour)
	b.send("over", yday, 2, 0.5, 1.2)
	b.p.Close(yday.Add(5 * time.Minute))
	b.send("over", t0, 8, 0.1, 1.0) // 8 × 0.5 = 4.0 > 3.2: 0.8 to move
	b.now = t0.Add(time.Minute)
	b.r.QueuePass(b.now)
	for _, tc := range []struct {
		pod  *corev1.Pod
		code string
	}{
		{b.pod("ds", "over", "DaemonSet", "ds"), CodeDaemonSet},
		{b.pod("mirror", "over", "Node", "n", func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }), CodeMirror},
		{b.pod("bare", "over", "", ""), CodeBare},
		{b.pod("scratch", "over", "ReplicaSet", "rs", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}), CodeLocal},
	} {
		resp := b.evict(tc.pod, desched)
		if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "never moves") {
			t.Errorf("%s: %+v, want refused", tc.pod.Name, resp)
		}
		if m := b.r.Moves(1)[0]; m.Code != tc.code || m.State != StateDenied {
			t.Errorf("%s: record %+v, want %s", tc.pod.Name, m, tc.code)
		}
	}
	// Someone else's eviction (kubectl drain) is not ours to judge.
	if resp := b.evict(b.pod("ds2", "over", "DaemonSet", "ds"), "kubernetes-admin"); !resp.Allowed {
		t.Errorf("another user's eviction refused: %+v", resp)
	}
	// Each web pod counts 0.5 cores of peak: two moves clear 0.8.
	for i := range 2 {
		if resp := b.evict(b.pod(fmt.Sprintf("web-%d", i), "over", "ReplicaSet", "rs"), desched); !resp.Allowed {
			t.Fatalf("move %d refused: %+v", i, resp.Result)
		}
		m := b.r.Moves(1)[0]
		if m.State != StateAdmitted || m.Reason != ReasonPeak || m.PeakCPU != 0.5 || m.Workload.Name != "web-7c9" && m.Workload != web {
			t.Errorf("record %+v", m)
		}
	}
	if q := b.r.Queue(); len(q) != 0 {
		t.Errorf("queue after 1.0 core of peaks moved: %+v", q)
	}
	if p := b.pressure(); p["over"] > 0.5 {
		t.Errorf("a node whose excess was moved still reads %v", p["over"])
	}
	// Caps: a third move from over is allowed (3 per node), a fourth not.
	if resp := b.evict(b.pod("web-2", "over", "ReplicaSet", "rs"), desched); !resp.Allowed {
		t.Errorf("third move: %+v", resp.Result)
	}
	resp := b.evict(b.pod("web-3", "over", "ReplicaSet", "rs"), desched)
	if resp.Allowed || b.r.Moves(1)[0].Code != CodeCapNode {
		t.Errorf("fourth move from one node: %+v %+v", resp, b.r.Moves(1)[0])
	}
	// Per hour: 3 admitted, one more from another node fits, then none.
	if resp := b.evict(b.pod("web-4", "other", "ReplicaSet", "rs"), desched); !resp.Allowed {
		t.Errorf("fourth move in the hour: %+v", resp.Result)
	}
	if resp := b.evict(b.pod("web-5", "other", "ReplicaSet", "rs"), desched); resp.Allowed || b.r.Moves(1)[0].Code != CodeCapHour {
		t.Errorf("fifth move in the hour: %+v", b.r.Moves(1)[0])
	}
	// An hour later the caps are free again.
	b.now = b.now.Add(61 * time.Minute)
	if resp := b.evict(b.pod("web-6", "over", "ReplicaSet", "rs"), desched); !resp.Allowed {
		t.Errorf("an hour later: %+v", resp.Result)
	}
	if got := testutil.ToFloat64(b.r.m.evictions.WithLabelValues("denied", CodeCapNode)); got != 1 {
		t.Errorf("cap_node denials %v", got)
	}
	// Per workload.
	b2 := newBed(t, Config{PerWorkload: 1})
	b2.pod("a", "n1", "ReplicaSet", "rs")
	if resp := b2.evict(b2.c.pods["shop/a"], desched); !resp.Allowed {
		t.Fatal(resp.Result)
	}
	if resp := b2.evict(b2.pod("b", "n2", "ReplicaSet", "rs"), desched); resp.Allowed || b2.r.Moves(1)[0].Code != CodeCapWorkload {
		t.Errorf("second move of one workload: %+v", b2.r.Moves(1)[0])
	}
}

// TestCheckOutcomes follows admitted moves: one a PodDisruptionBudget kept
// (failed, its amount re-queued), one moved to another node, one placed
// back on its node, one never placed (unresolved after MoveTimeout); the
// daily report counts them.
func TestCheckOutcomes(t *testing.T) {
	b := newBed(t, Config{PerNode: 10, PerWorkload: 10, MoveTimeout: 10 * time.Minute})
	yday := t0.Add(-24 * time.Hour)
	b.send("over", yday, 2, 0.5, 1.2)
	b.p.Close(yday.Add(5 * time.Minute))
	b.send("over", t0, 9, 0.1, 1.0) // 4.5 > 3.2: 1.3 to move
	b.now = t0.Add(time.Minute)
	b.r.QueuePass(b.now)
	pods := map[string]*corev1.Pod{}
	for _, n := range []string{"kept", "moved", "back", "lost"} {
		pods[n] = b.pod(n, "over", "ReplicaSet", types.UID("rs-"+n))
		if resp := b.evict(pods[n], desched); !resp.Allowed {
			t.Fatal(resp.Result)
		}
	}
	if q := b.r.Queue(); len(q) != 0 {
		t.Fatalf("queue %+v: 2.0 cores admitted against 1.3", q)
	}
	b.c.mu.Lock()
	b.c.pdb["shop/kept"] = "web-pdb"
	for _, n := range []string{"moved", "back", "lost"} {
		delete(b.c.pods, "shop/"+n)
	}
	b.c.replacement["rs-moved"], b.c.replacement["rs-back"] = "roomy", "over"
	b.c.mu.Unlock()
	b.now = b.now.Add(30 * time.Second)
	b.r.Check(context.Background())
	states := map[string]Move{}
	for _, m := range b.r.Moves(10) {
		states[m.Pod] = m
	}
	if m := states["kept"]; m.State != StateFailed || m.Code != "pdb" || !strings.Contains(m.Detail, "web-pdb") {
		t.Errorf("kept: %+v", m)
	}
	if m := states["moved"]; m.State != StateMoved || m.To != "roomy" {
		t.Errorf("moved: %+v", m)
	}
	if m := states["back"]; m.State != StateFailed || m.Code != "placed_back" {
		t.Errorf("back: %+v", m)
	}
	if m := states["lost"]; m.State != StateEvicted {
		t.Errorf("lost: %+v", m)
	}
	// The first three moves cleared over's 1.3 cores (3 × 0.5; the fourth
	// found it dequeued and counts for no reason); kept's 0.5 went back:
	// over is queued again with 0.3 to move and reads above 0.5.
	if e := b.r.queue["over"]; e == nil || e.Moves != 3 || math.Abs(e.CPU-(1.3-1.5+0.5)) > 1e-6 {
		t.Errorf("over's entry %+v after a failed move", e)
	}
	if p := b.pressure()["over"]; p <= 0.5 {
		t.Errorf("over re-queued reads %v", p)
	}
	b.now = b.now.Add(11 * time.Minute)
	b.r.Check(context.Background())
	if m := b.r.Moves(10)[0]; m.Pod != "lost" || m.State != StateUnresolved {
		t.Errorf("lost after the timeout: %+v", m)
	}
	rep := b.r.ReportFor("d", t0, t0.Add(24*time.Hour))
	if rep.Asked != 4 || rep.Moved != 1 || rep.Failed != 2 || rep.Unresolved != 1 || math.Abs(rep.SuccessRate-0.25) > 1e-9 ||
		rep.Failures["pdb"] != 1 || rep.Failures["placed_back"] != 1 || rep.Failures["not_placed"] != 1 || len(rep.UnresolvedPods) != 3 {
		t.Errorf("report %+v", rep)
	}
	if got := testutil.ToFloat64(b.r.m.outcomes.WithLabelValues(OutcomeFailed)); got != 2 {
		t.Errorf("failed outcomes %v", got)
	}
	hours := b.r.Hourly(b.now, 24)
	if last := hours[23]; last.Moved+last.Failed != 4 || hours[0].Hour.After(hours[23].Hour) {
		t.Errorf("hourly %+v", last)
	}
}

// TestEmergency: a report with real CPU above the emergency watermark
// queues its node at once, outside the hours too; a later report under
// the hot watermark drops it.
func TestEmergency(t *testing.T) {
	h, _ := ParseHours("3-4")
	b := newBed(t, Config{Hours: h})
	b.send("busy", t0, 2, 0.5, 3.0)
	if len(b.r.Queue()) != 0 {
		t.Fatal("queued at 75 %")
	}
	b.send("busy", t0.Add(time.Minute), 2, 1.5, 3.8) // 95 %
	q := b.r.Queue()
	if len(q) != 1 || q[0].Reason != ReasonEmergency || math.Abs(q[0].CPU-0.6) > 1e-6 {
		t.Fatalf("queue %+v: want busy, emergency, 0.6 core to move", q)
	}
	b.now = t0.Add(time.Minute)
	if p := b.pressure()["busy"]; p <= 0.5 {
		t.Errorf("pressure %v", p)
	}
	// The queue pass keeps it (outside the hours too).
	b.r.QueuePass(b.now)
	if len(b.r.Queue()) != 1 {
		t.Error("the queue pass dropped an emergency")
	}
	b.send("busy", t0.Add(2*time.Minute), 2, 0.5, 2.0)
	if len(b.r.Queue()) != 0 {
		t.Error("an emergency over is still queued")
	}
}

// TestEmergencyServedStillHot: once an emergency's excess has all been
// admitted, a node left between the hot and the emergency watermarks is
// queued again by the queue pass (as hot), not held by its closed
// emergency (the 500-node bench left such nodes hot and unqueued).
func TestEmergencyServedStillHot(t *testing.T) {
	b := newBed(t, Config{PerNode: 10, PerWorkload: 10, PerHour: 10})
	b.c.nodes = []string{"busy"}
	b.send("busy", t0, 4, 0.9, 3.8) // 95 %: 0.6 core to move
	if q := b.r.Queue(); len(q) != 1 || q[0].Reason != ReasonEmergency {
		t.Fatalf("queue %+v: want busy, emergency", q)
	}
	b.now = t0.Add(10 * time.Second)
	if resp := b.evict(b.pod("web-1", "busy", "ReplicaSet", "rs"), desched); !resp.Allowed {
		t.Fatalf("eviction refused: %+v", resp.Result)
	}
	if q := b.r.Queue(); len(q) != 0 {
		t.Fatalf("queue %+v: the admitted move (0.9 core) covers the emergency", q)
	}
	// The next window shows the move and the node still above the hot
	// watermark (3 × 0.9 + 0.7 = 3.4 > 3.2), under the emergency one.
	b.send("busy", t0.Add(2*report.DefaultPeriod), 3, 0.9, 3.4)
	b.now = t0.Add(2 * report.DefaultPeriod)
	b.r.QueuePass(b.now)
	q := b.r.Queue()
	if len(q) != 1 || q[0].Reason != ReasonHot || math.Abs(q[0].CPU-0.2) > 1e-6 {
		t.Fatalf("queue %+v: want busy queued hot with 0.2 core to move", q)
	}
}

// TestQueryWithThePrometheusClient asks the endpoint with client_golang's
// API client, as the descheduler does, and checks what it gets: a vector
// of one sample per node with label instance in [0, 1].
func TestQueryWithThePrometheusClient(t *testing.T) {
	b := newBed(t, Config{})
	b.c.nodes = []string{"a", "b"}
	b.r.RefreshNodes(context.Background())
	b.send("a", t0, 1, 0.1, 3.9)
	b.now = t0.Add(time.Minute)
	b.p.RefreshLoads(b.now)
	b.r.QueuePass(b.now)
	mux := http.NewServeMux()
	mux.Handle(PathQuery, b.r.Query())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := promapi.NewClient(promapi.Config{Address: srv.URL + "/prometheus"})
	if err != nil {
		t.Fatal(err)
	}
	res, _, _, err := promv1.NewAPI(c).Query(context.Background(), Series, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	vec, ok := res.(model.Vector)
	if !ok || len(vec) != 2 {
		t.Fatalf("result %v", res)
	}
	got := map[string]float64{}
	for _, s := range vec {
		got[string(s.Metric["instance"])] = float64(s.Value)
	}
	if got["a"] <= 0.5 || got["a"] > 1 || got["b"] != 0.5 {
		t.Errorf("values %v: want a queued (hot) above 0.5, b unknown at 0.5", got)
	}
	if _, _, _, err := promv1.NewAPI(c).Query(context.Background(), "up", time.Now()); err == nil || !strings.Contains(err.Error(), "only the instant query") {
		t.Errorf("another query: %v", err)
	}
	st := b.r.StatusFor(httptest.NewRequest(http.MethodGet, PathStatus+"?limit=5", nil))
	if !st.Enabled || len(st.Queue) != 1 || len(st.Days) != 7 || len(st.Hourly) != 24 {
		t.Errorf("status %+v", st)
	}
	// The webhook's HTTP side: a body too large or not a review is refused.
	srv2 := httptest.NewServer(b.r.Evictions())
	defer srv2.Close()
	r2, _ := http.Post(srv2.URL+PathEvictions, "application/json", strings.NewReader(`{"request":`+strings.Repeat(" ", maxReviewBytes)+`}`))
	if r2.StatusCode != http.StatusBadRequest {
		t.Errorf("oversized review: %d", r2.StatusCode)
	}
	form := url.Values{"query": {strings.Repeat("x", 2*maxQueryBytes)}}
	r3, _ := http.PostForm(srv.URL+PathQuery, form)
	if r3.StatusCode != http.StatusBadRequest {
		t.Errorf("oversized query: %d", r3.StatusCode)
	}
}

func TestParseQueryAndHours(t *testing.T) {
	for q, ok := range map[string]bool{Series: true, " " + Series + " {} ": true, Series + "{}": true, Series + `{a="b"}`: false,
		"sum(" + Series + ")": false, "": false, Series + "x": false} {
		if ParseQuery(q) != ok {
			t.Errorf("%q: %v", q, !ok)
		}
	}
	for _, tc := range []struct {
		s    string
		in   []int
		out  []int
		fail bool
	}{
		{"", []int{0, 13, 23}, nil, false},
		{"22-6", []int{22, 23, 0, 5}, []int{6, 12, 21}, false},
		{"1-3,12", []int{1, 2, 12}, []int{3, 11, 13}, false},
		{"0-24", []int{0, 12, 23}, nil, false},
		{"5-5", nil, nil, true},
		{"25", nil, nil, true},
		{"a-b", nil, nil, true},
	} {
		h, err := ParseHours(tc.s)
		if (err != nil) != tc.fail {
			t.Errorf("%q: %v", tc.s, err)
			continue
		}
		at := func(hr int) time.Time { return time.Date(2026, 1, 1, hr, 30, 0, 0, time.UTC) }
		for _, hr := range tc.in {
			if !h.Contains(at(hr)) {
				t.Errorf("%q should hold %d", tc.s, hr)
			}
		}
		for _, hr := range tc.out {
			if h.Contains(at(hr)) {
				t.Errorf("%q should not hold %d", tc.s, hr)
			}
		}
	}
}

func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{Series, Series + "{}", "up", Series + "{a=\"b\"}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if ParseQuery(q) && !strings.Contains(q, Series) {
			t.Errorf("accepted %q", q)
		}
	})
}

// FuzzAdmissionBody feeds arbitrary bodies to the webhook: it answers 400
// or a review, never panics, and a body that is not a descheduler's
// eviction never records a move.
func FuzzAdmissionBody(f *testing.F) {
	f.Add(`{"request":{"uid":"1","name":"p","namespace":"n","operation":"CREATE","resource":{"resource":"pods"},"subResource":"eviction","userInfo":{"username":"u"}}}`)
	f.Add(`{}`)
	f.Add(`{"request":null}`)
	f.Fuzz(func(t *testing.T, body string) {
		b := newBed(t, Config{})
		rec := httptest.NewRecorder()
		b.r.Evictions().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, PathEvictions, strings.NewReader(body)))
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Errorf("status %d", rec.Code)
		}
		if !strings.Contains(body, desched) && len(b.r.Moves(1)) != 0 {
			t.Errorf("a move recorded from %q", body)
		}
	})
}

// TestAdmitPDBAndRepeats: an eviction a PodDisruptionBudget will refuse
// is allowed (the API server refuses it with its own message) but is no
// move: it takes nothing off the queue and no cap; asked again, it and a
// capped refusal each keep one record per pod and hour, counting repeats.
func TestAdmitPDBAndRepeats(t *testing.T) {
	b := newBed(t, Config{PerNode: 1, PerWorkload: 10})
	yday := t0.Add(-24 * time.Hour)
	b.send("over", yday, 2, 0.5, 1.2)
	b.p.Close(yday.Add(5 * time.Minute))
	b.send("over", t0, 8, 0.1, 1.0)
	b.now = t0.Add(time.Minute)
	b.r.QueuePass(b.now)
	api := b.pod("api-0", "over", "ReplicaSet", "rs-api")
	b.c.pdb["shop/api-0"] = "api"
	for range 3 {
		if resp := b.evict(api, desched); !resp.Allowed {
			t.Fatalf("a PDB-covered eviction refused by the webhook: %+v", resp.Result)
		}
	}
	moves := b.r.Moves(10)
	if len(moves) != 1 || moves[0].State != StateFailed || moves[0].Code != "pdb" || moves[0].Repeats != 2 {
		t.Fatalf("records %+v: want one pdb failure asked 3 times", moves)
	}
	if q := b.r.Queue(); len(q) != 1 || math.Abs(q[0].CPU-0.8) > 1e-6 || q[0].Moves != 0 {
		t.Errorf("queue %+v: a refused eviction took something off", q)
	}
	// The per-node cap (1) is still free: web-0 moves, web-1 is refused,
	// asked again it keeps its one record.
	if resp := b.evict(b.pod("web-0", "over", "ReplicaSet", "rs"), desched); !resp.Allowed {
		t.Fatalf("web-0: %+v", resp.Result)
	}
	w1 := b.pod("web-1", "over", "ReplicaSet", "rs")
	for range 4 {
		if resp := b.evict(w1, desched); resp.Allowed {
			t.Fatal("web-1 allowed past the per-node cap")
		}
	}
	if m := b.r.Moves(1)[0]; m.Pod != "web-1" || m.Code != CodeCapNode || m.Repeats != 3 || len(b.r.Moves(10)) != 3 {
		t.Errorf("latest record %+v of %d", m, len(b.r.Moves(10)))
	}
	if got := testutil.ToFloat64(b.r.m.evictions.WithLabelValues("denied", CodeCapNode)); got != 4 {
		t.Errorf("the metric counts every refusal: %v", got)
	}
}

// TestOff: with rescheduling off the descheduler's evictions are refused
// saying so, anybody else's allowed, and its query fails (so it moves
// nothing).
func TestOff(t *testing.T) {
	h := OffEvictions(desched)
	for user, allowed := range map[string]bool{desched: false, "system:admin": true} {
		body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","name":"p","namespace":"n","operation":"CREATE",` +
			`"resource":{"resource":"pods"},"subResource":"eviction","userInfo":{"username":"` + user + `"}}}`
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, PathEvictions, strings.NewReader(body)))
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(rec.Body).Decode(&review); err != nil || review.Response == nil || review.Response.UID != "u1" ||
			review.Response.Allowed != allowed || (!allowed && !strings.Contains(review.Response.Result.Message, "--reschedule")) {
			t.Errorf("%s: %+v %v", user, review.Response, err)
		}
	}
	srv := httptest.NewServer(OffQuery())
	defer srv.Close()
	c, _ := promapi.NewClient(promapi.Config{Address: srv.URL + "/prometheus"})
	if _, _, _, err := promv1.NewAPI(c).Query(context.Background(), Series, time.Now()); err == nil || !strings.Contains(err.Error(), "rescheduling is off") {
		t.Errorf("query while off: %v", err)
	}
}
