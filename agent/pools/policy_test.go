package pools

import (
	"errors"
	"testing"

	"k8s.io/utils/cpuset"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/internal/cpulist"
	"github.com/cgpilot/cgpilot/topology"
)

func mustSet(t testing.TB, s string) cpuset.CPUSet {
	t.Helper()
	c, err := cpulist.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// eightCPUs: 8 CPUs on a flat machine, cpu 0 reserved, cap 2/3 of 7 = 4.
func eightCPUs(t testing.TB) (*memState, policy) {
	topo, err := topology.Flat(mustSet(t, "0-7"))
	if err != nil {
		t.Fatal(err)
	}
	return newMemState(mustSet(t, "0-7"), mustSet(t, "0")), policy{topo: topo, outside: cpuset.New(), capRatio: 2.0 / 3.0}
}

func TestPolicyAllocate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kubelet  string
		existing []Assignment
		req      exclusiveRequest
		want     string
		wantErr  error
	}{
		{"first fit skips reserved", "", nil, exclusiveRequest{UID: "a", CPUs: 2}, "1-2", nil},
		{"skips others", "", []Assignment{{UID: "b", CPUs: mustSet(t, "1-2")}}, exclusiveRequest{UID: "a", CPUs: 1}, "3", nil},
		{"skips kubelet static", "1-3", nil, exclusiveRequest{UID: "a", CPUs: 1}, "4", nil},
		{"idempotent", "", []Assignment{{UID: "a", CPUs: mustSet(t, "5-6")}}, exclusiveRequest{UID: "a", CPUs: 2}, "5-6", nil},
		{"grow keeps cpus", "", []Assignment{{UID: "a", CPUs: mustSet(t, "5")}}, exclusiveRequest{UID: "a", CPUs: 3}, "1-2,5", nil},
		{"shrink keeps subset", "", []Assignment{{UID: "a", CPUs: mustSet(t, "2-4")}}, exclusiveRequest{UID: "a", CPUs: 1}, "2", nil},
		{"explicit", "", nil, exclusiveRequest{UID: "a", CPUs: 2, CPUSet: ptr(mustSet(t, "6-7"))}, "6-7", nil},
		{"explicit move", "", []Assignment{{UID: "a", CPUs: mustSet(t, "1")}}, exclusiveRequest{UID: "a", CPUs: 1, CPUSet: ptr(mustSet(t, "7"))}, "7", nil},
		{"cap exactly", "", []Assignment{{UID: "b", CPUs: mustSet(t, "1-2")}}, exclusiveRequest{UID: "a", CPUs: 2}, "3-4", nil},
		// refusals
		{"too many", "", nil, exclusiveRequest{UID: "a", CPUs: 8}, "", ErrTooManyCPUs},
		{"over cap", "", nil, exclusiveRequest{UID: "a", CPUs: 5}, "", ErrCapExceeded},
		{"over cap with others", "", []Assignment{{UID: "b", CPUs: mustSet(t, "1-3")}}, exclusiveRequest{UID: "a", CPUs: 2}, "", ErrCapExceeded},
		{"grow over cap", "", []Assignment{{UID: "a", CPUs: mustSet(t, "1-2")}}, exclusiveRequest{UID: "a", CPUs: 5}, "", ErrCapExceeded},
		{"no room beside kubelet", "1-5", nil, exclusiveRequest{UID: "a", CPUs: 3}, "", ErrInsufficientCPUs},
		{"explicit on reserved", "", nil, exclusiveRequest{UID: "a", CPUs: 2, CPUSet: ptr(mustSet(t, "0-1"))}, "", ErrReservedOverlap},
		{"explicit taken", "", []Assignment{{UID: "b", CPUs: mustSet(t, "3")}}, exclusiveRequest{UID: "a", CPUs: 2, CPUSet: ptr(mustSet(t, "2-3"))}, "", ErrCPUTaken},
		{"explicit kubelet", "4", nil, exclusiveRequest{UID: "a", CPUs: 1, CPUSet: ptr(mustSet(t, "4"))}, "", ErrCPUTaken},
		{"explicit offline", "", nil, exclusiveRequest{UID: "a", CPUs: 1, CPUSet: ptr(mustSet(t, "9"))}, "", ErrCPUOffline},
		{"explicit over cap", "", nil, exclusiveRequest{UID: "a", CPUs: 5, CPUSet: ptr(mustSet(t, "1-5"))}, "", ErrCapExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, p := eightCPUs(t)
			s.setKubeletTaken(mustSet(t, tc.kubelet))
			for _, a := range tc.existing {
				_ = s.setAssignment(a)
			}
			before := encodeCheckpoint(s.snapshot())
			got, err := p.Allocate(s, tc.req, nil)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !errors.Is(err, ErrRefused) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if after := encodeCheckpoint(s.snapshot()); string(after) != string(before) {
					t.Fatalf("refusal changed the state:\n%s\n%s", before, after)
				}
				return
			}
			if err != nil {
				t.Fatalf("Allocate: %v", err)
			}
			if got.String() != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
			a, ok := s.Assignment("a")
			if !ok || !a.CPUs.Equals(got) {
				t.Fatalf("state holds %v, %v", a, ok)
			}
			assertDisjoint(t, s)
			if !s.SharedPool().Equals(s.All().Difference(s.Reserved()).Difference(s.Exclusive()).Difference(s.KubeletTaken())) {
				t.Fatalf("shared pool %s inconsistent", s.SharedPool())
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func assertDisjoint(t testing.TB, s Reader) {
	t.Helper()
	seen := s.KubeletTaken().Union(s.Reserved())
	for _, a := range s.Assignments() {
		if ov := seen.Intersection(a.CPUs); !ov.IsEmpty() {
			t.Fatalf("pod %s shares cpus %s", a.UID, ov)
		}
		seen = seen.Union(a.CPUs)
	}
}

func TestPolicyRelease(t *testing.T) {
	s, p := eightCPUs(t)
	if _, err := p.Allocate(s, exclusiveRequest{UID: "a", CPUs: 3}, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.SharedPool().String(); got != "4-7" {
		t.Fatalf("shared pool %s, want 4-7", got)
	}
	for range 2 { // idempotent
		if err := p.Release(s, "a"); err != nil {
			t.Fatal(err)
		}
		if got := s.SharedPool().String(); got != "1-7" {
			t.Fatalf("shared pool after release %s, want 1-7", got)
		}
	}
}

// TestPolicyRandomSequences: random allocate/grow/shrink/release sequences
// never give a CPU twice, never a reserved CPU, never exceed the cap.
func TestPolicyRandomSequences(t *testing.T) {
	s, p := eightCPUs(t)
	seed := uint32(12345)
	next := func(n int) int { seed = seed*1664525 + 1013904223; return int(seed>>16) % n }
	for i := 0; i < 5000; i++ {
		uid := string(rune('a' + next(5)))
		if next(4) == 0 {
			_ = p.Release(s, uid)
		} else {
			_, err := p.Allocate(s, exclusiveRequest{UID: uid, CPUs: 1 + next(5)}, nil)
			if err != nil && !errors.Is(err, ErrRefused) {
				t.Fatal(err)
			}
		}
		assertDisjoint(t, s)
		if n, limit := s.Exclusive().Size(), p.limits(s, nil).Max; n > limit {
			t.Fatalf("step %d: %d exclusive > cap %d", i, n, limit)
		}
	}
}

func TestPolicyCapAndSellable(t *testing.T) {
	for _, tc := range []struct {
		all, reserved string
		frac          float64
		overcommit    float64
		shared        []int64
		want          int
	}{
		{"0-1", "", 2.0 / 3.0, 0, nil, 1},
		{"0-2", "", 2.0 / 3.0, 0, nil, 2},
		{"0-7", "0", 2.0 / 3.0, 0, nil, 4},
		{"0-63", "0-1", 2.0 / 3.0, 0, nil, 41},
		{"0-7", "", 1, 0, nil, 8},
		{"0-7", "", 0, 0, nil, 0},
		// The sellable rule (topology.Limits): a = 16 − 2×2, b = (16 − 3) / 2.
		{"0-15", "", 1, 2, []int64{1500, 1000}, 6},
		{"0-5", "", 1, 2, []int64{1500, 1000}, 1},
		{"0-7", "", 1, 1, []int64{8000}, 0},
		// Off without an overcommit ratio, whatever the shared pods.
		{"0-15", "", 1, 0, []int64{1500, 1000}, 16},
	} {
		topo, err := topology.Flat(mustSet(t, tc.all))
		if err != nil {
			t.Fatal(err)
		}
		s := newMemState(mustSet(t, tc.all), mustSet(t, tc.reserved))
		p := policy{topo: topo, outside: cpuset.New(), capRatio: tc.frac, overcommit: tc.overcommit}
		shared := tc.shared
		if tc.overcommit == 0 {
			shared = nil
		}
		if got := p.limits(s, shared).Max; got != tc.want {
			t.Errorf("cap(%s - %s, %v, sellable %v %v) = %d, want %d", tc.all, tc.reserved, tc.frac, tc.overcommit, tc.shared, got, tc.want)
		}
	}
}

func TestReason(t *testing.T) {
	for err, want := range map[error]string{
		ErrCapExceeded: "CapExceeded", ErrCPUTaken: "CPUsTaken", local.ErrBadCPUCount: "InvalidAnnotation",
		errors.New("x"): "Error", ErrTooManyCPUs: "TooManyCPUs", ErrReservedOverlap: "ReservedOverlap",
	} {
		if got := Reason(err); got != want {
			t.Errorf("Reason(%v) = %s, want %s", err, got, want)
		}
	}
}
