package reschedule

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgpilot/cgpilot/api/report"
)

// PathEvictions is where the eviction webhook answers: a
// ValidatingWebhookConfiguration on pods/eviction CREATE whose
// matchConditions let only the descheduler's user through. It is under
// /admission/ beside the mutating webhook: the same caller (the API
// server) passes the same gate.
const PathEvictions = "/admission/evictions"

// Denial codes (the metric's reason label and Move.Code).
const (
	CodeCapNode     = "cap_node"
	CodeCapWorkload = "cap_workload"
	CodeCapHour     = "cap_hour"
	CodeDaemonSet   = "daemonset"
	CodeMirror      = "static_or_mirror"
	CodeLocal       = "local_storage"
	CodeBare        = "no_controller"
	CodeNoPod       = "pod_unreadable"
)

// maxReviewBytes bounds an AdmissionReview of an Eviction (a few hundred
// bytes; the API server sends no pod with it).
const maxReviewBytes = 64 << 10

// Forbidden says why the rescheduler never moves pod ("" when it may): a
// DaemonSet's pod (it would come back on the same node), a static or
// mirror pod (the kubelet owns it), a pod with local storage (emptyDir or
// hostPath: its data would be lost), a pod without a controller (nothing
// would re-create it). The descheduler's DefaultEvictor skips them too;
// this is the webhook's second wall.
func Forbidden(pod *corev1.Pod) (code, why string) {
	if _, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return CodeMirror, "cgpilot never moves a static or mirror pod"
	}
	if src, ok := pod.Annotations["kubernetes.io/config.source"]; ok && src != "api" {
		return CodeMirror, "cgpilot never moves a static or mirror pod"
	}
	ctrl := metav1.GetControllerOf(pod)
	switch {
	case ctrl == nil:
		return CodeBare, "cgpilot never moves a pod without a controller: nothing would re-create it"
	case ctrl.Kind == "DaemonSet":
		return CodeDaemonSet, "cgpilot never moves a DaemonSet's pod"
	case ctrl.Kind == "Node":
		return CodeMirror, "cgpilot never moves a static or mirror pod"
	}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil || v.HostPath != nil {
			return CodeLocal, fmt.Sprintf("cgpilot never moves a pod with local storage (volume %s)", v.Name)
		}
	}
	return "", ""
}

// Evictions is the eviction webhook's handler (POST PathEvictions on the
// HTTPS server, behind the gate of the API server's client certificate).
func (r *Rescheduler) Evictions() http.Handler { return http.HandlerFunc(r.serveAdmission) }

func (r *Rescheduler) serveAdmission(w http.ResponseWriter, req *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(io.LimitReader(req.Body, maxReviewBytes)).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "want an AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
	defer cancel()
	resp := r.Admit(ctx, review.Request)
	resp.UID = review.Request.UID
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

// Admit judges one eviction: not the descheduler's, not an eviction of a
// pod, or a dry run: allowed untouched. Else the pod is read: a forbidden
// pod, or a move over a cap, is refused with the reason; otherwise the
// move is recorded and its amount taken off its node's queue entry.
func (r *Rescheduler) Admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	if req.UserInfo.Username != r.cfg.DeschedulerUser || req.SubResource != "eviction" || req.Resource.Resource != "pods" ||
		req.Operation != admissionv1.Create || (req.DryRun != nil && *req.DryRun) {
		r.m.evictions.WithLabelValues("allowed", "not_ours").Inc()
		return allow
	}
	now := r.now()
	pod, err := r.cluster.Pod(ctx, req.Namespace, req.Name)
	if err != nil {
		return r.deny(now, &Move{Time: now, Namespace: req.Namespace, Pod: req.Name}, CodeNoPod, "cgpilot could not read the pod: "+err.Error())
	}
	if pod == nil {
		r.m.evictions.WithLabelValues("allowed", "no_pod").Inc()
		return allow // the eviction answers 404 itself
	}
	m := r.moveOf(pod, now)
	if code, why := Forbidden(pod); code != "" {
		return r.deny(now, m, code, why)
	}
	// A PodDisruptionBudget that allows no disruption now: the API server
	// refuses the eviction itself (with its own message), so it is no
	// move: it neither counts against the caps nor leaves the queue. One
	// record per pod and hour says so.
	pdb, err := r.cluster.BlockingPDB(ctx, pod)
	if err == nil && pdb != "" {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.m.evictions.WithLabelValues("allowed", "pdb").Inc()
		if o := r.recentLocked(m, StateFailed, "pdb", now); o != nil {
			o.Repeats++
		} else {
			m.State, m.Code, m.Detail, m.Done = StateFailed, "pdb", fmt.Sprintf("not evicted: PodDisruptionBudget %s/%s allows no disruption", m.Namespace, pdb), now
			if e := r.queue[m.Node]; e != nil {
				m.Reason = e.Reason
			}
			r.recordLocked(m)
			r.m.outcomes.WithLabelValues(OutcomeFailed).Inc()
		}
		return allow
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if code, why := r.capLocked(m, now); code != "" {
		return r.denyLocked(now, m, code, why)
	}
	m.State = StateAdmitted
	reason := "not_queued"
	if e := r.queue[m.Node]; e != nil && e.open() {
		m.Reason = e.Reason
		reason = "queued"
		c, mm := m.amount(e.Reason)
		e.CPU -= c
		e.Memory -= mm
		e.Moves++
		r.gaugesLocked()
	}
	r.recordLocked(m)
	r.m.evictions.WithLabelValues("allowed", reason).Inc()
	r.log.Info("move admitted", "pod", m.Namespace+"/"+m.Pod, "node", m.Node, "reason", m.Reason)
	return allow
}

// moveOf is a new record of the pod's move with what it counts for.
func (r *Rescheduler) moveOf(pod *corev1.Pod, now time.Time) *Move {
	var owner *report.Owner
	m := &Move{Time: now, Namespace: pod.Namespace, Pod: pod.Name, Node: pod.Spec.NodeName, podUID: pod.UID, selector: pod.Labels}
	if c := metav1.GetControllerOf(pod); c != nil {
		owner = &report.Owner{Kind: c.Kind, Name: c.Name}
		m.owner = c.UID
	}
	m.Workload = report.WorkloadOf(pod.Namespace, pod.Name, owner, pod.Labels, nil)
	var reqCPU, reqMem float64
	for _, c := range pod.Spec.Containers {
		reqCPU += c.Resources.Requests.Cpu().AsApproximateFloat64()
		reqMem += c.Resources.Requests.Memory().AsApproximateFloat64()
	}
	m.PeakCPU, m.PeakMem, m.UsageCPU, m.UsageMem = reqCPU, reqMem, reqCPU, reqMem
	if info, ok := r.src.Workload(m.Workload, now); ok {
		if info.PeakPodCPU > 0 || info.PeakPodMem > 0 {
			m.PeakCPU, m.PeakMem = info.PeakPodCPU, info.PeakPodMem
		}
		if info.PerPodCPU > 0 || info.PerPodMem > 0 {
			m.UsageCPU, m.UsageMem = info.PerPodCPU, info.PerPodMem
		}
	}
	// Its use now is best told by its node's latest report.
	if _, cpu, mem, ok := r.src.Placed(m.Node, m.Workload); ok {
		m.UsageCPU, m.UsageMem = cpu, mem
	}
	return m
}

// recentLocked returns the pod's record in state with code from the last
// hour (nil when none).
func (r *Rescheduler) recentLocked(m *Move, state, code string, now time.Time) *Move {
	for i := len(r.moves) - 1; i >= 0 && !r.moves[i].Time.Before(now.Add(-time.Hour)); i-- {
		if o := r.moves[i]; o.podUID == m.podUID && o.Namespace == m.Namespace && o.Pod == m.Pod && o.State == state && o.Code == code {
			return o
		}
	}
	return nil
}

// capLocked checks the caps over the moves admitted in the last hour.
func (r *Rescheduler) capLocked(m *Move, now time.Time) (code, why string) {
	var node, wl, all int
	since := now.Add(-time.Hour)
	for i := len(r.moves) - 1; i >= 0; i-- {
		o := r.moves[i]
		if o.Time.Before(since) {
			break
		}
		if o.State == StateDenied || (o.State == StateFailed && (o.Code == "pdb" || o.Code == "not_evicted")) {
			continue // no pod went
		}
		all++
		if o.Node == m.Node {
			node++
		}
		if o.Workload == m.Workload {
			wl++
		}
	}
	switch {
	case all >= r.cfg.PerHour || r.cfg.PerHour < 0:
		return CodeCapHour, fmt.Sprintf("cgpilot's cap: %d moves in the last hour (at most %d)", all, max(0, r.cfg.PerHour))
	case node >= r.cfg.PerNode || r.cfg.PerNode < 0:
		return CodeCapNode, fmt.Sprintf("cgpilot's cap: %d moves from node %s in the last hour (at most %d)", node, m.Node, max(0, r.cfg.PerNode))
	case wl >= r.cfg.PerWorkload || r.cfg.PerWorkload < 0:
		return CodeCapWorkload, fmt.Sprintf("cgpilot's cap: %d moves of %s in the last hour (at most %d)", wl, m.Workload, max(0, r.cfg.PerWorkload))
	}
	return "", ""
}

// deny records and refuses a move.
func (r *Rescheduler) deny(now time.Time, m *Move, code, why string) *admissionv1.AdmissionResponse {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.denyLocked(now, m, code, why)
}

func (r *Rescheduler) denyLocked(now time.Time, m *Move, code, why string) *admissionv1.AdmissionResponse {
	// The descheduler asks again every cycle while a cap holds: one record
	// per pod, reason and hour, counting the repeats.
	if o := r.recentLocked(m, StateDenied, code, now); o != nil {
		o.Repeats++
	} else {
		m.State, m.Code, m.Detail, m.Done = StateDenied, code, why, now
		r.recordLocked(m)
	}
	r.m.evictions.WithLabelValues("denied", code).Inc()
	r.log.V(1).Info("move denied", "pod", m.Namespace+"/"+m.Pod, "node", m.Node, "why", why)
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden,
		Reason: metav1.StatusReasonForbidden, Message: why}}
}
