package runner

import (
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/cgpilot/cgpilot/agent/collector"
	"github.com/cgpilot/cgpilot/agent/history"
	"github.com/cgpilot/cgpilot/agent/kube"
	"github.com/cgpilot/cgpilot/agent/oomwatch"
	"github.com/cgpilot/cgpilot/agent/reporter"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/internal/loop"
)

// host.go: what the agent gives right-sizing (Host, Options) and the
// names right-sizing's loops and metrics go by. The runner holds no
// pointer back to the agent's controller: the pods it reads, the Events it
// sends and the status worker that patches its annotation are the Host's.

// Host is the agent's side of right-sizing.
type Host interface {
	// PodByUID is the informer's pod of that UID, nil when there is none.
	PodByUID(uid string) *corev1.Pod
	// Pod is the informer's pod namespace/name.
	Pod(namespace, name string) (*corev1.Pod, error)
	// HoldsExclusive says whether the pod runs on cores of its own (the
	// pools' or the kubelet's static CPU manager's): its CPU request and
	// quota are not right-sized.
	HoldsExclusive(p *corev1.Pod) bool
	// Emit records an Event about who (the Node when nil).
	Emit(who *PodRef, ev Event)
	// QueueStatus hands a key to the agent's status worker, which calls
	// WriteRecommendation for keys with RecKeyPrefix.
	QueueStatus(key string)
	// Pods are the informer's pods of the node.
	Pods() []*corev1.Pod
	// Manages says whether the agent manages the pod (its namespace, not
	// the kubelet's static CPU manager's, not finished).
	Manages(p *corev1.Pod) bool
	// Requeue queues the pod for a reconcile (which calls Track).
	Requeue(p *corev1.Pod)
	// RequeueAfter queues the pod for a reconcile after d.
	RequeueAfter(p *corev1.Pod, d time.Duration)
}

// PodRef names a pod an Event is about.
type PodRef struct{ UID, Namespace, Name string }

// Event is one Event right-sizing reports on a pod or the Node.
type Event struct {
	Warning         bool
	Reason, Message string
}

// The loops of right-sizing, as the loop label of
// cgpilot_recovered_panics_total.
const (
	LoopPolicyEvents = "policy-informer" // the RightsizePolicy and namespace informers' handlers (policies.go)
	LoopSample       = "sample"          // the sampling rounds and their sinks (the collector)
	LoopDecide       = "decide"          // the decision rounds (runner.go)
	LoopResize       = "resize"          // the applier, per pod key (apply.go)
	LoopOOM          = "oom"             // the OOM watcher's consumer: OOM bumps (oom.go)
	LoopCheckpoint   = "checkpoint"      // the histograms' checkpoints (runner.go)
	LoopOwners       = "owners"          // the owner lookups of ReplicaSets and Jobs (workload.go)
)

// Options are what New needs: the parts the agent built from its
// configuration (the histograms, the history, the OOM watcher, the
// reporter: nil when off) and the agent's shared tools.
type Options struct {
	Host    Host
	Kube    kube.Interface
	Cgroups *cgroup.Kubepods
	Log     logr.Logger
	Guard   *loop.Guard
	// Spawn runs f in a goroutine the agent waits for before it returns.
	Spawn func(f func())
	// Metrics are right-sizing's series (NewMetrics); Writes and Drift
	// are the agent's cgroup-write and drift counters, shared with the
	// pools.
	Metrics       *Metrics
	Writes, Drift prometheus.Counter
	Registerer    prometheus.Registerer

	Engine   *rightsize.Engine
	History  *history.Store
	OOM      *oomwatch.Watcher // nil: no OOM watcher
	Reporter *reporter.Reporter

	NodeName           string
	ResyncPeriod       time.Duration
	SampleInterval     time.Duration
	CheckpointInterval time.Duration
	ForgetAfter        time.Duration
	// HousekeepEvery is how often Sweep walks every pod (the unsampled
	// safety net, forgetting gone workloads, pending reverts); 0: every
	// Sweep.
	HousekeepEvery time.Duration
	// AggregatorURL is logged when reporting starts.
	AggregatorURL string
}

// New builds right-sizing: sampling (its collector feeds the histograms,
// the history, the runner's floors and the reporter), the applier and the
// bounds. Nothing here talks to the API server.
func New(o Options) *Runner {
	r := newRunner(o)
	sinks := []collector.Sink{o.Engine, o.History, r}
	if o.Reporter != nil {
		sinks = append(sinks, o.Reporter)
	}
	r.coll = collector.New(collector.Options{Interval: o.SampleInterval, Registerer: o.Registerer, Sinks: sinks, Guard: o.Guard, Loop: LoopSample})
	r.apply = newApplier(r, false)
	r.bounds = newNodeBounds(o.Kube, o.NodeName, o.ResyncPeriod, o.Log.WithName("bounds"))
	return r
}

// Metrics are right-sizing's Prometheus series.
type Metrics struct {
	decisions  *prometheus.CounterVec // by state
	recChanges prometheus.Counter
	resizes    *prometheus.CounterVec // by result
	oomKills   *prometheus.CounterVec // by cgroup: container, unknown
	oomBumps   *prometheus.CounterVec // by result
	oomLatency prometheus.Histogram
	resizeTime *prometheus.HistogramVec // by phase
	clamped    *prometheus.CounterVec   // by path: resize, oom
	unsampled  prometheus.Counter       // pods requeued by the sweep: a running container not sampled
}

// NewMetrics makes right-sizing's series; the agent registers them
// (Collectors) whether right-sizing is on or not.
func NewMetrics(buckets []float64) *Metrics {
	return &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_rightsize_decisions_total",
			Help: "Right-sizing decisions by state: Resize, DryRun, Unchanged, InsufficientHistory, Paused, AvoidWindow, ResizePending, StepWait, NotAdjustable, Conflict, InvalidPolicy, Off."}, []string{"state"}),
		recChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "cgpilot_rightsize_dryrun_changes_total",
			Help: "Dry-run recommendations that changed."}),
		resizes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_resizes_total",
			Help: "Changes of requests and limits by result: accepted (pods/resize), applied (the kubelet and the cgroups show it), cgroups (written directly), failed."}, []string{"result"}),
		oomKills: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_oom_kills_total",
			Help: "OOM kills seen, by whose cgroup: container (a tracked container), unknown."}, []string{"cgroup"}),
		oomBumps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_oom_bumps_total",
			Help: "Memory raises after an OOM kill by result: written, failed (the direct cgroup write; pods/resize goes on), gone (the container's cgroup was already removed: its successor gets the raise through pods/resize), at-limit (no limit, maxOOMBumpsPerDay, or at the clamp's ceiling), not-applied (no InPlace policy), refused (pods/resize refused the raise: the cgroups went back to the spec), same-oom (a kill from before the container's last raise was written: another process of the same OOM, as memory.oom.group kills them all on cgroup v2)."}, []string{"result"}),
		oomLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cgpilot_oom_bump_latency_seconds",
			Help: "From an OOM kill (the kernel's time where known) to the raised limit written in the cgroup.", Buckets: buckets}),
		resizeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "cgpilot_resize_seconds",
			Help:    "From a decision to change a pod's resources to pods/resize accepting it (phase=accepted), and to the kubelet's status and the cgroups showing it (phase=applied).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{"phase"}),
		clamped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_rightsize_clamped_total",
			Help: "Changes a bound moved before they were applied (policy min/max, LimitRange, node allocatable, usage floor), by path: resize, oom."}, []string{"path"}),
		unsampled: prometheus.NewCounter(prometheus.CounterOpts{Name: "cgpilot_unsampled_requeues_total",
			Help: "Pods the sweep queued again because a running container of theirs was not sampled (its cgroup was not readable when the pod's last event was handled)."}),
	}
}

// Collectors are the series to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.unsampled, m.clamped, m.decisions, m.recChanges, m.resizes, m.oomKills, m.oomBumps, m.oomLatency, m.resizeTime}
}
