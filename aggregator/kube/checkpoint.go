package kube

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/aggregator/state"
	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
	"github.com/cgpilot/cgpilot/internal/loop"
)

// GVRs of the resources the aggregator reads and writes.
var (
	WorkloadRecommendations = v1alpha1.WorkloadRecommendations
	RightsizePolicies       = v1alpha1.RightsizePolicies
)

// FieldManager is the aggregator's server-side-apply field manager.
const FieldManager = "cgpilot-aggregator"

// Labels on every WorkloadRecommendation the aggregator writes; Load
// reads only objects that carry them.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "cgpilot-aggregator"
)

// Bounds of one object (see v1alpha1.WorkloadRecommendation).
const (
	MaxContainers = 32
	MaxStateBytes = 24 << 10
)

// ObjectName is the WorkloadRecommendation name of a workload:
// "<kind>-<name>" in lower case, shortened with a hash past 253 bytes.
func ObjectName(w report.Workload) string {
	n := strings.ToLower(w.Kind) + "-" + w.Name
	if len(n) <= 253 {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	return n[:240] + "-" + hex.EncodeToString(sum[:])[:12]
}

func cpuQ(cores float64) *resource.Quantity {
	q := policy.CPUQuantity(cores)
	return &q
}

func memQ(bytes float64) *resource.Quantity {
	q := policy.MemoryQuantity(bytes)
	return &q
}

func estimate(e report.Estimate, q func(float64) *resource.Quantity) *v1alpha1.ResourceRecommendation {
	r := &v1alpha1.ResourceRecommendation{Target: *q(e.Target)}
	if e.Lower > 0 {
		r.LowerBound = q(e.Lower)
	}
	if e.Upper > 0 {
		r.UpperBound = q(e.Upper)
	}
	if e.Limit > 0 {
		r.Limit = q(e.Limit)
	}
	return r
}

func amounts(r report.Resources) *v1alpha1.ResourceAmounts {
	if r.CPURequest == 0 && r.MemoryRequest == 0 {
		return nil
	}
	return &v1alpha1.ResourceAmounts{CPU: cpuQ(r.CPURequest), Memory: memQ(r.MemoryRequest)}
}

// UsageProfile converts a profile summary to the API type.
func UsageProfile(s profile.Summary, now time.Time) *v1alpha1.UsageProfile {
	return &v1alpha1.UsageProfile{
		CPU:    v1alpha1.ResourceUsageProfile{Max7d: *cpuQ(s.CPU.Max7d), PeakHour: *cpuQ(s.CPU.PeakHour), PeakHourOfDay: int32(s.CPU.Hour)},
		Memory: v1alpha1.ResourceUsageProfile{Max7d: *memQ(s.Memory.Max7d), PeakHour: *memQ(s.Memory.PeakHour), PeakHourOfDay: int32(s.Memory.Hour)},
		Days:   int32(s.Days), UpdateTime: metav1.NewTime(now.UTC().Truncate(time.Second)),
	}
}

// ToObject is the WorkloadRecommendation of a workload's checkpoint
// (containers past MaxContainers, or with state past MaxStateBytes, are
// left out or stored without state, and say so in Reason).
func ToObject(ws state.WorkloadState, prof *profile.Summary, now time.Time) *v1alpha1.WorkloadRecommendation {
	w := ws.Workload
	obj := &v1alpha1.WorkloadRecommendation{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "WorkloadRecommendation"},
		ObjectMeta: metav1.ObjectMeta{Name: ObjectName(w), Namespace: w.Namespace, Labels: map[string]string{LabelManagedBy: ManagedBy, "app.kubernetes.io/part-of": "cgpilot"}},
		Spec:       v1alpha1.WorkloadRecommendationSpec{Workload: v1alpha1.WorkloadReference{Kind: w.Kind, Name: w.Name}},
	}
	st := &obj.Status
	var cpu, mem, reqCPU, reqMem float64
	var updated time.Time
	haveRec := false
	for i, cs := range ws.Containers {
		if i >= MaxContainers {
			break
		}
		e := cs.Entry
		if obj.Spec.Policy == "" {
			obj.Spec.Policy, obj.Spec.Preset = e.Policy, e.Preset
		}
		c := v1alpha1.ContainerRecommendation{Name: e.Key.Container, Samples: e.Samples, Adjustable: e.Adjustable, Reason: e.Reason,
			Requests: amounts(e.Current), OriginalRequests: amounts(e.Original)}
		if e.NotMergeable != "" {
			c.Reason = truncate(e.NotMergeable, 256)
		}
		if len(cs.State) <= MaxStateBytes {
			c.State = cs.State
		} else {
			c.Reason = truncate(fmt.Sprintf("state of %d bytes over the %d-byte bound: not checkpointed", len(cs.State), MaxStateBytes), 256)
		}
		if r := e.Rec; r != nil {
			c.CPU, c.Memory = estimate(r.CPU, cpuQ), estimate(r.Memory, memQ)
			cpu += r.CPU.Target
			mem += r.Memory.Target
			haveRec = true
			if r.Updated.After(updated) {
				updated = r.Updated
			}
		}
		reqCPU += e.Current.CPURequest
		reqMem += e.Current.MemoryRequest
		st.Samples += e.Samples
		st.Nodes = max(st.Nodes, int32(e.Nodes))
		st.Containers = append(st.Containers, c)
	}
	if haveRec {
		st.CPU, st.Memory = cpuQ(cpu), memQ(mem)
		t := metav1.NewTime(updated.UTC())
		st.UpdateTime = &t
	}
	if reqCPU > 0 || reqMem > 0 {
		st.RequestedCPU, st.RequestedMemory = cpuQ(reqCPU), memQ(reqMem)
	}
	if prof != nil && prof.Days > 0 {
		st.Profile = UsageProfile(*prof, now)
	}
	return obj
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// FromObject is the checkpoint a WorkloadRecommendation holds; freshFor
// is how long a restored recommendation stays fresh for agents after its
// update time.
func FromObject(obj *v1alpha1.WorkloadRecommendation, freshFor time.Duration) (state.WorkloadState, error) {
	w := report.Workload{Namespace: obj.Namespace, Kind: obj.Spec.Workload.Kind, Name: obj.Spec.Workload.Name}
	if err := w.Validate(); err != nil {
		return state.WorkloadState{}, fmt.Errorf("%s/%s: %w", obj.Namespace, obj.Name, err)
	}
	ws := state.WorkloadState{Workload: w}
	for _, c := range obj.Status.Containers {
		e := state.Entry{Key: report.Key{Workload: w, Container: c.Name}, Policy: obj.Spec.Policy, Preset: obj.Spec.Preset,
			Samples: c.Samples, Adjustable: c.Adjustable, Reason: c.Reason, Nodes: int(obj.Status.Nodes)}
		if err := e.Key.Validate(); err != nil {
			return state.WorkloadState{}, fmt.Errorf("%s/%s: %w", obj.Namespace, obj.Name, err)
		}
		if r := c.Requests; r != nil {
			e.Current = report.Resources{CPURequest: qf(r.CPU), MemoryRequest: qf(r.Memory)}
		}
		if r := c.OriginalRequests; r != nil {
			e.Original = report.Resources{CPURequest: qf(r.CPU), MemoryRequest: qf(r.Memory)}
		}
		if c.CPU != nil && c.Memory != nil && obj.Status.UpdateTime != nil {
			up := obj.Status.UpdateTime.Time
			e.Rec = &report.WorkloadRecommendation{Key: e.Key, Policy: e.Policy, Preset: e.Preset, Nodes: e.Nodes, Samples: e.Samples,
				Updated: up, FreshUntil: up.Add(freshFor), Recommendation: report.Recommendation{CPU: est(c.CPU), Memory: est(c.Memory)}}
		}
		ws.Containers = append(ws.Containers, state.ContainerState{Entry: e, State: c.State})
	}
	return ws, nil
}

func qf(q *resource.Quantity) float64 {
	if q == nil {
		return 0
	}
	return q.AsApproximateFloat64()
}

func est(r *v1alpha1.ResourceRecommendation) report.Estimate {
	return report.Estimate{Target: r.Target.AsApproximateFloat64(), Lower: qf(r.LowerBound), Upper: qf(r.UpperBound), Limit: qf(r.Limit)}
}

// Checkpointer writes the store's changed workloads as
// WorkloadRecommendation objects within a write budget, deletes those of
// workloads gone, and loads them all at start.
type Checkpointer struct {
	Client   dynamic.Interface
	Store    *state.Store
	Profiles *profile.Profiles
	Log      logr.Logger
	// Interval between passes (default 10 s); Budget the writes per
	// second (default 20: a 50,000-workload cluster is written in full
	// every 42 minutes, within what one API server takes beside its
	// other clients); MinAge how long a workload waits after its last
	// write (default 5 min).
	Interval, MinAge time.Duration
	Budget           float64
	// Expire drops workloads no report mentioned for this long (default
	// 7 days) and deletes their objects.
	Expire time.Duration
	Now    func() time.Time

	written map[report.Workload]time.Time
	writes  *prometheus.CounterVec
	latency prometheus.Histogram
	loaded  prometheus.Counter
}

// NewCheckpointer returns a Checkpointer registered with reg.
func NewCheckpointer(c dynamic.Interface, s *state.Store, p *profile.Profiles, log logr.Logger, reg prometheus.Registerer) *Checkpointer {
	cp := &Checkpointer{Client: c, Store: s, Profiles: p, Log: log, Now: time.Now, written: map[report.Workload]time.Time{},
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_checkpoint_writes_total",
			Help: "WorkloadRecommendation writes by result: ok, error, deleted."}, []string{"result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cgpilot_aggregator_checkpoint_write_seconds",
			Help: "Time of one WorkloadRecommendation write.", Buckets: prometheus.ExponentialBuckets(0.002, 2.5, 9)}),
		loaded: prometheus.NewCounter(prometheus.CounterOpts{Name: "cgpilot_aggregator_checkpoints_loaded_total",
			Help: "WorkloadRecommendation objects restored at start or takeover."}),
	}
	if reg != nil {
		reg.MustRegister(cp.writes, cp.latency, cp.loaded)
	}
	return cp
}

func (c *Checkpointer) defaults() {
	c.Interval = cmp.Or(c.Interval, 10*time.Second)
	c.MinAge = cmp.Or(c.MinAge, 5*time.Minute)
	c.Budget = cmp.Or(c.Budget, 20)
	c.Expire = cmp.Or(c.Expire, 7*24*time.Hour)
}

// Load restores every WorkloadRecommendation the aggregator wrote into
// the store, page by page, and returns how many it restored. An object
// that does not decode is logged and skipped: one bad object
// must not keep the aggregator from starting.
func (c *Checkpointer) Load(ctx context.Context) (int, error) {
	c.defaults()
	cfg := c.Store.Config()
	fresh := report.FreshFor(cfg.Step, cfg.Period, cfg.Grace)
	now := c.Now()
	n, cont := 0, ""
	for {
		list, err := c.Client.Resource(WorkloadRecommendations).List(ctx, metav1.ListOptions{
			LabelSelector: LabelManagedBy + "=" + ManagedBy, Limit: 500, Continue: cont})
		if err != nil {
			return n, fmt.Errorf("kube: list workloadrecommendations: %w", err)
		}
		for i := range list.Items {
			var obj v1alpha1.WorkloadRecommendation
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &obj); err != nil {
				c.Log.Error(err, "skipping a WorkloadRecommendation that does not decode", "namespace", list.Items[i].GetNamespace(), "name", list.Items[i].GetName())
				continue
			}
			ws, err := FromObject(&obj, fresh)
			if err == nil {
				err = c.Store.Restore(ws, now)
			}
			if err != nil {
				c.Log.Error(err, "restoring a WorkloadRecommendation (partly) failed", "namespace", obj.Namespace, "name", obj.Name)
			}
			c.written[ws.Workload] = now
			c.loaded.Inc()
			n++
		}
		if cont = list.GetContinue(); cont == "" {
			return n, nil
		}
	}
}

// Run writes changed workloads until ctx ends.
func (c *Checkpointer) Run(ctx context.Context) {
	c.defaults()
	loop.Every(ctx, c.Interval, func() { c.Pass(ctx) })
}

// Pass writes at most Budget × Interval changed workloads (those written
// longest ago first) and deletes the objects of expired workloads.
func (c *Checkpointer) Pass(ctx context.Context) {
	c.defaults()
	now := c.Now()
	for _, w := range c.Store.Expire(now.Add(-c.Expire)) {
		err := c.Client.Resource(WorkloadRecommendations).Namespace(w.Namespace).Delete(ctx, ObjectName(w), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			c.Log.Error(err, "deleting the WorkloadRecommendation of a workload gone", "workload", w.String())
			continue
		}
		delete(c.written, w)
		c.writes.WithLabelValues("deleted").Inc()
		if c.Profiles != nil {
			c.Profiles.Forget([]report.Workload{w}, time.Time{})
		}
	}
	budget := int(math.Ceil(c.Budget * c.Interval.Seconds()))
	dirty := c.Store.Dirty()
	due := dirty[:0]
	for _, w := range dirty {
		if now.Sub(c.written[w]) >= c.MinAge {
			due = append(due, w)
		}
	}
	// Longest unwritten first.
	sortByTime(due, c.written)
	for i, w := range due {
		if i >= budget || ctx.Err() != nil {
			return
		}
		if err := c.Write(ctx, w); err != nil {
			c.Log.Error(err, "writing a WorkloadRecommendation", "workload", w.String())
		}
	}
}

// Write exports one workload from the store and applies its object.
func (c *Checkpointer) Write(ctx context.Context, w report.Workload) error {
	now := c.Now()
	ws := c.Store.Export(w, now)
	var prof *profile.Summary
	if c.Profiles != nil {
		if info, ok := c.Profiles.Workload(w, now); ok {
			prof = &info.Profile
		}
	}
	obj := ToObject(ws, prof, now)
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		c.Store.MarkDirty(w)
		return err
	}
	t0 := time.Now()
	_, err = c.Client.Resource(WorkloadRecommendations).Namespace(w.Namespace).Apply(ctx, obj.Name, &unstructured.Unstructured{Object: u},
		metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	c.latency.Observe(time.Since(t0).Seconds())
	if err != nil {
		// Retried after MinAge, not on every pass: a namespace being
		// deleted must not eat the budget of the others.
		c.writes.WithLabelValues("error").Inc()
		c.Store.MarkDirty(w)
		c.written[w] = now
		return fmt.Errorf("kube: apply %s/%s: %w", w.Namespace, obj.Name, err)
	}
	c.writes.WithLabelValues("ok").Inc()
	c.written[w] = now
	return nil
}
