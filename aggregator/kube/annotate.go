package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
)

// NodeAnnotator writes each reporting node's usage profile as the JSON of
// v1alpha1.AnnotationUsageProfile, when it changed by more than Change
// (relative, any value) or is older than MaxAge, at most Budget patches a
// second.
type NodeAnnotator struct {
	Client   kubernetes.Interface
	Profiles *profile.Profiles
	Log      logr.Logger
	// Interval between passes (default 5 min), Change (default 0.05),
	// MaxAge (default 6 h), Budget (default 10 patches/s).
	Interval, MaxAge time.Duration
	Change, Budget   float64
	Now              func() time.Time

	last    map[string]written
	patches *prometheus.CounterVec
}

type written struct {
	s  profile.Summary
	at time.Time
}

// NewNodeAnnotator returns a NodeAnnotator registered with reg.
func NewNodeAnnotator(cs kubernetes.Interface, p *profile.Profiles, log logr.Logger, reg prometheus.Registerer) *NodeAnnotator {
	a := &NodeAnnotator{Client: cs, Profiles: p, Log: log, Now: time.Now, last: map[string]written{},
		patches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_node_annotations_total",
			Help: "Usage-profile annotation patches of Nodes by result: ok, error."}, []string{"result"})}
	if reg != nil {
		reg.MustRegister(a.patches)
	}
	return a
}

func (a *NodeAnnotator) defaults() {
	a.Interval = cmp.Or(a.Interval, 5*time.Minute)
	a.MaxAge = cmp.Or(a.MaxAge, 6*time.Hour)
	a.Change = cmp.Or(a.Change, 0.05)
	a.Budget = cmp.Or(a.Budget, 10)
}

// Run annotates until ctx ends.
func (a *NodeAnnotator) Run(ctx context.Context) {
	a.defaults()
	t := time.NewTicker(a.Interval)
	defer t.Stop()
	for {
		a.Pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func changed(a, b, rel float64) bool {
	return math.Abs(a-b) > rel*math.Max(math.Abs(a), math.Abs(b))
}

func (a *NodeAnnotator) due(old written, s profile.Summary, now time.Time) bool {
	if old.at.IsZero() || now.Sub(old.at) >= a.MaxAge || old.s.Days != s.Days ||
		old.s.CPU.Hour != s.CPU.Hour || old.s.Memory.Hour != s.Memory.Hour {
		return true
	}
	for _, p := range [][2]float64{{old.s.CPU.Max7d, s.CPU.Max7d}, {old.s.CPU.PeakHour, s.CPU.PeakHour},
		{old.s.Memory.Max7d, s.Memory.Max7d}, {old.s.Memory.PeakHour, s.Memory.PeakHour}} {
		if changed(p[0], p[1], a.Change) {
			return true
		}
	}
	return false
}

// Pass patches the nodes whose profile is due, within the budget of one
// interval, and returns how many it patched.
func (a *NodeAnnotator) Pass(ctx context.Context) int {
	a.defaults()
	now := a.Now()
	budget := int(math.Ceil(a.Budget * a.Interval.Seconds()))
	n := 0
	for _, info := range a.Profiles.Nodes(now) {
		if n >= budget || ctx.Err() != nil {
			break
		}
		s := info.Profile
		if info.Stale || s.Days == 0 || !a.due(a.last[info.Name], s, now) {
			continue
		}
		value, err := json.Marshal(UsageProfile(s, now))
		if err != nil {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationUsageProfile: string(value)}}})
		if _, err := a.Client.CoreV1().Nodes().Patch(ctx, info.Name, types.MergePatchType, patch, metav1PatchOptions); err != nil {
			a.patches.WithLabelValues("error").Inc()
			a.Log.V(1).Info("annotating a node failed", "node", info.Name, "err", err.Error())
			continue
		}
		a.patches.WithLabelValues("ok").Inc()
		a.last[info.Name] = written{s: s, at: now}
		n++
	}
	return n
}
