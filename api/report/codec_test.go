package report

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/recommend"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

var webApp = Key{Workload: Workload{Namespace: "shop", Kind: KindDeployment, Name: "web"}, Container: "app"}

// sampleReport builds a small valid report through the Builder.
func sampleReport(t testing.TB) *Report {
	t.Helper()
	b, err := NewBuilder(BuilderConfig{Node: "node-1", SampleInterval: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b.Describe(webApp, ContainerInfo{Current: Resources{CPURequest: 0.5, MemoryRequest: 256 << 20}, Original: Resources{CPURequest: 1, MemoryRequest: 512 << 20},
		QOS: "Burstable", Policy: "default", Mode: "InPlace", Preset: "cgpilot-balanced", Adjustable: true,
		Local: &Recommendation{CPU: Estimate{Target: 0.4}, Memory: Estimate{Target: 300 << 20}}})
	for i := range 6 {
		ts := t0.Add(time.Duration(i) * 10 * time.Second)
		b.Sample(webApp, "web-1", ts, 0.2+0.01*float64(i), 2e8)
		b.Sample(webApp, "web-2", ts, 0.3, 2.2e8)
		b.NodeSample(ts, 1.5, 4e9)
	}
	b.SetNode(NodeUsage{CPUCapacity: 4, CPUAllocatable: 3.8, MemoryCapacity: 16e9, MemoryAllocatable: 15e9, CPURequests: 2, MemoryRequests: 6e9, Pods: 12})
	b.OOM(OOMKill{Key: webApp, Pod: "web-1", Time: t0.Add(5 * time.Second), UsageBytes: 3e8, LimitBytes: 3e8})
	b.Adjusted(Adjustment{Key: webApp, Pod: "web-2", Time: t0.Add(7 * time.Second), Resource: ResourceCPU, From: 1, To: 0.5, Reason: ReasonRecommendation})
	rs := b.Cut(t0.Add(time.Minute))
	if len(rs) != 1 {
		t.Fatalf("Cut gave %d reports, want 1", len(rs))
	}
	r := rs[0]
	r.APIVersion, r.Agent, r.Sequence = APIVersion, Agent{ID: "a1", Started: t0.Add(-time.Hour)}, 1
	return r
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	r := sampleReport(t)
	for _, gz := range []bool{false, true} {
		body, err := Encode(r, gz)
		if err != nil {
			t.Fatal(err)
		}
		enc := ""
		if gz {
			enc = "gzip"
		}
		d, err := Decode(bytes.NewReader(body), enc)
		if err != nil {
			t.Fatalf("gzip=%v: %v", gz, err)
		}
		if d.Node != "node-1" || len(d.Containers) != 1 || len(d.Counts) != 1 || d.Counts[0].CPU.Total() != 12 || d.Counts[0].Memory.Total() != 12 {
			t.Fatalf("gzip=%v: decoded %+v counts %+v", gz, d.Report, d.Counts)
		}
		if d.Containers[0].Key != webApp || d.Containers[0].Pods != 2 || len(d.OOMKills) != 1 || len(d.Adjustments) != 1 {
			t.Errorf("gzip=%v: container %+v", gz, d.Containers[0])
		}
		t.Logf("gzip=%v: %d bytes for one container of two pods", gz, len(body))
	}
}

// TestEncodeAsMarshal: Encode's body, written a container at a time,
// holds what json.Marshal of the report does (compared as decoded JSON
// values), for no containers, nil containers and a thousand; and it
// allocates less than twice the body (json.Marshal of the whole report
// allocated 4.8 times it).
func TestEncodeAsMarshal(t *testing.T) {
	many := sampleReport(t)
	c := many.Containers[0]
	many.Containers = nil
	for i := range 1000 {
		c.Name = fmt.Sprintf("web-%04d", i)
		c.UsageCPU = float64(i) / 1000
		many.Containers = append(many.Containers, c)
	}
	none := sampleReport(t)
	none.Containers = []Container{}
	null := sampleReport(t)
	null.Containers = nil
	html := sampleReport(t)
	html.Containers[0].Reason = "<&>"
	for name, r := range map[string]*Report{"one": sampleReport(t), "html": html, "many": many, "none": none, "nil": null} {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, gz := range []bool{false, true} {
			body, err := Encode(r, gz)
			if err != nil {
				t.Fatalf("%s gzip=%v: %v", name, gz, err)
			}
			if gz {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			var got, exp any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("%s gzip=%v: not JSON: %v\n%.300s", name, gz, err, body)
			}
			if err := json.Unmarshal(want, &exp); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, exp) {
				t.Errorf("%s gzip=%v: differs from json.Marshal\n got %.400s\nwant %.400s", name, gz, body, want)
			}
		}
	}
	if raceEnabled {
		t.Log("allocation bound not checked under the race detector (its sync.Pool drops items)")
		return
	}
	body, _ := Encode(many, false)
	// Two collections empty encoding/json's buffer pool, as the minute
	// between two reports does in the agent.
	runtime.GC()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	if _, err := Encode(many, false); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 2*uint64(len(body)) {
		t.Errorf("Encode of %d containers allocated %d bytes for a %d-byte body (%.1f×), want < 2×", len(many.Containers), alloc, len(body), float64(alloc)/float64(len(body)))
	} else {
		t.Logf("%d containers: %d-byte body, %d bytes allocated (%.2f×)", len(many.Containers), len(body), alloc, float64(alloc)/float64(len(body)))
	}
}

func TestDecodeRejects(t *testing.T) {
	cpuCounts, _ := recommend.NewCounts(recommend.CPUHistogramOptions())
	cpuCounts.Add(1)
	memOnly, _ := recommend.NewCounts(recommend.MemoryHistogramOptions())
	memOnly.Add(1e8)
	memOnly.Add(1e8)
	for _, tc := range []struct {
		name string
		mod  func(r *Report)
		want error
	}{
		{"version", func(r *Report) { r.APIVersion = "report.cgpilot.io/v0" }, ErrMalformed},
		{"node", func(r *Report) { r.Node = "Node_1" }, ErrMalformed},
		{"empty node", func(r *Report) { r.Node = "" }, ErrMalformed},
		{"agent id", func(r *Report) { r.Agent.ID = "a b" }, ErrMalformed},
		{"sequence 0", func(r *Report) { r.Sequence = 0 }, ErrMalformed},
		{"period", func(r *Report) { r.PeriodSeconds = 0 }, ErrMalformed},
		{"window misaligned", func(r *Report) { r.WindowEnd = r.WindowEnd.Add(time.Second) }, ErrMalformed},
		{"windows", func(r *Report) { r.Windows = MaxWindows + 1 }, ErrMalformed},
		{"negative usage", func(r *Report) { r.Usage.CPUUsage = -1 }, ErrMalformed},
		{"namespace", func(r *Report) { r.Containers[0].Namespace = "-shop" }, ErrMalformed},
		{"kind", func(r *Report) { r.Containers[0].Kind = "1Deployment" }, ErrMalformed},
		{"container", func(r *Report) { r.Containers[0].Container = strings.Repeat("a", 64) }, ErrMalformed},
		{"duplicate", func(r *Report) { r.Containers = append(r.Containers, r.Containers[0]) }, ErrMalformed},
		{"no pods", func(r *Report) { r.Containers[0].Pods = 0 }, ErrMalformed},
		{"qos", func(r *Report) { r.Containers[0].QOS = "Gold" }, ErrMalformed},
		{"bad counts", func(r *Report) { r.Containers[0].CPU = []byte{1, 2, 3} }, ErrMalformed},
		{"counts layout", func(r *Report) { r.Containers[0].CPU = memOnly.AppendBinary(nil) }, ErrMalformed},
		{"memory over cpu", func(r *Report) {
			r.Containers[0].CPU, r.Containers[0].Memory = cpuCounts.AppendBinary(nil), memOnly.AppendBinary(nil)
		}, ErrMalformed},
		{"oom pod", func(r *Report) { r.OOMKills[0].Pod = "" }, ErrMalformed},
		{"adjustment resource", func(r *Report) { r.Adjustments[0].Resource = "gpu" }, ErrMalformed},
		{"adjustment error size", func(r *Report) { r.Adjustments[0].Error = strings.Repeat("x", 2000) }, ErrOversized},
		{"too many containers", func(r *Report) {
			c := r.Containers[0]
			r.Containers = nil
			for i := range MaxContainers + 1 {
				c.Container = "c" + strings.Repeat("x", i%50)
				r.Containers = append(r.Containers, c)
			}
		}, ErrOversized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sampleReport(t)
			tc.mod(r)
			body, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Decode(bytes.NewReader(body), ""); !errors.Is(err, tc.want) {
				t.Errorf("Decode: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestDecodeBounds(t *testing.T) {
	// Over the wire bound.
	big := bytes.Repeat([]byte(" "), MaxWireBytes+10)
	if _, err := Decode(bytes.NewReader(big), ""); !errors.Is(err, ErrOversized) {
		t.Errorf("%d bytes: %v, want ErrOversized", len(big), err)
	}
	// A gzip bomb: small on the wire, past MaxBodyBytes inflated.
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(`{"apiVersion":"`))
	chunk := bytes.Repeat([]byte("a"), 1<<20)
	for range MaxBodyBytes/len(chunk) + 2 {
		zw.Write(chunk)
	}
	zw.Close()
	if buf.Len() > MaxWireBytes {
		t.Fatalf("bomb of %d bytes is not small", buf.Len())
	}
	if _, err := Decode(&buf, "gzip"); !errors.Is(err, ErrOversized) {
		t.Errorf("gzip bomb: %v, want ErrOversized", err)
	}
	for name, tc := range map[string]struct{ body, enc string }{
		"not json":      {"hello", ""},
		"two values":    {`{} {}`, ""},
		"not gzip":      {"plain", "gzip"},
		"encoding":      {"{}", "br"},
		"empty":         {"", ""},
		"wrong type":    {`{"containers": 5}`, ""},
		"truncated obj": {`{"apiVersion": "report.cgpilot.io/v1"`, ""},
	} {
		if _, err := Decode(strings.NewReader(tc.body), tc.enc); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	r := sampleReport(f)
	body, _ := Encode(r, false)
	f.Add(body)
	f.Add([]byte(`{"apiVersion":"report.cgpilot.io/v1"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Decode(bytes.NewReader(data), "")
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrOversized) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if len(d.Counts) != len(d.Containers) {
			t.Fatalf("%d counts for %d containers", len(d.Counts), len(d.Containers))
		}
		// What decodes encodes and decodes again.
		again, err := Encode(&d.Report, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(bytes.NewReader(again), ""); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func TestWorkloadOf(t *testing.T) {
	known := map[string]*Owner{
		"ReplicaSet/web-7d9f": {Kind: KindDeployment, Name: "web"},
		"ReplicaSet/orphan":   nil,
		"Job/backup-2917":     {Kind: KindCronJob, Name: "backup"},
		"Job/once":            nil,
	}
	parent := func(kind, name string) (*Owner, bool) {
		o, ok := known[kind+"/"+name]
		return o, ok
	}
	hash := map[string]string{"pod-template-hash": "7d9f"}
	for _, tc := range []struct {
		name   string
		owner  *Owner
		labels map[string]string
		parent ParentFunc
		want   Workload
	}{
		{"bare pod", nil, nil, parent, Workload{"ns", KindPod, "p"}},
		{"deployment via lookup", &Owner{KindReplicaSet, "web-7d9f"}, nil, parent, Workload{"ns", KindDeployment, "web"}},
		{"replicaset without owner", &Owner{KindReplicaSet, "orphan"}, nil, parent, Workload{"ns", KindReplicaSet, "orphan"}},
		{"deployment by hash", &Owner{KindReplicaSet, "web-7d9f"}, hash, nil, Workload{"ns", KindDeployment, "web"}},
		{"unknown rs, other hash", &Owner{KindReplicaSet, "web-7d9f"}, map[string]string{"pod-template-hash": "zzz"}, nil, Workload{"ns", KindReplicaSet, "web-7d9f"}},
		{"cronjob", &Owner{KindJob, "backup-2917"}, nil, parent, Workload{"ns", KindCronJob, "backup"}},
		{"plain job", &Owner{KindJob, "once"}, nil, parent, Workload{"ns", KindJob, "once"}},
		{"job not known", &Owner{KindJob, "x-1"}, nil, parent, Workload{"ns", KindJob, "x-1"}},
		{"statefulset", &Owner{KindStatefulSet, "db"}, nil, parent, Workload{"ns", KindStatefulSet, "db"}},
		{"daemonset", &Owner{KindDaemonSet, "agent"}, nil, nil, Workload{"ns", KindDaemonSet, "agent"}},
		{"custom", &Owner{"Rollout", "r"}, nil, nil, Workload{"ns", "Rollout", "r"}},
		{"empty owner", &Owner{}, nil, nil, Workload{"ns", KindPod, "p"}},
	} {
		if got := WorkloadOf("ns", "p", tc.owner, tc.labels, tc.parent); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestBuilderRefusesWhatTheAggregatorWould: an event the aggregator's
// decoder would refuse is not recorded (its error says why), so it never
// spoils the window's report.
func TestBuilderRefusesWhatTheAggregatorWould(t *testing.T) {
	b, err := NewBuilder(BuilderConfig{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	b.Sample(webApp, "web-1", t0.Add(time.Second), 0.5, 1e8)
	for _, err := range []error{
		b.Adjusted(Adjustment{Key: webApp, Pod: "shop/web-1", Time: t0, Resource: ResourceCPU, From: 1, To: 0.5, Reason: ReasonRecommendation}),
		b.Adjusted(Adjustment{Key: webApp, Pod: "web-1", Resource: ResourceCPU, From: 1, To: 0.5, Reason: ReasonRecommendation}),
		b.Adjusted(Adjustment{Key: webApp, Pod: "web-1", Time: t0, Resource: "gpu", From: 1, To: 0.5, Reason: ReasonRecommendation}),
		b.OOM(OOMKill{Key: webApp, Pod: "shop/web-1", Time: t0, UsageBytes: 1}),
		b.OOM(OOMKill{Key: webApp, Pod: "web-1", Time: t0, UsageBytes: -1}),
	} {
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("recorded, or refused without ErrMalformed: %v", err)
		}
	}
	if err := b.Adjusted(Adjustment{Key: webApp, Pod: "web-1", Time: t0, Resource: ResourceCPU, From: 1, To: 0.5, Reason: ReasonRecommendation}); err != nil {
		t.Fatal(err)
	}
	if err := b.OOM(OOMKill{Key: webApp, Pod: "web-1", Time: t0, UsageBytes: 1e8, LimitBytes: 1e8}); err != nil {
		t.Fatal(err)
	}
	rs := b.Cut(t0.Add(time.Minute))
	if len(rs) != 1 || len(rs[0].Adjustments) != 1 || len(rs[0].OOMKills) != 1 {
		t.Fatalf("reports %+v", rs)
	}
	rs[0].APIVersion, rs[0].Agent, rs[0].Sequence = APIVersion, Agent{ID: "a", Started: t0}, 1
	body, err := Encode(rs[0], false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(bytes.NewReader(body), ""); err != nil {
		t.Fatalf("the aggregator's decoder refuses the report: %v", err)
	}
}

// TestBuilderUnadmitted: the counts reach the described containers, are
// bounded by the pods sampled, and a key left out of the counts has none.
func TestBuilderUnadmitted(t *testing.T) {
	b, err := NewBuilder(BuilderConfig{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	b.Describe(webApp, ContainerInfo{Policy: "web", Mode: "Auto", Adjustable: true})
	b.Sample(webApp, "web-1", t0.Add(time.Second), 0.5, 1e8)
	b.Sample(webApp, "web-2", t0.Add(time.Second), 0.5, 1e8)
	b.SetUnadmitted(map[Key]int{webApp: 5})
	if rs := b.Cut(t0.Add(time.Minute)); len(rs) != 1 || rs[0].Containers[0].Unadmitted != 2 {
		t.Fatalf("unadmitted %+v, want 2 (bounded by the pods sampled)", rs)
	}
	b.Sample(webApp, "web-1", t0.Add(61*time.Second), 0.5, 1e8)
	b.SetUnadmitted(nil)
	if rs := b.Cut(t0.Add(2 * time.Minute)); len(rs) != 1 || rs[0].Containers[0].Unadmitted != 0 || rs[0].Containers[0].Policy != "web" {
		t.Fatalf("after the counts went: %+v", rs)
	}
}
