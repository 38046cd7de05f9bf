package local

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/internal/cpulist"
	"github.com/cgpilot/cgpilot/topology"
)

func intp(n int) *int { return &n }

func setp(s string) *cpuset.CPUSet {
	c, err := cpuset.Parse(s)
	if err != nil {
		panic(err)
	}
	return &c
}

func TestParseAnnotationsValid(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want PodRequest
	}{
		{"no annotations", nil, PodRequest{Pool: PoolShared}},
		{"foreign annotations ignored", map[string]string{"other.io/x": "y"}, PodRequest{Pool: PoolShared}},
		{"explicit shared", map[string]string{AnnotationCPUPool: "shared"}, PodRequest{Pool: PoolShared}},
		{"none", map[string]string{AnnotationCPUPool: "none"}, PodRequest{Pool: PoolNone}},
		{"exclusive default count", map[string]string{AnnotationCPUPool: "exclusive"}, PodRequest{Pool: PoolExclusive}},
		{"exclusive with count", map[string]string{AnnotationCPUPool: "exclusive", AnnotationCPUs: "4"}, PodRequest{Pool: PoolExclusive, CPUs: intp(4)}},
		{"max count", map[string]string{AnnotationCPUPool: "exclusive", AnnotationCPUs: "8192"}, PodRequest{Pool: PoolExclusive, CPUs: intp(8192)}},
		{"explicit cpuset", map[string]string{AnnotationCPUPool: "exclusive", AnnotationCPUSet: "2-3,6"}, PodRequest{Pool: PoolExclusive, CPUSet: setp("2-3,6")}},
		{"cpuset and matching count", map[string]string{AnnotationCPUPool: "exclusive", AnnotationCPUSet: "0-1", AnnotationCPUs: "2"}, PodRequest{Pool: PoolExclusive, CPUs: intp(2), CPUSet: setp("0-1")}},
		{"all options", map[string]string{
			AnnotationCPUPool: "exclusive", AnnotationCPUs: "2", AnnotationCPUPolicy: "spread",
			AnnotationNUMA: "single", AnnotationIOQueues: "avoid", AnnotationReleaseIsolation: "true",
		}, PodRequest{Pool: PoolExclusive, CPUs: intp(2), CPUPolicy: "spread", NUMA: "single", IOQueues: "avoid", ReleaseIsolation: true}},
		{"release isolation false", map[string]string{AnnotationCPUPool: "exclusive", AnnotationReleaseIsolation: "false"}, PodRequest{Pool: PoolExclusive}},
		{"policy bind-all", map[string]string{AnnotationCPUPool: "exclusive", AnnotationCPUPolicy: "bind-all"}, PodRequest{Pool: PoolExclusive, CPUPolicy: "bind-all"}},
		{"numa prefer-single", map[string]string{AnnotationCPUPool: "exclusive", AnnotationNUMA: "prefer-single"}, PodRequest{Pool: PoolExclusive, NUMA: "prefer-single"}},
		{"numa spread", map[string]string{AnnotationCPUPool: "exclusive", AnnotationNUMA: "spread"}, PodRequest{Pool: PoolExclusive, NUMA: "spread"}},
		{"io spread", map[string]string{AnnotationCPUPool: "exclusive", AnnotationIOQueues: "spread"}, PodRequest{Pool: PoolExclusive, IOQueues: "spread"}},
		{"io any", map[string]string{AnnotationCPUPool: "exclusive", AnnotationIOQueues: "any"}, PodRequest{Pool: PoolExclusive, IOQueues: "any"}},
		{"policy full-cores", map[string]string{AnnotationCPUPool: "exclusive", AnnotationCPUPolicy: "full-cores"}, PodRequest{Pool: PoolExclusive, CPUPolicy: "full-cores"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAnnotations(tc.ann)
			if err != nil {
				t.Fatalf("ParseAnnotations: %v", err)
			}
			if !requestsEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func requestsEqual(a, b PodRequest) bool {
	if (a.CPUs == nil) != (b.CPUs == nil) || (a.CPUs != nil && *a.CPUs != *b.CPUs) {
		return false
	}
	if (a.CPUSet == nil) != (b.CPUSet == nil) || (a.CPUSet != nil && !a.CPUSet.Equals(*b.CPUSet)) {
		return false
	}
	return a.Pool == b.Pool && a.CPUPolicy == b.CPUPolicy && a.NUMA == b.NUMA && a.IOQueues == b.IOQueues && a.ReleaseIsolation == b.ReleaseIsolation
}

func TestParseAnnotationsInvalid(t *testing.T) {
	excl := func(kv ...string) map[string]string {
		m := map[string]string{AnnotationCPUPool: "exclusive"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		wantKey string
		wantErr error
	}{
		// pool
		{"unknown pool", map[string]string{AnnotationCPUPool: "dedicated"}, AnnotationCPUPool, ErrUnknownPool},
		{"pool upper case", map[string]string{AnnotationCPUPool: "Exclusive"}, AnnotationCPUPool, ErrUnknownPool},
		{"pool with space", map[string]string{AnnotationCPUPool: " exclusive"}, AnnotationCPUPool, ErrUnknownPool},
		{"empty pool", map[string]string{AnnotationCPUPool: ""}, AnnotationCPUPool, ErrUnknownPool},
		// count: non-numeric
		{"cpus abc", excl(AnnotationCPUs, "abc"), AnnotationCPUs, ErrBadCPUCount},
		{"cpus empty", excl(AnnotationCPUs, ""), AnnotationCPUs, ErrBadCPUCount},
		{"cpus fraction", excl(AnnotationCPUs, "1.5"), AnnotationCPUs, ErrBadCPUCount},
		{"cpus millicores", excl(AnnotationCPUs, "500m"), AnnotationCPUs, ErrBadCPUCount},
		{"cpus space", excl(AnnotationCPUs, " 2"), AnnotationCPUs, ErrBadCPUCount},
		// count: sign and range
		{"cpus -1", excl(AnnotationCPUs, "-1"), AnnotationCPUs, ErrBadCPUCount},
		{"cpus +1", excl(AnnotationCPUs, "+1"), AnnotationCPUs, ErrBadCPUCount},
		{"cpus 0", excl(AnnotationCPUs, "0"), AnnotationCPUs, ErrBadCPUCount},
		{"cpus leading zero", excl(AnnotationCPUs, "02"), AnnotationCPUs, ErrBadCPUCount},
		{"cpus too many", excl(AnnotationCPUs, "8193"), AnnotationCPUs, ErrBadCPUCount},
		{"cpus overflow", excl(AnnotationCPUs, "99999999999999999999999"), AnnotationCPUs, ErrBadCPUCount},
		// cpuset
		{"cpuset empty", excl(AnnotationCPUSet, ""), AnnotationCPUSet, ErrBadCPUList},
		{"cpuset letters", excl(AnnotationCPUSet, "a-b"), AnnotationCPUSet, ErrBadCPUList},
		{"cpuset reversed", excl(AnnotationCPUSet, "3-1"), AnnotationCPUSet, ErrBadCPUList},
		{"cpuset open range", excl(AnnotationCPUSet, "1-"), AnnotationCPUSet, ErrBadCPUList},
		{"cpuset negative", excl(AnnotationCPUSet, "-1"), AnnotationCPUSet, ErrBadCPUList},
		{"cpuset trailing comma", excl(AnnotationCPUSet, "1,"), AnnotationCPUSet, ErrBadCPUList},
		{"cpuset space", excl(AnnotationCPUSet, "1, 2"), AnnotationCPUSet, ErrBadCPUList},
		{"cpuset huge", excl(AnnotationCPUSet, "0-2000000000"), AnnotationCPUSet, ErrBadCPUList},
		{"cpuset id too big", excl(AnnotationCPUSet, "8192"), AnnotationCPUSet, ErrBadCPUList},
		{"cpuset 256 KiB", excl(AnnotationCPUSet, strings.Repeat("0-8191,", (256<<10)/7)), AnnotationCPUSet, ErrTooLong},
		{"long value on a shared pod", map[string]string{AnnotationCPUPolicy: strings.Repeat("x", 256<<10)}, AnnotationCPUPolicy, ErrTooLong},
		// options
		{"bad policy", excl(AnnotationCPUPolicy, "best"), AnnotationCPUPolicy, ErrBadOption},
		{"bad numa", excl(AnnotationNUMA, "any"), AnnotationNUMA, ErrBadOption},
		{"bad io", excl(AnnotationIOQueues, "none"), AnnotationIOQueues, ErrBadOption},
		{"bad release", excl(AnnotationReleaseIsolation, "yes"), AnnotationReleaseIsolation, ErrBadOption},
		{"release upper", excl(AnnotationReleaseIsolation, "True"), AnnotationReleaseIsolation, ErrBadOption},
		// conflicts
		{"cpus on shared", map[string]string{AnnotationCPUs: "2"}, AnnotationCPUs, ErrConflict},
		{"cpuset on none", map[string]string{AnnotationCPUPool: "none", AnnotationCPUSet: "1"}, AnnotationCPUSet, ErrConflict},
		{"policy on shared", map[string]string{AnnotationCPUPool: "shared", AnnotationCPUPolicy: "spread"}, AnnotationCPUPolicy, ErrConflict},
		{"release on shared", map[string]string{AnnotationReleaseIsolation: "true"}, AnnotationReleaseIsolation, ErrConflict},
		{"cpuset size mismatch", excl(AnnotationCPUSet, "0-2", AnnotationCPUs, "2"), AnnotationCPUSet, ErrConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAnnotations(tc.ann)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if !errors.Is(err, ErrInvalidAnnotation) {
				t.Fatalf("err %v does not wrap ErrInvalidAnnotation", err)
			}
			var ae *AnnotationError
			if !errors.As(err, &ae) || ae.Key != tc.wantKey {
				t.Fatalf("err %v: want AnnotationError for key %s", err, tc.wantKey)
			}
			if !strings.Contains(err.Error(), tc.wantKey) {
				t.Fatalf("error %q does not name the annotation", err)
			}
		})
	}
}

func TestStatusRoundTrip(t *testing.T) {
	in := Status{Pool: PoolExclusive, CPUs: "0-1", State: StateRefused, Reason: "CapExceeded", Error: "x", ObservedGeneration: 7}
	out, err := ParseStatus(in.Encode())
	if err != nil || out != in {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	for _, bad := range []string{"", "{", `{"pool":"x","extra":1}`, `[]`, `{"observedGeneration":"a"}`} {
		if _, err := ParseStatus(bad); !errors.Is(err, ErrInvalidAnnotation) {
			t.Errorf("ParseStatus(%q) err = %v", bad, err)
		}
	}
}

func FuzzParseAnnotations(f *testing.F) {
	f.Add("exclusive", "2", "0-1", "spread", "single", "avoid", "true")
	f.Add("shared", "", "", "", "", "", "")
	f.Add("exclusive", "-1", "3-1", "x", "y", "z", "maybe")
	f.Add("exclusive", "1", "0-8191", "", "", "", "")
	f.Fuzz(func(t *testing.T, pool, cpus, set, policy, numa, io, rel string) {
		ann := map[string]string{}
		for k, v := range map[string]string{AnnotationCPUPool: pool, AnnotationCPUs: cpus, AnnotationCPUSet: set,
			AnnotationCPUPolicy: policy, AnnotationNUMA: numa, AnnotationIOQueues: io, AnnotationReleaseIsolation: rel} {
			if v != "" {
				ann[k] = v
			}
		}
		// The cost bound is the allocation, not a wall-clock time (this
		// runs under -race on shared machines, where 50 ms was missed by
		// the GC in allocated alone).
		var req PodRequest
		var err error
		if n := allocated(func() { req, err = ParseAnnotations(ann) }); n > 1<<20 {
			t.Fatalf("ParseAnnotations allocated %d bytes", n)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidAnnotation) {
				t.Fatalf("error does not wrap ErrInvalidAnnotation: %v", err)
			}
			return
		}
		if req.CPUs != nil && (*req.CPUs < 1 || *req.CPUs > cpulist.MaxCPUs) {
			t.Fatalf("accepted cpu count %d", *req.CPUs)
		}
		if req.CPUSet != nil {
			if req.CPUSet.IsEmpty() || req.CPUSet.List()[req.CPUSet.Size()-1] > cpulist.MaxID {
				t.Fatalf("accepted cpuset %s", req.CPUSet)
			}
			// the canonical form must parse back to the same set
			again, err := cpulist.Parse(req.CPUSet.String())
			if err != nil || !again.Equals(*req.CPUSet) {
				t.Fatalf("canonical %q does not round-trip: %v", req.CPUSet, err)
			}
		}
		if req.Pool != PoolExclusive && (req.CPUs != nil || req.CPUSet != nil || req.ReleaseIsolation) {
			t.Fatalf("exclusive options accepted on pool %q", req.Pool)
		}
	})
}

// allocated returns the bytes allocated by f (nothing else runs meanwhile).
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestHostileCPUSetAnnotation: the 256 KiB cpuset annotation that used to
// allocate gigabytes (the agent parses every pod of its node, so it was
// OOM-killed at every start) fails at once, with little memory.
func TestHostileCPUSetAnnotation(t *testing.T) {
	ann := map[string]string{AnnotationCPUPool: "exclusive", AnnotationCPUSet: strings.Repeat("0-8191,", (256<<10)/7)}
	start := time.Now()
	var err error
	if n := allocated(func() { _, err = ParseAnnotations(ann) }); n > 1<<20 {
		t.Errorf("allocated %d bytes, want < 1 MiB", n)
	}
	if d := time.Since(start); d > 10*time.Millisecond {
		t.Logf("took %v (a loaded machine; the bound checked is memory)", d)
	}
	if !errors.Is(err, ErrTooLong) {
		t.Fatalf("err = %v, want ErrTooLong", err)
	}
	if len(err.Error()) > 200 {
		t.Fatalf("error message carries the value: %d bytes", len(err.Error()))
	}
}

// TestOptionsMatchTopology: the option values the protocol accepts are
// exactly those the allocator takes.
func TestOptionsMatchTopology(t *testing.T) {
	for _, o := range []struct {
		name   string
		values []string
		req    func(v string) topology.Request
	}{
		{"cpu-policy", CPUPolicies, func(v string) topology.Request { return topology.Request{CPUs: 1, Policy: topology.Policy(v)} }},
		{"numa", NUMAModes, func(v string) topology.Request { return topology.Request{CPUs: 1, NUMA: topology.NUMAPolicy(v)} }},
		{"io-queues", IOModes, func(v string) topology.Request { return topology.Request{CPUs: 1, IOQueues: topology.IOPolicy(v)} }},
	} {
		for _, v := range append(o.values, "unknown") {
			err := topology.CheckRequest(o.req(v))
			if (err == nil) != (v != "unknown") {
				t.Errorf("%s=%s: topology says %v", o.name, v, err)
			}
		}
	}
}
