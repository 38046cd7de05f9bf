// Package webhook is the aggregator's mutating admission webhook for
// RightsizePolicies in mode Auto: a new pod of a workload gets the
// workload's merged recommendation as its containers' requests (limits
// follow the policy's limits setting), so it starts right-sized instead of
// being resized in place after it starts.
//
// It applies only what an agent would apply now: a recommendation that is
// fresh (FreshUntil) and was computed under the policy that matches the
// pod, with its preset; never while the policy is paused, in one of its
// avoid windows, or the pod's own cgpilot.io/resize-paused-until; and never
// one that would make the pod exceed a ResourceQuota of its namespace that
// the pod as written fits (the quota admission would then reject a pod
// that would have been admitted unchanged). Quotas are checked with every
// scope applying (a quota scoped away from the pod only makes the webhook
// more careful).
//
// The policy is resolved by the compiler the agents use
// (api/v1alpha1/policy): the same policies select the same pods, a pod's
// cgpilot.io/resize counts only as the policy allows (Policy.ForPod), and
// every value passes policy.Clamp before it reaches the patch: the
// policy's minAllowed and maxAllowed, the namespace's LimitRange and the
// largest node's allocatable, so that a forged merged recommendation
// (1,800 cores, 0.1 core) cannot produce a pod outside its policy or one
// the LimitRanger would reject. What the clamp moved is written to
// cgpilot.io/admission-clamped and reported with an Event.
//
// It never changes a pod's QoS class: a BestEffort pod is left alone, a
// Guaranteed pod keeps its limits equal to its requests, and any other
// mutation that would move the class is dropped. It fails open: without a
// recommendation, with an error, or when this replica is not the leader,
// the pod is admitted unchanged, counted in
// cgpilot_aggregator_admission_total{result} and (rate-limited) reported
// with an Event on the policy; the pod gets cgpilot.io/admission saying
// why. When the webhook cannot be reached at all, the
// MutatingWebhookConfiguration's failurePolicy Ignore admits the pod and
// the API server counts it (apiserver_admission_webhook_fail_open_count);
// agents report such pods (report.Container.Unadmitted) and the
// aggregator counts those too.
//
// It imports k8s.io/api (admission, core), api/report (the workload rule),
// api/v1alpha1 and its compiler api/v1alpha1/policy; no client-go beyond
// the Event recorder's interface (LimitRanges and nodes reach it through
// Handler.Limits, as plain values).
package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// PathMutate is where the webhook answers.
const PathMutate = "/admission/mutate"

// Results of one admission (the metric's label and, but for applied and
// no_policy, the reason in cgpilot.io/admission).
const (
	ResultApplied          = "applied"
	ResultNoPolicy         = "no_policy"
	ResultNotAuto          = "not_auto"
	ResultOptedOut         = "opted_out"
	ResultConflict         = "conflict"
	ResultNoRecommendation = "no_recommendation"
	ResultQOS              = "qos_class"
	ResultNotLeader        = "not_leader"
	ResultError            = "error"
	// ResultStale: the recommendations are past FreshUntil, or of another
	// policy or preset than the pod's; ResultQuota: applying them would
	// exceed a ResourceQuota the pod fits as written.
	ResultStale = "stale_recommendation"
	ResultQuota = "quota"
)

// Recommendations gives the merged recommendation of a workload-container.
type Recommendations interface {
	Recommendation(report.Key) *report.WorkloadRecommendation
}

// Matcher finds the compiled policies that match a new pod, and those it
// cannot decide yet (a namespace not cached).
type Matcher interface {
	Match(namespace string, podLabels map[string]string) (matched []*policy.Policy, undecided []string)
}

// Limits gives what bounds a new pod besides its policy: the namespace's
// LimitRanges merged (policy.AddLimitRangeItem), and the largest node's
// allocatable (0 when unknown).
type Limits interface {
	LimitRange(namespace string) policy.LimitRange
	LargestAllocatable() policy.Values
}

// AnnotationClamped is written next to cgpilot.io/admission when the
// clamp moved a recommended value: each bound that did, e.g. "app cpu
// request 1800→1 (PolicyMaxAllowed)".
const AnnotationClamped = "cgpilot.io/admission-clamped"

// maxClampedBytes bounds AnnotationClamped.
const maxClampedBytes = 1024

// Recorder emits Events (client-go's events.EventRecorder).
type Recorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// Handler serves PathMutate.
type Handler struct {
	Recs     Recommendations
	Policies Matcher
	// Limits bounds the mutation besides the policy (nil: the policy's
	// bounds and the package's ceilings only).
	Limits Limits
	// Quotas lists a namespace's ResourceQuotas (nil: none checked).
	Quotas func(namespace string) []*corev1.ResourceQuota
	Events Recorder
	// Parent looks up a ReplicaSet's or Job's controller (nil: the
	// workload rule's fallbacks).
	Parent func(namespace string) report.ParentFunc
	Leader func() bool
	Now    func() time.Time
	// EventEvery rate-limits Events per workload and reason (default 10 min).
	EventEvery time.Duration

	mu         sync.Mutex
	lastEvent  map[string]time.Time
	admissions *prometheus.CounterVec
	latency    prometheus.Histogram
}

// New returns a Handler registered with reg.
func New(recs Recommendations, pol Matcher, ev Recorder, reg prometheus.Registerer) *Handler {
	h := &Handler{Recs: recs, Policies: pol, Events: ev, Now: time.Now, lastEvent: map[string]time.Time{},
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_admission_total",
			Help: "Pods seen by the admission webhook, by result: applied, no_policy, not_auto, opted_out, conflict, no_recommendation, stale_recommendation, qos_class, quota, not_leader, error."}, []string{"result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cgpilot_aggregator_admission_seconds",
			Help: "Time to answer one admission review.", Buckets: []float64{.0005, .001, .005, .01, .05, .1, .5}}),
	}
	for _, r := range []string{ResultApplied, ResultNoPolicy, ResultNotAuto, ResultOptedOut, ResultConflict, ResultNoRecommendation, ResultQOS, ResultNotLeader, ResultError,
		ResultStale, ResultQuota} {
		h.admissions.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(h.admissions, h.latency)
	}
	return h
}

// Register adds the handler to mux.
func (h *Handler) Register(mux *http.ServeMux) { mux.Handle("POST "+PathMutate, h) }

// maxReviewBytes bounds an AdmissionReview (a pod is at most ~1.5 MiB in etcd).
const maxReviewBytes = 4 << 20

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	defer func() { h.latency.Observe(time.Since(t0).Seconds()) }()
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(io.LimitReader(r.Body, maxReviewBytes)).Decode(&review); err != nil || review.Request == nil {
		h.admissions.WithLabelValues(ResultError).Inc()
		http.Error(w, "want an admission.k8s.io/v1 AdmissionReview", http.StatusBadRequest)
		return
	}
	resp := h.review(review.Request)
	resp.UID = review.Request.UID
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	if out.APIVersion == "" {
		out.APIVersion, out.Kind = "admission.k8s.io/v1", "AdmissionReview"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// review decides, recovering from any panic by admitting the pod as is.
func (h *Handler) review(req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse) {
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	defer func() {
		if p := recover(); p != nil {
			h.admissions.WithLabelValues(ResultError).Inc()
			resp = allow
		}
	}()
	if req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create {
		return allow
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		h.admissions.WithLabelValues(ResultError).Inc()
		return allow
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	if h.Leader != nil && !h.Leader() {
		h.admissions.WithLabelValues(ResultNotLeader).Inc()
		return allow
	}
	d := h.Decide(&pod)
	h.admissions.WithLabelValues(d.Result).Inc()
	if d.Event != "" && d.Policy != nil {
		h.event(d)
	}
	if d.Refused != "" && d.Policy != nil {
		h.event(Decision{Result: "refused", Workload: d.Workload, Policy: d.Policy, Event: "AnnotationRefused", Note: d.Refused})
	}
	if len(d.Clamped) > 0 && d.Policy != nil {
		h.event(Decision{Result: "clamped", Workload: d.Workload, Policy: d.Policy, Event: "RecommendationClamped", Note: policy.Bindings(d.Clamped)})
	}
	if len(d.Patch) == 0 {
		return allow
	}
	patch, err := json.Marshal(d.Patch)
	if err != nil {
		return allow
	}
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}
}

func (h *Handler) event(d Decision) {
	every := h.EventEvery
	if every == 0 {
		every = 10 * time.Minute
	}
	key := d.Workload.String() + "|" + d.Result
	now := h.Now()
	h.mu.Lock()
	if last, ok := h.lastEvent[key]; ok && now.Sub(last) < every {
		h.mu.Unlock()
		return
	}
	h.lastEvent[key] = now
	if len(h.lastEvent) > 10000 {
		for k, t := range h.lastEvent {
			if now.Sub(t) >= every {
				delete(h.lastEvent, k)
			}
		}
	}
	h.mu.Unlock()
	if h.Events != nil {
		pol := d.Policy.DeepCopy()
		pol.APIVersion, pol.Kind = v1alpha1.SchemeGroupVersion.String(), "RightsizePolicy"
		switch d.Result {
		case "refused":
			h.Events.Eventf(pol, nil, corev1.EventTypeWarning, d.Event, "Admit", "pod of %s: annotations refused: %s", d.Workload, d.Note)
		case "clamped":
			h.Events.Eventf(pol, nil, corev1.EventTypeWarning, d.Event, "Admit", "pod of %s: the recommendation was clamped: %s", d.Workload, d.Note)
		default:
			h.Events.Eventf(pol, nil, corev1.EventTypeWarning, d.Event, "Admit", "pod of %s admitted unchanged: %s", d.Workload, d.Note)
		}
	}
}

// Op is one JSON patch operation.
type Op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Decision is what the webhook does with one pod.
type Decision struct {
	Result   string
	Workload report.Workload
	// Policy is the matched policy's object, Compiled the policy itself.
	Policy   *v1alpha1.RightsizePolicy
	Compiled *policy.Policy
	Patch    []Op
	// Event is the Event reason to report (empty: none); Note says why.
	Event, Note string
	// Refused are the pod's annotations its policy does not let it use
	// (policy.Effective.Why; the policy's values applied instead).
	Refused string
	// Clamped are the bounds that moved a recommended value.
	Clamped []policy.Binding
}

// Decide computes the mutation of a new pod.
func (h *Handler) Decide(pod *corev1.Pod) Decision {
	name := pod.Name
	if name == "" {
		name = pod.GenerateName
	}
	var owner *report.Owner
	if c := metav1.GetControllerOfNoCopy(pod); c != nil {
		owner = &report.Owner{Kind: c.Kind, Name: c.Name}
	}
	var parent report.ParentFunc
	if h.Parent != nil {
		parent = h.Parent(pod.Namespace)
	}
	d := Decision{Workload: report.WorkloadOf(pod.Namespace, name, owner, pod.Labels, parent)}
	pols, undecided := h.Policies.Match(pod.Namespace, pod.Labels)
	switch {
	case len(pols) == 0 && len(undecided) > 0:
		d.Result, d.Note = ResultNoPolicy, "the namespace is not in the policy cache yet"
		d.Patch = annotate(pod, "namespace-unknown")
		return d
	case len(pols) == 0:
		d.Result = ResultNoPolicy
		return d
	case len(pols) > 1:
		d.Result, d.Compiled, d.Policy, d.Event, d.Note = ResultConflict, pols[0], pols[0].Source, "MatchedByTwoPolicies", fmt.Sprintf("%d policies match it", len(pols))
		d.Patch = annotate(pod, "conflict")
		return d
	}
	pol := pols[0]
	d.Compiled, d.Policy = pol, pol.Source
	if pol.Mode != policy.ModeAuto {
		d.Result = ResultNotAuto
		return d
	}
	// The pod's annotations, as far as its policy lets them count.
	eff := pol.ForPod(pod.Annotations)
	d.Refused = eff.Why()
	if eff.Mode != policy.ModeAuto {
		d.Result = ResultOptedOut
		d.Patch = annotate(pod, "opted-out")
		return d
	}
	now := h.Now()
	_, podPause := pod.Annotations[v1alpha1.AnnotationResizePausedUntil]
	// A pause that does not parse pauses too: the pod's owner asked for
	// something, and changing its pod is the one thing not to do.
	if pu := pol.PausedUntil; (!pu.IsZero() && now.Before(pu)) || now.Before(eff.PausedUntil) || (podPause && eff.PausedUntil.IsZero()) {
		d.Result = ResultOptedOut
		d.Patch = annotate(pod, "paused")
		return d
	}
	if w := pol.InWindow(now); w != "" {
		d.Result, d.Note = ResultOptedOut, "in avoid window "+w
		d.Patch = annotate(pod, "avoid-window")
		return d
	}
	before := QOSClass(pod)
	if before == corev1.PodQOSBestEffort {
		d.Result, d.Note = ResultQOS, "a BestEffort pod would change class with requests"
		d.Patch = annotate(pod, "qos-class")
		return d
	}
	mutated, changed, stale := h.mutate(pod, d.Workload, pol, before == corev1.PodQOSGuaranteed, now, &d)
	if changed == 0 && stale > 0 {
		preset := pol.Preset
		if preset == "" {
			preset = recommend.DefaultPreset
		}
		d.Result, d.Event, d.Note = ResultStale, "StaleRecommendation",
			fmt.Sprintf("the merged recommendation is past its freshness or of another policy or preset than %s (%s)", pol.Name, preset)
		d.Patch = annotate(pod, "stale-recommendation")
		d.Clamped = nil
		return d
	}
	if changed == 0 {
		d.Result, d.Event, d.Note = ResultNoRecommendation, "NoRecommendation", "the aggregator has no merged recommendation for its containers yet"
		d.Patch = annotate(pod, "no-recommendation")
		d.Clamped = nil
		return d
	}
	if after := QOSClass(mutated); after != before {
		d.Result, d.Event, d.Note = ResultQOS, "WouldChangeQOSClass", fmt.Sprintf("the recommendation would move it from %s to %s", before, after)
		d.Patch = annotate(pod, "qos-class")
		d.Clamped = nil
		return d
	}
	if h.Quotas != nil {
		if q, r := exceeds(h.Quotas(pod.Namespace), pod, mutated); q != "" {
			d.Result, d.Event, d.Note = ResultQuota, "WouldExceedQuota",
				fmt.Sprintf("the recommendation would raise %s past ResourceQuota %s, which the pod as written fits", r, q)
			d.Patch = annotate(pod, "quota")
			d.Clamped = nil
			return d
		}
	}
	d.Result = ResultApplied
	for i := range mutated.Spec.Containers {
		d.Patch = append(d.Patch, Op{Op: "replace", Path: fmt.Sprintf("/spec/containers/%d/resources", i), Value: mutated.Spec.Containers[i].Resources})
	}
	d.Patch = append(d.Patch, annotate(pod, "applied")...)
	if len(d.Clamped) > 0 {
		msg := policy.Bindings(d.Clamped)
		if len(msg) > maxClampedBytes {
			msg = msg[:maxClampedBytes-3] + "..."
		}
		d.Patch = append(d.Patch, Op{Op: "add", Path: "/metadata/annotations/" + escape(AnnotationClamped), Value: msg})
	}
	return d
}

// mutate proposes each container's requests from its merged
// recommendation and its limits by the policy (a Guaranteed pod's equal
// to its requests), passes the whole pod through policy.Clamp and returns
// the pod with the clamped values, how many containers changed and how
// many recommendations were not used as stale (past FreshUntil, or of
// another policy or preset: what an agent would not apply now is not
// applied here either); the bounds that moved a value go to d.Clamped.
func (h *Handler) mutate(pod *corev1.Pod, w report.Workload, pol *policy.Policy, guaranteed bool, now time.Time, d *Decision) (*corev1.Pod, int, int) {
	mutated := pod.DeepCopy()
	preset := pol.Preset
	if preset == "" {
		preset = recommend.DefaultPreset
	}
	stale := 0
	cp := policy.ClampPod{Guaranteed: guaranteed, KeepRatio: pol.Limits == policy.LimitsKeepRatio}
	var idx []int // the containers with a recommendation, in cp's order
	for i := range mutated.Spec.Containers {
		c := &mutated.Spec.Containers[i]
		cur := policy.Requirements{Requests: policy.ValuesOf(c.Resources.Requests), Limits: policy.ValuesOf(c.Resources.Limits)}
		rec := h.Recs.Recommendation(report.Key{Workload: w, Container: c.Name})
		if rec != nil && (!now.Before(rec.FreshUntil) || rec.Policy != pol.Name || rec.Preset != preset) {
			stale++
			rec = nil
		}
		if rec == nil || !(rec.CPU.Target > 0) || !(rec.Memory.Target > 0) {
			// Kept as it is, but counted in the pod's totals.
			cp.Containers = append(cp.Containers, policy.ClampContainer{Name: c.Name, Current: cur, Want: cur})
			continue
		}
		idx = append(idx, i)
		want := propose(cur, policy.Values{CPU: rec.CPU.Target, Memory: rec.Memory.Target}, pol.Limits, guaranteed)
		cp.Containers = append(cp.Containers, policy.ClampContainer{Name: c.Name, Current: cur, Want: want})
	}
	if len(idx) == 0 {
		return mutated, 0, stale
	}
	var b policy.Bounds
	if h.Limits != nil {
		b = pol.Bounds(h.Limits.LimitRange(pod.Namespace), h.Limits.LargestAllocatable())
	} else {
		b = pol.Bounds(policy.LimitRange{}, policy.Values{})
	}
	out, binds := policy.Clamp(cp, b)
	d.Clamped = binds
	changed := 0
	for _, i := range idx {
		if write(&mutated.Spec.Containers[i], out[i]) {
			changed++
		}
	}
	return mutated, changed, stale
}

// propose is what a container's values would be with the recommended
// requests rec, its limits following the policy's limits setting:
// KeepRatio scales a limit with its request, Keep leaves it (and caps the
// request at it), Unset removes it; a Guaranteed pod's limits are its
// requests. A value the container does not have is not added but for
// requests (which a Burstable container may lack).
func propose(cur policy.Requirements, rec policy.Values, limits policy.Limits, guaranteed bool) policy.Requirements {
	want := policy.Requirements{Requests: rec}
	for _, r := range []struct {
		req, lim *float64
		oldReq   float64
		oldLim   float64
	}{
		{&want.Requests.CPU, &want.Limits.CPU, cur.Requests.CPU, cur.Limits.CPU},
		{&want.Requests.Memory, &want.Limits.Memory, cur.Requests.Memory, cur.Limits.Memory},
	} {
		switch {
		case guaranteed:
			*r.lim = *r.req
		case r.oldLim == 0:
		case limits == policy.LimitsUnset:
		case limits == policy.LimitsKeep:
			*r.lim, *r.req = r.oldLim, min(*r.req, r.oldLim)
		case r.oldReq > 0: // KeepRatio
			*r.lim = *r.req * r.oldLim / r.oldReq
		default: // a limit without a request: the limit stays and caps the request
			*r.lim, *r.req = r.oldLim, min(*r.req, r.oldLim)
		}
	}
	return want
}

// write sets c's requests and limits to v (in whole millicores and
// bytes): a limit of 0 is removed. It returns whether anything changed.
func write(c *corev1.Container, v policy.Requirements) bool {
	before := c.Resources.DeepCopy()
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	c.Resources.Requests[corev1.ResourceCPU] = policy.CPUQuantity(v.Requests.CPU)
	c.Resources.Requests[corev1.ResourceMemory] = policy.MemoryQuantity(v.Requests.Memory)
	for _, l := range []struct {
		name corev1.ResourceName
		v    float64
		q    func(float64) resource.Quantity
	}{{corev1.ResourceCPU, v.Limits.CPU, policy.CPUQuantity}, {corev1.ResourceMemory, v.Limits.Memory, policy.MemoryQuantity}} {
		switch {
		case l.v > 0:
			if c.Resources.Limits == nil {
				c.Resources.Limits = corev1.ResourceList{}
			}
			c.Resources.Limits[l.name] = l.q(l.v)
		case c.Resources.Limits != nil:
			delete(c.Resources.Limits, l.name)
		}
	}
	return !resourcesEqual(*before, c.Resources)
}

func resourcesEqual(a, b corev1.ResourceRequirements) bool {
	eq := func(x, y corev1.ResourceList) bool {
		if len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || v.Cmp(w) != 0 {
				return false
			}
		}
		return true
	}
	return eq(a.Requests, b.Requests) && eq(a.Limits, b.Limits)
}

// annotate is the patch that sets cgpilot.io/admission.
func annotate(pod *corev1.Pod, value string) []Op {
	if pod.Annotations == nil {
		return []Op{{Op: "add", Path: "/metadata/annotations", Value: map[string]string{v1alpha1.AnnotationAdmission: value}}}
	}
	return []Op{{Op: "add", Path: "/metadata/annotations/" + escape(v1alpha1.AnnotationAdmission), Value: value}}
}

// escape is JSON pointer escaping (RFC 6901).
func escape(s string) string {
	out := make([]byte, 0, len(s)+2)
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '~':
			out = append(out, '~', '0')
		case '/':
			out = append(out, '~', '1')
		default:
			out = append(out, s[i])
		}
	}
	return string(out)
}

// QOSClass is the pod's QoS class by the rules of the Kubernetes
// documentation (Guaranteed: every container has CPU and memory limits
// equal to its requests; BestEffort: no container has any request or
// limit; otherwise Burstable), over init and regular containers. The
// kubelet's helper lives in k8s.io/kubernetes, which the module must not
// import; TestQOSClassMatchesAPIServer checks this one against the API
// server's own computation.
func QOSClass(pod *corev1.Pod) corev1.PodQOSClass {
	all := append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
	some, guaranteed := false, true
	for _, c := range all {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			if (hasReq && !req.IsZero()) || (hasLim && !lim.IsZero()) {
				some = true
			}
			if !hasLim || lim.IsZero() || (hasReq && req.Cmp(lim) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !some:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

// quotaResources are the quota resources a pod's requests and limits
// count against (cpu and memory mean their requests).
var quotaResources = []struct {
	name      corev1.ResourceName
	resource  corev1.ResourceName
	fromLimit bool
}{
	{corev1.ResourceRequestsCPU, corev1.ResourceCPU, false}, {corev1.ResourceCPU, corev1.ResourceCPU, false},
	{corev1.ResourceRequestsMemory, corev1.ResourceMemory, false}, {corev1.ResourceMemory, corev1.ResourceMemory, false},
	{corev1.ResourceLimitsCPU, corev1.ResourceCPU, true}, {corev1.ResourceLimitsMemory, corev1.ResourceMemory, true},
}

// podAmount is what a pod counts against a quota resource: the sum over
// its containers, at least any one init container's, plus its overhead.
func podAmount(p *corev1.Pod, r corev1.ResourceName, fromLimit bool) resource.Quantity {
	get := func(c corev1.Container) resource.Quantity {
		l := c.Resources.Requests
		if fromLimit {
			l = c.Resources.Limits
		}
		return l[r]
	}
	var sum resource.Quantity
	for _, c := range p.Spec.Containers {
		q := get(c)
		sum.Add(q)
	}
	for _, c := range p.Spec.InitContainers {
		if q := get(c); q.Cmp(sum) > 0 {
			sum = q
		}
	}
	if o, ok := p.Spec.Overhead[r]; ok {
		sum.Add(o)
	}
	return sum
}

// exceeds returns the quota and resource that after would exceed while
// before fits ("" if none): applying the recommendation must not turn an
// admissible pod into one the quota admission rejects.
func exceeds(quotas []*corev1.ResourceQuota, before, after *corev1.Pod) (quota string, res corev1.ResourceName) {
	for _, q := range quotas {
		for _, qr := range quotaResources {
			hard, ok := q.Status.Hard[qr.name]
			if !ok {
				if hard, ok = q.Spec.Hard[qr.name]; !ok {
					continue
				}
			}
			used := q.Status.Used[qr.name]
			a, b := podAmount(after, qr.resource, qr.fromLimit), podAmount(before, qr.resource, qr.fromLimit)
			if a.Cmp(b) <= 0 {
				continue // not raised
			}
			withAfter, withBefore := used.DeepCopy(), used.DeepCopy()
			withAfter.Add(a)
			withBefore.Add(b)
			if withAfter.Cmp(hard) > 0 && withBefore.Cmp(hard) <= 0 {
				return q.Name, qr.name
			}
		}
	}
	return "", ""
}
