package extender

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/api/report"
)

// PathFilter is where the filter verb answers (urlPrefix + "/filter",
// filterVerb "filter").
const PathFilter = "/scheduler/filter"

// LoadSource is what the filter reads (profile.Profiles).
type LoadSource interface {
	NodeLoad(name string) (profile.Load, bool)
	Workload(w report.Workload, now time.Time) (profile.WorkloadInfo, bool)
	StaleAfter() time.Duration
}

// Filter serves PathFilter: it keeps a pod off every node where the sum of
// the 7-day peaks of the pods already there plus the pod's own expected
// peak would pass profile.Rule. It fails open: a node without a fresh
// load passes, and so does every node while this replica is a follower.
// Each node filtered out carries its reason in FailedAndUnresolvableNodes
// (preempting pods would not change the reports the loads come from), one
// sentence per resource, so the scheduler's FailedScheduling event counts
// them ("3 cgpilot: ...").
type Filter struct {
	Source LoadSource
	Rule   profile.Rule
	Now    func() time.Time
	// Leader reports whether this replica has the state (nil: always).
	Leader func() bool

	latency  prometheus.Histogram
	calls    *prometheus.CounterVec
	verdicts *prometheus.CounterVec
}

// NewFilter returns a Filter for rule registered with reg.
func NewFilter(src LoadSource, rule profile.Rule, reg prometheus.Registerer) *Filter {
	f := &Filter{Source: src, Rule: rule, Now: time.Now,
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cgpilot_aggregator_filter_seconds",
			Help: "Time to filter the candidate nodes of one pod.", Buckets: []float64{.0001, .0005, .001, .005, .01, .05, .1}}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_filter_total",
			Help: "Filter calls by result: ok, bad_request, open (a follower passes every node)."}, []string{"result"}),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_filter_nodes_total",
			Help: "Candidate nodes by verdict: passed, unknown (no fresh load: passed), filtered_cpu, filtered_memory."}, []string{"verdict"}),
	}
	if reg != nil {
		reg.MustRegister(f.latency, f.calls, f.verdicts)
	}
	return f
}

// Register adds the handler to mux.
func (f *Filter) Register(mux *http.ServeMux) { mux.Handle("POST "+PathFilter, f) }

// Reason is the message of a node filtered for resource ("cpu" or
// "memory") under rule.
func Reason(rule profile.Rule, resource string) string {
	frac := rule.CPU
	if resource == profile.ResourceMemory {
		frac = rule.Memory
	}
	// No percent sign: the scheduler passes the message through a format.
	return fmt.Sprintf("cgpilot: the 7-day %s peaks of its pods and this pod's would pass %.2f of the node's allocatable", resource, frac)
}

func (f *Filter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serve(w, r, f.latency, f.calls, f.filter)
}

// filter keeps the candidates the rule lets the pod onto (all while not
// the leader).
func (f *Filter) filter(args extenderv1.ExtenderArgs, names []string) any {
	res := extenderv1.ExtenderFilterResult{FailedNodes: extenderv1.FailedNodesMap{}, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{}}
	if h := f.Leader; h != nil && !h() {
		f.calls.WithLabelValues("open").Inc()
		return passAll(args, res)
	}
	now := f.Now()
	cpu, mem := f.peak(args.Pod, now)
	stale := f.Source.StaleAfter()
	pass := make(map[string]bool, len(names))
	for _, n := range names {
		l, ok := f.Source.NodeLoad(n)
		if !ok || !l.Fresh(now, stale) {
			f.verdicts.WithLabelValues("unknown").Inc()
			pass[n] = true
			continue
		}
		if over := f.Rule.Exceeds(l, cpu, mem); over != "" {
			f.verdicts.WithLabelValues("filtered_" + over).Inc()
			res.FailedAndUnresolvableNodes[n] = Reason(f.Rule, over)
			continue
		}
		f.verdicts.WithLabelValues("passed").Inc()
		pass[n] = true
	}
	if args.NodeNames != nil {
		kept := make([]string, 0, len(pass))
		for _, n := range names {
			if pass[n] {
				kept = append(kept, n)
			}
		}
		res.NodeNames = &kept
	} else if args.Nodes != nil {
		kept := &corev1.NodeList{}
		for _, n := range args.Nodes.Items {
			if pass[n.Name] {
				kept.Items = append(kept.Items, n)
			}
		}
		res.Nodes = kept
	}
	f.calls.WithLabelValues("ok").Inc()
	return res
}

// passAll answers with every candidate.
func passAll(args extenderv1.ExtenderArgs, res extenderv1.ExtenderFilterResult) extenderv1.ExtenderFilterResult {
	res.NodeNames, res.Nodes = args.NodeNames, args.Nodes
	return res
}

// peak is the pod's expected peak: its workload's 7-day peak per pod, or
// (a workload not seen yet) its requests.
func (f *Filter) peak(pod *corev1.Pod, now time.Time) (cpu, mem float64) {
	if info, ok := f.Source.Workload(workloadOf(pod), now); ok && (info.PeakPodCPU > 0 || info.PeakPodMem > 0) {
		return info.PeakPodCPU, info.PeakPodMem
	}
	d := requests(pod)
	return d.CPU, d.Memory
}
