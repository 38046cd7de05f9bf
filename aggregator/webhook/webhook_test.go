package webhook

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
	"github.com/cgpilot/cgpilot/recommend"
)

type recs map[report.Key]*report.WorkloadRecommendation

func (r recs) Recommendation(k report.Key) *report.WorkloadRecommendation { return r[k] }

type pols []*policy.Policy

func (p pols) Match(string, map[string]string) ([]*policy.Policy, []string) { return p, nil }

type events struct{ reasons []string }

func (e *events) Eventf(_ runtime.Object, _ runtime.Object, _, reason, _, _ string, _ ...any) {
	e.reasons = append(e.reasons, reason)
}

var web = report.Workload{Namespace: "shop", Kind: report.KindDeployment, Name: "web"}

// rec is a fresh recommendation of policy p with the default preset.
func rec(cpu, mem float64) *report.WorkloadRecommendation {
	return &report.WorkloadRecommendation{Recommendation: report.Recommendation{CPU: report.Estimate{Target: cpu}, Memory: report.Estimate{Target: mem}},
		Policy: "p", Preset: recommend.DefaultPreset, FreshUntil: time.Now().Add(time.Hour)}
}

func compiled(t testing.TB, spec v1alpha1.RightsizePolicySpec) *policy.Policy {
	t.Helper()
	p, err := policy.Compile(&v1alpha1.RightsizePolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func pol(t testing.TB, mode v1alpha1.Mode, limits v1alpha1.LimitsPolicy) *policy.Policy {
	return compiled(t, v1alpha1.RightsizePolicySpec{Mode: mode, Limits: limits})
}

func res(reqCPU, reqMem, limCPU, limMem string) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{}
	set := func(l *corev1.ResourceList, cpu, mem string) {
		if cpu == "" && mem == "" {
			return
		}
		*l = corev1.ResourceList{}
		if cpu != "" {
			(*l)[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			(*l)[corev1.ResourceMemory] = resource.MustParse(mem)
		}
	}
	set(&r.Requests, reqCPU, reqMem)
	set(&r.Limits, limCPU, limMem)
	return r
}

func webPod(rs ...corev1.ResourceRequirements) *corev1.Pod {
	yes := true
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", GenerateName: "web-7d9f-", Labels: map[string]string{"pod-template-hash": "7d9f"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-7d9f", Controller: &yes}}}}
	for i, r := range rs {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: []string{"app", "side"}[i], Resources: r})
	}
	return p
}

func TestDecide(t *testing.T) {
	app := report.Key{Workload: web, Container: "app"}
	side := report.Key{Workload: web, Container: "side"}
	both := recs{app: rec(0.25, 256<<20), side: rec(0.05, 64<<20)}
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		pols    pols
		recs    recs
		result  string
		qos     corev1.PodQOSClass
		wantApp corev1.ResourceRequirements
		event   bool
	}{
		{"burstable, keep ratio", webPod(res("1", "1Gi", "2", "2Gi")), pols{pol(t, v1alpha1.ModeAuto, v1alpha1.LimitsKeepRatio)}, both,
			ResultApplied, corev1.PodQOSBurstable, res("250m", "256Mi", "500m", "512Mi"), false},
		{"guaranteed stays guaranteed", webPod(res("1", "1Gi", "1", "1Gi"), res("100m", "100Mi", "100m", "100Mi")), pols{pol(t, v1alpha1.ModeAuto, v1alpha1.LimitsUnset)}, both,
			ResultApplied, corev1.PodQOSGuaranteed, res("250m", "256Mi", "250m", "256Mi"), false},
		{"limits unset", webPod(res("1", "1Gi", "2", "2Gi")), pols{pol(t, v1alpha1.ModeAuto, v1alpha1.LimitsUnset)}, both,
			ResultApplied, corev1.PodQOSBurstable, res("250m", "256Mi", "", ""), false},
		{"requests only", webPod(res("1", "1Gi", "", "")), pols{pol(t, v1alpha1.ModeAuto, "")}, both,
			ResultApplied, corev1.PodQOSBurstable, res("250m", "256Mi", "", ""), false},
		{"keep clamps below the limit, would become guaranteed", webPod(res("100m", "64Mi", "200m", "128Mi")), pols{pol(t, v1alpha1.ModeAuto, v1alpha1.LimitsKeep)}, recs{app: rec(1, 1<<30)},
			ResultQOS, corev1.PodQOSBurstable, res("100m", "64Mi", "200m", "128Mi"), true},
		{"best effort", webPod(corev1.ResourceRequirements{}), pols{pol(t, v1alpha1.ModeAuto, "")}, both,
			ResultQOS, corev1.PodQOSBestEffort, corev1.ResourceRequirements{}, false},
		{"no recommendation", webPod(res("1", "1Gi", "", "")), pols{pol(t, v1alpha1.ModeAuto, "")}, recs{},
			ResultNoRecommendation, corev1.PodQOSBurstable, res("1", "1Gi", "", ""), true},
		{"in-place policy", webPod(res("1", "1Gi", "", "")), pols{pol(t, v1alpha1.ModeInPlace, "")}, both,
			ResultNotAuto, corev1.PodQOSBurstable, res("1", "1Gi", "", ""), false},
		{"two policies", webPod(res("1", "1Gi", "", "")), pols{pol(t, v1alpha1.ModeAuto, ""), pol(t, v1alpha1.ModeAuto, "")}, both,
			ResultConflict, corev1.PodQOSBurstable, res("1", "1Gi", "", ""), true},
		{"no policy", webPod(res("1", "1Gi", "", "")), nil, both,
			ResultNoPolicy, corev1.PodQOSBurstable, res("1", "1Gi", "", ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := &events{}
			h := New(tc.recs, tc.pols, ev, nil)
			h.Leader = func() bool { return true }
			raw, _ := json.Marshal(tc.pod)
			review := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
				Request: &admissionv1.AdmissionRequest{UID: "u1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: "shop",
					Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}}
			body, _ := json.Marshal(review)
			rr := httptest.NewRecorder()
			h.ServeHTTP(rr, httptest.NewRequest(http.MethodPost, PathMutate, bytes.NewReader(body)))
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rr.Body.Bytes(), &out); err != nil || out.Response == nil || !out.Response.Allowed || out.Response.UID != "u1" {
				t.Fatalf("response %s (%v)", rr.Body.String(), err)
			}
			got := tc.pod
			if len(out.Response.Patch) > 0 {
				patch, err := jsonpatch.DecodePatch(out.Response.Patch)
				if err != nil {
					t.Fatal(err)
				}
				patched, err := patch.Apply(raw)
				if err != nil {
					t.Fatalf("patch does not apply: %v", err)
				}
				got = &corev1.Pod{}
				json.Unmarshal(patched, got)
			}
			if q := QOSClass(got); q != tc.qos || q != QOSClass(tc.pod) {
				t.Errorf("QoS %s → %s, want %s kept", QOSClass(tc.pod), q, tc.qos)
			}
			if a := got.Spec.Containers[0].Resources; !equalRes(a, tc.wantApp) {
				t.Errorf("app resources %v / %v, want %v / %v", a.Requests, a.Limits, tc.wantApp.Requests, tc.wantApp.Limits)
			}
			if tc.result != ResultNoPolicy && tc.result != ResultNotAuto && got.Annotations[v1alpha1.AnnotationAdmission] == "" {
				t.Errorf("no %s annotation", v1alpha1.AnnotationAdmission)
			}
			if (len(ev.reasons) > 0) != tc.event {
				t.Errorf("events %v, want event=%v", ev.reasons, tc.event)
			}
			d := h.Decide(tc.pod)
			if d.Result != tc.result || d.Workload != web {
				t.Errorf("decision %s for %s, want %s for %s", d.Result, d.Workload, tc.result, web)
			}
		})
	}
}

func equalRes(a, b corev1.ResourceRequirements) bool {
	eq := func(x, y corev1.ResourceList) bool {
		if len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || v.Cmp(w) != 0 {
				return false
			}
		}
		return true
	}
	return eq(a.Requests, b.Requests) && eq(a.Limits, b.Limits)
}

func TestEventsRateLimited(t *testing.T) {
	ev := &events{}
	h := New(recs{}, pols{pol(t, v1alpha1.ModeAuto, "")}, ev, nil)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h.Now = func() time.Time { return now }
	pod := webPod(res("1", "1Gi", "", ""))
	raw, _ := json.Marshal(pod)
	req := &admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Kind: "Pod"}, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}
	for range 5 {
		h.review(req)
	}
	now = now.Add(11 * time.Minute)
	h.review(req)
	if len(ev.reasons) != 2 {
		t.Errorf("%d events, want 2 (one per 10 minutes)", len(ev.reasons))
	}
	// Garbage and a panic in a dependency admit the pod.
	if r := h.review(&admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Kind: "Pod"}, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte("{")}}); !r.Allowed {
		t.Error("garbage not admitted")
	}
	h.Policies = nil // Match on a nil interface panics
	if r := h.review(req); !r.Allowed || len(r.Patch) != 0 {
		t.Error("a panic did not fail open")
	}
}

// TestAppliesOnlyWhatAnAgentWould (issue 19: the webhook ignored
// FreshUntil, the matched policy and preset, avoid windows and the pod's
// pause, and its patch could break a ResourceQuota so that the pod was
// rejected instead of admitted unchanged).
func TestAppliesOnlyWhatAnAgentWould(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 30, 0, 0, time.UTC)
	app := report.Key{Workload: web, Container: "app"}
	fresh := func(mod func(*report.WorkloadRecommendation)) recs {
		r := rec(0.25, 256<<20)
		r.FreshUntil = now.Add(time.Minute)
		if mod != nil {
			mod(r)
		}
		return recs{app: r}
	}
	withSpec := func(mod func(*v1alpha1.RightsizePolicySpec)) pols {
		s := v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeAuto, Limits: v1alpha1.LimitsKeepRatio}
		mod(&s)
		return pols{compiled(t, s)}
	}
	auto := pols{pol(t, v1alpha1.ModeAuto, v1alpha1.LimitsKeepRatio)}
	paused := webPod(res("1", "1Gi", "2", "2Gi"))
	paused.Annotations = map[string]string{v1alpha1.AnnotationResizePausedUntil: now.Add(time.Hour).Format(time.RFC3339)}
	pausedBefore := webPod(res("1", "1Gi", "2", "2Gi"))
	pausedBefore.Annotations = map[string]string{v1alpha1.AnnotationResizePausedUntil: now.Add(-time.Hour).Format(time.RFC3339)}
	quota := func(hardCPU, usedCPU string) []*corev1.ResourceQuota {
		return []*corev1.ResourceQuota{{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: "shop"},
			Status: corev1.ResourceQuotaStatus{Hard: corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse(hardCPU)},
				Used: corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse(usedCPU)}}}}
	}
	small := webPod(res("100m", "64Mi", "", ""))
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		pols   pols
		recs   recs
		quotas []*corev1.ResourceQuota
		result string
		note   string
	}{
		{"fresh, matched", webPod(res("1", "1Gi", "2", "2Gi")), auto, fresh(nil), nil, ResultApplied, "applied"},
		{"past FreshUntil", webPod(res("1", "1Gi", "2", "2Gi")), auto, fresh(func(r *report.WorkloadRecommendation) { r.FreshUntil = now }), nil, ResultStale, "stale-recommendation"},
		{"of another policy", webPod(res("1", "1Gi", "2", "2Gi")), auto, fresh(func(r *report.WorkloadRecommendation) { r.Policy = "loose" }), nil, ResultStale, "stale-recommendation"},
		{"of another preset", webPod(res("1", "1Gi", "2", "2Gi")), auto, fresh(func(r *report.WorkloadRecommendation) { r.Preset = "cgpilot-fleet" }), nil, ResultStale, "stale-recommendation"},
		{"the policy's own preset", webPod(res("1", "1Gi", "2", "2Gi")), withSpec(func(s *v1alpha1.RightsizePolicySpec) { s.Preset = "cgpilot-fleet" }),
			fresh(func(r *report.WorkloadRecommendation) { r.Preset = "cgpilot-fleet" }), nil, ResultApplied, "applied"},
		{"in an avoid window", webPod(res("1", "1Gi", "2", "2Gi")), withSpec(func(s *v1alpha1.RightsizePolicySpec) {
			s.AvoidWindows = []v1alpha1.AvoidWindow{{Schedule: "0 12 * * *", Duration: metav1.Duration{Duration: time.Hour}}}
		}), fresh(nil), nil, ResultOptedOut, "avoid-window"},
		{"outside the avoid window", webPod(res("1", "1Gi", "2", "2Gi")), withSpec(func(s *v1alpha1.RightsizePolicySpec) {
			s.AvoidWindows = []v1alpha1.AvoidWindow{{Schedule: "0 12 * * *", Duration: metav1.Duration{Duration: 20 * time.Minute}}}
		}), fresh(nil), nil, ResultApplied, "applied"},
		{"the pod paused", paused, auto, fresh(nil), nil, ResultOptedOut, "paused"},
		{"the pod's pause over", pausedBefore, auto, fresh(nil), nil, ResultApplied, "applied"},
		{"raised past the quota the pod fits", small, auto, fresh(nil), quota("1", "800m"), ResultQuota, "quota"},
		{"raised within the quota", small, auto, fresh(nil), quota("2", "800m"), ResultApplied, "applied"},
		{"lowered under a full quota", webPod(res("1", "1Gi", "2", "2Gi")), auto, fresh(nil), quota("1", "1"), ResultApplied, "applied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New(tc.recs, tc.pols, &events{}, nil)
			h.Now = func() time.Time { return now }
			if tc.quotas != nil {
				h.Quotas = func(ns string) []*corev1.ResourceQuota {
					if ns != "shop" {
						t.Errorf("quotas of %q", ns)
					}
					return tc.quotas
				}
			}
			d := h.Decide(tc.pod)
			got := ""
			for _, op := range d.Patch {
				if v, ok := op.Value.(string); ok && op.Path == "/metadata/annotations/cgpilot.io~1admission" {
					got = v
				} else if m, ok := op.Value.(map[string]string); ok {
					got = m[v1alpha1.AnnotationAdmission]
				}
			}
			if d.Result != tc.result || got != tc.note {
				t.Errorf("result %s, annotation %q; want %s, %q (%s)", d.Result, got, tc.result, tc.note, d.Note)
			}
			resized := false
			for _, op := range d.Patch {
				if op.Path == "/spec/containers/0/resources" {
					resized = true
				}
			}
			if resized != (tc.result == ResultApplied) {
				t.Errorf("resources patched: %v, result %s", resized, d.Result)
			}
		})
	}
}

// admit runs one admission review of pod through h and returns the pod
// the API server would store.
func admit(t *testing.T, h *Handler, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	raw, _ := json.Marshal(pod)
	out := h.review(&admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: pod.Namespace,
		Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}})
	if !out.Allowed {
		t.Fatal("not admitted")
	}
	got := &corev1.Pod{}
	if len(out.Patch) == 0 {
		return pod
	}
	patch, err := jsonpatch.DecodePatch(out.Patch)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("patch does not apply: %v", err)
	}
	if err := json.Unmarshal(patched, got); err != nil {
		t.Fatal(err)
	}
	return got
}

type limits struct {
	lr    policy.LimitRange
	alloc policy.Values
}

func (l limits) LimitRange(string) policy.LimitRange { return l.lr }
func (l limits) LargestAllocatable() policy.Values   { return l.alloc }

// TestDecideClamps: whatever the merged recommendation says, the pod gets
// values within its policy, its namespace's LimitRange and the largest
// node (issue 19: a forged report moved a recommendation to 1,814 cores
// and 1.7 TB, and the webhook wrote it into new pods).
func TestDecideClamps(t *testing.T) {
	one, gi, mi256 := resource.MustParse("1"), resource.MustParse("1Gi"), resource.MustParse("256Mi")
	bounded := compiled(t, v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeAuto,
		CPU: &v1alpha1.ResourcePolicy{MaxAllowed: &one}, Memory: &v1alpha1.ResourcePolicy{MinAllowed: &mi256, MaxAllowed: &gi}})
	app := report.Key{Workload: web, Container: "app"}
	side := report.Key{Workload: web, Container: "side"}
	for _, tc := range []struct {
		name    string
		pol     *policy.Policy
		limits  Limits
		recs    recs
		pod     *corev1.Pod
		wantApp corev1.ResourceRequirements
		clamped string
	}{
		{"forged 1800 cores and 1.7 TB, policy max 1 core and 1Gi", bounded, nil, recs{app: rec(1800, 1.7e12)},
			webPod(res("500m", "512Mi", "1", "1Gi")), res("1", "1Gi", "2", "2Gi"), "PolicyMaxAllowed"},
		{"forged 0.1 core and 100 MiB, policy min 256Mi", bounded, nil, recs{app: rec(0.1, 100<<20)},
			webPod(res("500m", "512Mi", "1", "1Gi")), res("100m", "256Mi", "200m", "512Mi"), "PolicyMinAllowed"},
		{"non-finite: the container is left as it is", bounded, nil, recs{app: rec(math.Inf(1), 300<<20)},
			webPod(res("500m", "512Mi", "1", "1Gi")), res("500m", "300Mi", "1", "600Mi"), "NonFinite"},
		{"LimitRange max, min and ratio", pol(t, v1alpha1.ModeAuto, v1alpha1.LimitsKeep),
			limits{lr: policy.LimitRange{Max: policy.Values{CPU: 2, Memory: 2 << 30}, Min: policy.Values{CPU: 0.2}, MaxLimitRequestRatio: policy.Values{CPU: 2}}},
			recs{app: rec(0.05, 3<<30)}, webPod(res("500m", "512Mi", "1", "2Gi")), res("500m", "2Gi", "1", "2Gi"), "LimitRangeMin"},
		{"the largest node bounds the pod's requests together", pol(t, v1alpha1.ModeAuto, ""),
			limits{alloc: policy.Values{CPU: 4, Memory: 16 << 30}}, recs{app: rec(6, 1<<30), side: rec(6, 1<<30)},
			webPod(res("1", "1Gi", "", ""), res("1", "1Gi", "", "")), res("2", "1Gi", "", ""), "NodeAllocatable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := &events{}
			h := New(tc.recs, pols{tc.pol}, ev, nil)
			h.Limits = tc.limits
			got := admit(t, h, tc.pod)
			if a := got.Spec.Containers[0].Resources; !equalRes(a, tc.wantApp) {
				t.Errorf("app resources %v / %v, want %v / %v", a.Requests, a.Limits, tc.wantApp.Requests, tc.wantApp.Limits)
			}
			if got.Annotations[v1alpha1.AnnotationAdmission] != "applied" || !strings.Contains(got.Annotations[AnnotationClamped], tc.clamped) {
				t.Errorf("annotations %v, want applied and a clamp by %s", got.Annotations, tc.clamped)
			}
			if !slices.Contains(ev.reasons, "RecommendationClamped") {
				t.Errorf("events %v", ev.reasons)
			}
			if QOSClass(got) != QOSClass(tc.pod) {
				t.Errorf("QoS %s → %s", QOSClass(tc.pod), QOSClass(got))
			}
		})
	}
}

// TestDecideAnnotations: a pod's cgpilot.io/resize counts only as its
// policy allows; a refused one is reported on the policy and the
// policy's mode applies.
func TestDecideAnnotations(t *testing.T) {
	app := report.Key{Workload: web, Container: "app"}
	strict := pol(t, v1alpha1.ModeAuto, "")
	lenient := compiled(t, v1alpha1.RightsizePolicySpec{Mode: v1alpha1.ModeAuto, AllowPodModeOverride: true})
	for _, tc := range []struct {
		name   string
		pol    *policy.Policy
		value  string
		result string
		event  string
	}{
		{"off, not allowed: applied anyway", strict, v1alpha1.ResizeOff, ResultApplied, "AnnotationRefused"},
		{"off, allowed: opted out", lenient, v1alpha1.ResizeOff, ResultOptedOut, ""},
		{"in-place, allowed: running pods only", lenient, v1alpha1.ResizeInPlace, ResultOptedOut, ""},
		{"garbage: the policy's mode", lenient, "always", ResultApplied, "AnnotationRefused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := &events{}
			h := New(recs{app: rec(0.25, 256<<20)}, pols{tc.pol}, ev, nil)
			pod := webPod(res("1", "1Gi", "", ""))
			pod.Annotations = map[string]string{v1alpha1.AnnotationResize: tc.value}
			got := admit(t, h, pod)
			if d := h.Decide(pod); d.Result != tc.result {
				t.Errorf("result %s, want %s", d.Result, tc.result)
			}
			if (tc.event != "") != slices.Contains(ev.reasons, tc.event) || (tc.event == "" && len(ev.reasons) > 0) {
				t.Errorf("events %v, want %q", ev.reasons, tc.event)
			}
			if applied := got.Annotations[v1alpha1.AnnotationAdmission] == "applied"; applied != (tc.result == ResultApplied) {
				t.Errorf("admission %q", got.Annotations[v1alpha1.AnnotationAdmission])
			}
		})
	}
}

type undecided struct{}

func (undecided) Match(string, map[string]string) ([]*policy.Policy, []string) {
	return nil, []string{"team-web"}
}

// TestDecideNamespaceUnknown: a namespace the cache does not hold yet is
// never guessed: the pod is admitted unchanged and says why.
func TestDecideNamespaceUnknown(t *testing.T) {
	h := New(recs{}, undecided{}, &events{}, nil)
	got := admit(t, h, webPod(res("1", "1Gi", "", "")))
	if got.Annotations[v1alpha1.AnnotationAdmission] != "namespace-unknown" || h.Decide(got).Result != ResultNoPolicy {
		t.Errorf("annotations %v", got.Annotations)
	}
}
