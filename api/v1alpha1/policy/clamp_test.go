package policy

import (
	"math"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const (
	mi = 1 << 20
	gi = 1 << 30
)

func reqs(cpu, mem, limCPU, limMem float64) Requirements {
	return Requirements{Requests: Values{CPU: cpu, Memory: mem}, Limits: Values{CPU: limCPU, Memory: limMem}}
}

func one(name string, cur, want, floor Requirements) ClampPod {
	return ClampPod{Containers: []ClampContainer{{Name: name, Current: cur, Want: want, Floor: floor}}}
}

func reasons(bs []Binding) string {
	var s []string
	for _, b := range bs {
		s = append(s, b.Container+" "+b.Resource+" "+b.Field+" "+string(b.Reason))
	}
	return strings.Join(s, "; ")
}

// TestClamp: each bound, alone and together, on a table of pods.
func TestClamp(t *testing.T) {
	max1 := Bounds{MaxAllowed: Values{CPU: 1, Memory: 512 * mi}}
	lr := Bounds{LimitRange: LimitRange{Min: Values{CPU: 0.1, Memory: 128 * mi}, Max: Values{CPU: 2, Memory: 4 * gi},
		MaxLimitRequestRatio: Values{CPU: 2, Memory: 1.5}}}
	cur := reqs(0.5, 256*mi, 1, 512*mi)
	for _, tc := range []struct {
		name  string
		pod   ClampPod
		b     Bounds
		want  []Requirements
		binds string
	}{
		{"within every bound: unchanged", one("app", cur, reqs(0.25, 300*mi, 0.5, 450*mi), Requirements{}), lr,
			[]Requirements{reqs(0.25, 300*mi, 0.5, 450*mi)}, ""},
		{"ratio, limits kept: the request rises to limit/ratio", one("app", cur, reqs(0.25, 300*mi, 0.5, 600*mi), Requirements{}), lr,
			[]Requirements{reqs(0.25, 400*mi, 0.5, 600*mi)}, "app memory request LimitRangeMaxLimitRequestRatio"},
		{"ratio, limits kept, request at its max: the limit gives", one("app", cur, reqs(0.25, 300*mi, 0.5, 600*mi), Requirements{}),
			Bounds{MaxAllowed: Values{Memory: 350 * mi}, LimitRange: lr.LimitRange},
			[]Requirements{reqs(0.25, 350*mi, 0.5, 525*mi)}, "app memory request LimitRangeMaxLimitRequestRatio; app memory limit LimitRangeMaxLimitRequestRatio"},
		// The finding: a forged merged recommendation of 1,800 cores
		// against a policy max of 1 core (issue 19).
		{"forged 1800 cores, policy max 1 core, keep ratio", ClampPod{KeepRatio: true, Containers: []ClampContainer{{Name: "app", Current: cur,
			Want: reqs(1800, 1.7e12, 3600, 3.4e12)}}}, max1,
			[]Requirements{reqs(1, 512*mi, 2, 1024*mi)},
			"app cpu request PolicyMaxAllowed; app memory request PolicyMaxAllowed; app cpu limit PolicyMaxAllowed; app memory limit PolicyMaxAllowed"},
		{"forged 0.1 core and 100 MiB under a usage of 190 MiB", one("app", cur, reqs(0.1, 100*mi, 0.2, 200*mi), reqs(0, 209*mi, 0, 209*mi)), Bounds{},
			[]Requirements{reqs(0.1, 209*mi, 0.2, 209*mi)}, "app memory request UsageFloor; app memory limit UsageFloor"},
		{"LimitRange max, min and ratio", ClampPod{KeepRatio: true, Containers: []ClampContainer{
			{Name: "big", Current: cur, Want: reqs(4, 8*gi, 8, 16*gi)},
			{Name: "small", Current: cur, Want: reqs(0.05, 64*mi, 0.1, 128*mi)}}}, lr,
			[]Requirements{reqs(2, 4*gi, 2, 4*gi), reqs(0.1, 128*mi, 0.2, 192*mi)},
			"big cpu request LimitRangeMax; big memory request LimitRangeMax; small cpu request LimitRangeMin; small memory request LimitRangeMin; " +
				"big cpu limit LimitRangeMax; small cpu limit LimitRangeMin; small memory limit LimitRangeMaxLimitRequestRatio; big memory limit LimitRangeMax"},
		{"ratio caps a limit that follows its request, rounded down", ClampPod{KeepRatio: true, Containers: []ClampContainer{
			{Name: "app", Current: cur, Want: reqs(0.333, 256*mi, 1, 512*mi)}}},
			Bounds{LimitRange: LimitRange{MaxLimitRequestRatio: Values{CPU: 1.5}}},
			[]Requirements{reqs(0.333, 256*mi, 0.499, 512*mi)}, "app cpu limit LimitRangeMaxLimitRequestRatio"},
		{"node allocatable: the pod's increases cut in proportion", ClampPod{Containers: []ClampContainer{
			{Name: "a", Current: reqs(1, gi, 0, 0), Want: reqs(3, gi, 0, 0)},
			{Name: "b", Current: reqs(1, gi, 0, 0), Want: reqs(3, 2*gi, 0, 0)},
			{Name: "c", Current: reqs(1, gi, 0, 0), Want: reqs(0.5, gi, 0, 0)}}},
			Bounds{Allocatable: Values{CPU: 4.5, Memory: 64 * gi}},
			[]Requirements{reqs(2, gi, 0, 0), reqs(2, 2*gi, 0, 0), reqs(0.5, gi, 0, 0)},
			"a cpu request NodeAllocatable; b cpu request NodeAllocatable"},
		{"a limit above the node is the node", one("app", cur, reqs(1, gi, 300, 300*gi), Requirements{}),
			Bounds{Allocatable: Values{CPU: 64, Memory: 256 * gi}},
			[]Requirements{reqs(1, gi, 64, 256*gi)}, "app cpu limit NodeAllocatable; app memory limit NodeAllocatable"},
		{"pod max of a LimitRange: requests and limits", ClampPod{Containers: []ClampContainer{
			{Name: "a", Current: reqs(1, gi, 2, 2*gi), Want: reqs(2, gi, 4, 2*gi)},
			{Name: "b", Current: reqs(1, gi, 2, 2*gi), Want: reqs(2, gi, 4, 2*gi)}}},
			Bounds{LimitRange: LimitRange{PodMax: Values{CPU: 6, Memory: 8 * gi}}},
			[]Requirements{reqs(2, gi, 3, 2*gi), reqs(2, gi, 3, 2*gi)},
			"a cpu limit LimitRangePodMax; b cpu limit LimitRangePodMax"},
		{"pod min of a LimitRange: decreases undone in proportion", ClampPod{Containers: []ClampContainer{
			{Name: "a", Current: reqs(1, gi, 0, 0), Want: reqs(0.2, gi, 0, 0)},
			{Name: "b", Current: reqs(1, gi, 0, 0), Want: reqs(0.2, gi, 0, 0)}}},
			Bounds{LimitRange: LimitRange{PodMin: Values{CPU: 1}}},
			[]Requirements{reqs(0.5, gi, 0, 0), reqs(0.5, gi, 0, 0)},
			"a cpu request LimitRangePodMin; b cpu request LimitRangePodMin"},
		{"not finite: the current value", one("app", cur, reqs(math.NaN(), math.Inf(1), -1, math.Inf(-1)), Requirements{}), Bounds{},
			[]Requirements{cur}, "app cpu request NonFinite; app cpu limit NonFinite; app memory request NonFinite; app memory limit NonFinite"},
		{"usage above the policy max: lowered only to the usage", one("app", reqs(0.5, gi, 1, 2*gi), reqs(0.5, 256*mi, 1, 512*mi), reqs(0, 600*mi, 0, 660*mi)), max1,
			[]Requirements{reqs(0.5, 600*mi, 1, 660*mi)}, "app memory request FloorAboveCeiling; app memory limit UsageFloor"},
		{"usage above the policy max: never raised past it", one("app", reqs(0.5, 400*mi, 1, 2*gi), reqs(0.5, 900*mi, 1, 2*gi), reqs(0, 600*mi, 0, 660*mi)), max1,
			[]Requirements{reqs(0.5, 512*mi, 1, 2*gi)}, "app memory request FloorAboveCeiling"},
		{"guaranteed: one value, the tighter bounds", ClampPod{Guaranteed: true, Containers: []ClampContainer{
			{Name: "app", Current: reqs(1, gi, 1, gi), Want: reqs(3, 3*gi, 3, 3*gi), Floor: reqs(0, 0, 0, 700*mi)}}},
			Bounds{MaxAllowed: Values{CPU: 2}, LimitRange: LimitRange{Max: Values{Memory: 2 * gi}}},
			[]Requirements{reqs(2, 2*gi, 2, 2*gi)}, "app cpu request PolicyMaxAllowed; app memory request LimitRangeMax"},
		{"unset stays unset, set stays set", one("app", reqs(0, 0, 0, 0), reqs(0, 1e-9, 0, 0), Requirements{}),
			Bounds{MinAllowed: Values{CPU: 1, Memory: gi}},
			[]Requirements{reqs(0, gi, 0, 0)}, "app memory request PolicyMinAllowed"},
		{"whole millicores and bytes", one("app", cur, reqs(0.1234567, 1e6+0.25, 0.2469134, 2e6+0.5), Requirements{}), Bounds{},
			[]Requirements{reqs(0.124, 1e6+1, 0.247, 2e6+1)}, ""},
		{"no allocatable known: the ceilings", one("app", cur, reqs(1e300, 1e300, 1e300, 1e300), Requirements{}), Bounds{},
			[]Requirements{reqs(MaxCPU, MaxMemory, MaxCPU, MaxMemory)}, "app cpu request Ceiling; app memory request Ceiling; app cpu limit Ceiling; app memory limit Ceiling"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, binds := Clamp(tc.pod, tc.b)
			for i := range tc.want {
				if got[i] != tc.want[i] {
					t.Errorf("container %d: %+v\nwant %+v", i, got[i], tc.want[i])
				}
			}
			if r := reasons(binds); !sameSet(r, tc.binds) {
				t.Errorf("bindings %q\nwant %q", r, tc.binds)
			}
			if len(binds) > 0 && (Bindings(binds) == "" || strings.Contains(Bindings(binds), "%!")) {
				t.Errorf("message %q", Bindings(binds))
			}
		})
	}
}

func sameSet(a, b string) bool {
	split := func(s string) map[string]int {
		m := map[string]int{}
		for _, p := range strings.Split(s, "; ") {
			if p != "" {
				m[p]++
			}
		}
		return m
	}
	x, y := split(a), split(b)
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if y[k] != v {
			return false
		}
	}
	return true
}

// TestAddLimitRangeItem: several LimitRange items merge to the tightest
// bounds, read from corev1 lists as they are.
func TestAddLimitRangeItem(t *testing.T) {
	var l LimitRange
	q := resource.MustParse
	AddLimitRangeItem(&l, string(corev1.LimitTypeContainer), corev1.ResourceList{"cpu": q("4"), "memory": q("8Gi")},
		corev1.ResourceList{"cpu": q("100m")}, corev1.ResourceList{"cpu": q("3")})
	AddLimitRangeItem(&l, string(corev1.LimitTypeContainer), corev1.ResourceList{"cpu": q("2")},
		corev1.ResourceList{"cpu": q("50m"), "memory": q("64Mi")}, corev1.ResourceList{"memory": q("1.0005")})
	AddLimitRangeItem(&l, string(corev1.LimitTypePod), corev1.ResourceList{"memory": q("16Gi")}, corev1.ResourceList{"cpu": q("200m")}, nil)
	AddLimitRangeItem(&l, string(corev1.LimitTypePersistentVolumeClaim), corev1.ResourceList{"storage": q("1Gi")}, nil, nil)
	want := LimitRange{Min: Values{CPU: 0.1, Memory: 64 * mi}, Max: Values{CPU: 2, Memory: 8 * gi}, MaxLimitRequestRatio: Values{CPU: 3, Memory: 1.001},
		PodMin: Values{CPU: 0.2}, PodMax: Values{Memory: 16 * gi}}
	if l != want {
		t.Errorf("%+v\nwant %+v", l, want)
	}
}

// FuzzClamp: whatever the input, the output is finite, in whole units,
// within the ceilings, keeps set and unset values so, keeps requests at
// most their limits (and equal in a Guaranteed pod), is never raised past
// a bound beyond where it already was, and is never lowered below the
// usage floor beyond where it already was.
func FuzzClamp(f *testing.F) {
	f.Add(0.5, 256.0*mi, 1.0, 512.0*mi, 1800.0, 1.7e12, 3600.0, 3.4e12, 0.0, 190.0*mi, 1.0, 512.0*mi, 0.0, 0.0, 2.0, 64.0, 256.0*gi, uint8(0))
	f.Add(math.NaN(), math.Inf(1), -1.0, math.Inf(-1), 1e-300, 1e300, math.MaxFloat64, math.Copysign(0, -1), math.NaN(), math.Inf(1), math.NaN(), -5.0, math.Inf(1), 1e-9, math.NaN(), math.Inf(-1), math.NaN(), uint8(7))
	f.Add(1.0, float64(gi), 1.0, float64(gi), 0.001, 1.0, 0.001, 1.0, 0.0, 700.0*mi, 0.0, 300.0*mi, 0.1, 128.0*mi, 1.5, 4.5, 2.0*gi, uint8(3))
	f.Fuzz(func(t *testing.T, curCPU, curMem, curLimCPU, curLimMem, wantCPU, wantMem, wantLimCPU, wantLimMem, floorCPU, floorMem,
		maxCPU, maxMem, minCPU, minMem, ratio, allocCPU, allocMem float64, flags uint8) {
		pod := ClampPod{Guaranteed: flags&1 != 0, KeepRatio: flags&2 != 0}
		cur := reqs(curCPU, curMem, curLimCPU, curLimMem)
		want := reqs(wantCPU, wantMem, wantLimCPU, wantLimMem)
		floor := reqs(floorCPU, floorMem, floorCPU, floorMem*1.1)
		pod.Containers = append(pod.Containers, ClampContainer{Name: "a", Current: cur, Want: want, Floor: floor})
		if flags&4 != 0 { // a second container, the first's values swapped
			pod.Containers = append(pod.Containers, ClampContainer{Name: "b", Current: want, Want: cur, Floor: Requirements{}})
		}
		b := Bounds{MinAllowed: Values{CPU: minCPU, Memory: minMem}, MaxAllowed: Values{CPU: maxCPU, Memory: maxMem},
			Allocatable: Values{CPU: allocCPU, Memory: allocMem},
			LimitRange:  LimitRange{MaxLimitRequestRatio: Values{CPU: ratio, Memory: ratio}, PodMax: Values{CPU: allocCPU * 2}}}
		if flags&8 != 0 {
			b.LimitRange.Max, b.LimitRange.Min = Values{CPU: maxCPU / 2, Memory: maxMem / 2}, Values{CPU: minCPU * 2, Memory: minMem * 2}
		}
		out, binds := Clamp(pod, b)
		if len(out) != len(pod.Containers) {
			t.Fatalf("%d results for %d containers", len(out), len(pod.Containers))
		}
		_ = Bindings(binds)
		usable := func(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }
		for i, c := range pod.Containers {
			for _, r := range resources {
				pick := func(q Requirements, k int) float64 { return r.get([]Values{q.Requests, q.Limits}[k]) }
				isSet := func(k int) bool {
					w, cu := pick(c.Want, k), pick(c.Current, k)
					return (usable(w) && w > 0) || (!usable(w) && usable(cu) && cu > 0)
				}
				// A Guaranteed pod's container with both values set keeps one.
				paired := pod.Guaranteed && isSet(0) && isSet(1)
				for k := 0; k < 2; k++ {
					v, w, cu, fl := pick(out[i], k), pick(c.Want, k), pick(c.Current, k), pick(c.Floor, k)
					if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > r.ceiling || r.up(v) != v {
						t.Fatalf("%s %s[%d] = %v: not a finite whole amount within %v", c.Name, r.name, k, v, r.ceiling)
					}
					// Set stays set, unset stays unset.
					set := isSet(k)
					if (v > 0) != set {
						t.Fatalf("%s %s[%d]: want %v current %v gave %v", c.Name, r.name, k, w, cu, v)
					}
					if !set {
						continue
					}
					// Never raised past a bound beyond where it was.
					hi := r.ceiling
					for _, x := range []float64{r.get(b.Allocatable), r.get(b.LimitRange.Max)} {
						if usable(x) && x > 0 && r.down(x) > 0 {
							hi = min(hi, r.down(x))
						}
					}
					if k == 0 || paired {
						if x := r.get(b.MaxAllowed); usable(x) && x > 0 && r.down(x) > 0 {
							hi = min(hi, r.down(x))
						}
					}
					was := 0.0
					if usable(cu) {
						was = r.up(cu)
					}
					if (paired || k == 1) && usable(pick(c.Current, 1-k)) {
						// One value for both; or a limit that follows a
						// request held up by its floor.
						was = max(was, r.up(pick(c.Current, 1-k)))
					}
					if v > max(hi, was) {
						t.Fatalf("%s %s[%d] = %v above its bound %v and its current %v (want %v)", c.Name, r.name, k, v, hi, was, w)
					}
					// Never below the usage floor beyond where it was.
					if usable(fl) && v < min(r.up(fl), was) {
						t.Fatalf("%s %s[%d] = %v below its floor %v and its current %v", c.Name, r.name, k, v, fl, was)
					}
				}
				req, lim := pick(out[i], 0), pick(out[i], 1)
				if lim > 0 && req > lim {
					t.Fatalf("%s %s: request %v above limit %v", c.Name, r.name, req, lim)
				}
				if paired && req != lim {
					t.Fatalf("%s %s: Guaranteed with request %v limit %v", c.Name, r.name, req, lim)
				}
			}
		}
	})
}
