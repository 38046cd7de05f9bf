package runner

import (
	"time"

	"github.com/cgpilot/cgpilot/agent/podspec"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
)

// report.go: what right-sizing tells the reporter (agent/reporter) of
// the pods it tracks: the changes the applier made and the pods the
// aggregator's webhook did not see.

// reportAdjusted records a change the applier made, or failed to make
// (errText), to the pod's containers.
func (r *Runner) reportAdjusted(p *corev1.Pod, ch change, errText string) {
	if r.rep == nil {
		return
	}
	r.mu.Lock()
	var wl report.Workload
	if rp := r.pods[string(p.UID)]; rp != nil {
		wl = rp.workload
	}
	r.mu.Unlock()
	if wl == (report.Workload{}) {
		return
	}
	reason := report.ReasonRecommendation
	if ch.reason == "OOMBump" {
		reason = report.ReasonOOM
	}
	for _, spec := range p.Spec.Containers {
		to, ok := ch.containers[spec.Name]
		if !ok {
			continue
		}
		req, lim := podspec.Requirements(spec.Resources)
		r.rep.Adjusted(report.Key{Workload: wl, Container: spec.Name}.String(), p.Name, time.Now(), rightsize.Requirements{Requests: req, Limits: lim}, to, reason, errText)
	}
}

// unadmitted counts, per workload container, the pods an Auto policy
// covers that carry no cgpilot.io/admission annotation: the aggregator's
// webhook did not see them (it fails open).
func (r *Runner) unadmitted() map[report.Key]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[report.Key]int{}
	for uid, rp := range r.pods {
		if rp.decision.Mode != rightsize.ModeAuto {
			continue
		}
		p := r.host.PodByUID(uid)
		if p == nil {
			continue
		}
		if _, ok := p.Annotations[v1alpha1.AnnotationAdmission]; ok {
			continue
		}
		for name := range rp.containers {
			out[report.Key{Workload: rp.workload, Container: name}]++
		}
	}
	return out
}
