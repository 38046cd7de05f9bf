package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/cgpilot/cgpilot/agent/kube"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
)

// policystatus.go: each node's agent writes its own entry of a
// RightsizePolicy's status.nodes by server-side apply (its own field
// manager owns that entry, so nodes never conflict), and the totals as the
// sums of the entries it sees. Writes are rate-limited and happen only when
// the node's counts change.

// nodeStatusMark is what this node last wrote for a policy.
type nodeStatusMark struct {
	entry string // the JSON of the node's counts and the validity
	at    time.Time
}

// statusMinInterval bounds how often one node writes one policy's status.
const statusMinInterval = 30 * time.Second

// nodeCounts are this node's counts for one policy.
type nodeCounts struct {
	matched, adjusted int32
	notAdjustable     map[string]int32
}

func (r *Runner) countsByPolicy() map[string]*nodeCounts {
	out := map[string]*nodeCounts{}
	pi := r.policies()
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, rp := range r.pods {
		p := r.host.PodByUID(uid)
		if p == nil {
			continue
		}
		matched := pi.match(p)
		for _, pol := range matched {
			n := out[pol.Name]
			if n == nil {
				n = &nodeCounts{notAdjustable: map[string]int32{}}
				out[pol.Name] = n
			}
			n.matched++
			if !rp.lastApplied.IsZero() {
				n.adjusted++
			}
			switch {
			case len(matched) > 1:
				n.notAdjustable["MatchedByTwoPolicies"]++
			case rp.decision.State == rightsize.StateNotAdjustable:
				n.notAdjustable["BestEffort"]++
			case rp.decision.State == rightsize.StateInvalid:
				n.notAdjustable["InvalidPolicy"]++
			default:
				for _, cd := range rp.decision.Containers {
					if cd.CPUNote == rightsize.NoteExclusiveCPUs {
						n.notAdjustable["ExclusiveCPUs"]++
						break
					}
				}
			}
		}
	}
	return out
}

// countDue says whether the policies' status is counted at a sweep tick at
// now: asked (a policy changed), owed (again passed), or every since the
// last count (counted).
func countDue(now, counted, again time.Time, asked bool, every time.Duration) bool {
	return asked || (!again.IsZero() && !now.Before(again)) || now.Sub(counted) >= every
}

// writePolicyStatus applies this node's entry of every policy whose
// counts changed (or that is invalid, so its condition says why). It
// returns when an entry it could not write yet is owed (zero: none): a
// failed write at once, one held back by statusMinInterval when that has
// passed.
func (r *Runner) writePolicyStatus(ctx context.Context) (again time.Time) {
	pi := r.policies()
	if pi == nil {
		return time.Time{}
	}
	dyn := r.dyn
	if dyn == nil {
		return time.Time{}
	}
	owe := func(at time.Time) {
		if again.IsZero() || at.Before(again) {
			again = at
		}
	}
	counts := r.countsByPolicy()
	now := time.Now()
	for _, cp := range pi.all() {
		name := cp.obj.Name
		n := counts[name]
		if n == nil {
			n = &nodeCounts{notAdjustable: map[string]int32{}}
		}
		valid := "True"
		msg := "the node agent accepted the policy"
		if cp.err != nil {
			valid, msg = "False", cp.err.Error()
		}
		mark, _ := json.Marshal([]any{n.matched, n.adjusted, n.notAdjustable, valid, msg, cp.obj.Generation})
		prev := r.statusWritten[name]
		if prev.entry == string(mark) {
			continue
		}
		if now.Sub(prev.at) < statusMinInterval {
			owe(prev.at.Add(statusMinInterval))
			continue
		}
		if err := r.applyPolicyStatus(ctx, dyn, cp, n, valid, msg, now); err != nil {
			r.log.V(1).Info("policy status not written; retried at the next sweep", "policy", name, "err", err.Error())
			owe(now)
			continue
		}
		r.statusWritten[name] = nodeStatusMark{entry: string(mark), at: now}
	}
	return again
}

func (r *Runner) applyPolicyStatus(ctx context.Context, dyn dynamic.Interface, cp *compiledPolicy, n *nodeCounts, valid, msg string, now time.Time) error {
	node := r.cfg.NodeName
	entry := v1alpha1.NodePolicyStatus{Node: node, MatchedPods: n.matched, AdjustedPods: n.adjusted, ObservedGeneration: cp.obj.Generation,
		LastUpdateTime: metav1.NewTime(now.UTC().Truncate(time.Second))}
	if len(n.notAdjustable) > 0 {
		entry.NotAdjustable = maps.Clone(n.notAdjustable)
	}
	// Totals: every other node's entry as this node sees it, plus its own.
	var matched, adjusted int32
	reasons := map[string]int32{}
	nodes := []v1alpha1.NodePolicyStatus{entry}
	for _, e := range cp.obj.Status.Nodes {
		if e.Node != node {
			nodes = append(nodes, e)
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Node < nodes[j].Node })
	for _, e := range nodes {
		matched += e.MatchedPods
		adjusted += e.AdjustedPods
		for k, v := range e.NotAdjustable {
			reasons[k] += v
		}
	}
	status := map[string]any{
		"observedGeneration": cp.obj.Generation,
		"matchedPods":        matched,
		"adjustedPods":       adjusted,
		"lastUpdateTime":     metav1.NewTime(now.UTC().Truncate(time.Second)),
		"nodes":              []v1alpha1.NodePolicyStatus{entry},
		"conditions": []metav1.Condition{{Type: "Valid", Status: metav1.ConditionStatus(valid), ObservedGeneration: cp.obj.Generation,
			LastTransitionTime: metav1.NewTime(now.UTC().Truncate(time.Second)), Reason: map[string]string{"True": "Accepted", "False": "Invalid"}[valid], Message: msg}},
	}
	if len(reasons) > 0 {
		status["notAdjustable"] = reasons
	}
	body, err := json.Marshal(map[string]any{"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "RightsizePolicy",
		"metadata": map[string]any{"name": cp.obj.Name}, "status": status})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, kube.PatchTimeout)
	defer cancel()
	force := true
	_, err = dyn.Resource(v1alpha1.RightsizePolicies).Patch(ctx, cp.obj.Name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: fmt.Sprintf("cgpilot-agent/%s", node), Force: &force}, "status")
	return err
}
