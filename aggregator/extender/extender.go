package extender

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cgpilot/cgpilot/aggregator/profile"
	"github.com/cgpilot/cgpilot/api/report"
)

// PathPrioritize is where the extender answers (urlPrefix + "/prioritize"
// in the scheduler's configuration, with prioritizeVerb "prioritize").
const PathPrioritize = "/scheduler/prioritize"

// Node is what scoring needs of a node (cores and bytes).
type Node struct {
	CPUAllocatable, CPUUsed       float64
	MemoryAllocatable, MemoryUsed float64
	// Known: the node has reported; otherwise it scores neutral.
	Known bool
}

// Demand is a pod's expected usage (cores and bytes).
type Demand struct{ CPU, Memory float64 }

func freeFraction(alloc, used float64) float64 {
	if alloc <= 0 {
		return 0
	}
	return math.Max(0, math.Min(1, (alloc-used)/alloc))
}

// Weights returns the CPU and memory weights of a pod with demand d in a
// cluster whose average free amounts are freeCPU and freeMemory.
func Weights(d Demand, freeCPU, freeMemory float64) (cpu, memory float64) {
	dc, dm := 0.0, 0.0
	if freeCPU > 0 {
		dc = d.CPU / freeCPU
	}
	if freeMemory > 0 {
		dm = d.Memory / freeMemory
	}
	mean := (dc + dm) / 2
	if !(mean > 0) || math.IsInf(mean, 0) {
		return 1, 1
	}
	return dc / mean, dm / mean
}

// Scores returns each node's score for a pod with demand d; cluster is
// the set of reporting nodes whose average free amounts set the weights
// (the candidates when empty).
func Scores(d Demand, candidates, cluster []Node) []float64 {
	if len(cluster) == 0 {
		cluster = candidates
	}
	var freeCPU, freeMem float64
	n := 0
	for _, c := range cluster {
		if c.Known {
			freeCPU += math.Max(0, c.CPUAllocatable-c.CPUUsed)
			freeMem += math.Max(0, c.MemoryAllocatable-c.MemoryUsed)
			n++
		}
	}
	if n > 0 {
		freeCPU, freeMem = freeCPU/float64(n), freeMem/float64(n)
	}
	wc, wm := Weights(d, freeCPU, freeMem)
	// Neutral free fractions for nodes that never reported.
	var meanFC, meanFM float64
	k := 0
	for _, c := range candidates {
		if c.Known {
			meanFC += freeFraction(c.CPUAllocatable, c.CPUUsed)
			meanFM += freeFraction(c.MemoryAllocatable, c.MemoryUsed)
			k++
		}
	}
	if k > 0 {
		meanFC, meanFM = meanFC/float64(k), meanFM/float64(k)
	} else {
		meanFC, meanFM = 1, 1
	}
	out := make([]float64, len(candidates))
	for i, c := range candidates {
		fc, fm := meanFC, meanFM
		if c.Known {
			fc, fm = freeFraction(c.CPUAllocatable, c.CPUUsed), freeFraction(c.MemoryAllocatable, c.MemoryUsed)
		}
		out[i] = fc*10*wc + fm*10*wm
	}
	return out
}

// Source is where the extender reads usage (profile.Profiles).
type Source interface {
	Node(name string, now time.Time) (profile.NodeInfo, bool)
	Nodes(now time.Time) []profile.NodeInfo
	Workload(w report.Workload, now time.Time) (profile.WorkloadInfo, bool)
}

// Handler serves PathPrioritize.
type Handler struct {
	Source Source
	Now    func() time.Time
	// Leader reports whether this replica has the state (nil: always);
	// a follower answers neutral scores rather than failing scheduling.
	Leader  func() bool
	latency prometheus.Histogram
	calls   *prometheus.CounterVec
}

// New returns a Handler registered with reg.
func New(src Source, reg prometheus.Registerer) *Handler {
	h := &Handler{Source: src, Now: time.Now,
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cgpilot_aggregator_prioritize_seconds",
			Help: "Time to score the candidate nodes of one pod.", Buckets: []float64{.0001, .0005, .001, .005, .01, .05, .1}}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_prioritize_total",
			Help: "Prioritize calls by result: ok, bad_request, neutral (follower or no usage known)."}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(h.latency, h.calls)
	}
	return h
}

// Register adds the handler to mux.
func (h *Handler) Register(mux *http.ServeMux) { mux.Handle("POST "+PathPrioritize, h) }

// maxArgsBytes bounds a request: a NodeList of a large cluster with full
// Node objects is big; 64 MiB covers 5,000 nodes of ~10 KiB.
const maxArgsBytes = 64 << 20

// readArgs decodes a verb's ExtenderArgs and its candidate node names
// (names only with nodeCacheCapable, else the Nodes'); a bad body is
// answered 400 and counted, and ok is false.
func readArgs(w http.ResponseWriter, r *http.Request, calls *prometheus.CounterVec) (args extenderv1.ExtenderArgs, names []string, ok bool) {
	if err := json.NewDecoder(io.LimitReader(r.Body, maxArgsBytes)).Decode(&args); err != nil || args.Pod == nil {
		calls.WithLabelValues("bad_request").Inc()
		http.Error(w, "want ExtenderArgs with a pod", http.StatusBadRequest)
		return args, nil, false
	}
	switch {
	case args.NodeNames != nil:
		names = *args.NodeNames
	case args.Nodes != nil:
		for _, n := range args.Nodes.Items {
			names = append(names, n.Name)
		}
	}
	return args, names, true
}

// serve is the frame both verbs share: the call is timed into latency,
// the scheduler's ExtenderArgs read (a bad request counted in calls and
// answered 400), and answer's result written as JSON.
func serve(w http.ResponseWriter, r *http.Request, latency prometheus.Observer, calls *prometheus.CounterVec,
	answer func(args extenderv1.ExtenderArgs, names []string) any) {
	t0 := time.Now()
	defer func() { latency.Observe(time.Since(t0).Seconds()) }()
	args, names, ok := readArgs(w, r, calls)
	if !ok {
		return
	}
	writeJSON(w, answer(args, names))
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serve(w, r, h.latency, h.calls, h.prioritize)
}

// prioritize scores the candidates (all 0 while not the leader).
func (h *Handler) prioritize(args extenderv1.ExtenderArgs, names []string) any {
	list := make(extenderv1.HostPriorityList, len(names))
	if h.Leader != nil && !h.Leader() {
		for i, n := range names {
			list[i] = extenderv1.HostPriority{Host: n}
		}
		h.calls.WithLabelValues("neutral").Inc()
		return list
	}
	now := h.Now()
	scores := Scores(h.demand(args.Pod, now), h.candidates(names, now), h.cluster(now))
	for i, n := range names {
		list[i] = extenderv1.HostPriority{Host: n, Score: int64(math.Round(scores[i]))}
	}
	h.calls.WithLabelValues("ok").Inc()
	return list
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func nodeOf(i profile.NodeInfo) Node {
	return Node{CPUAllocatable: i.Usage.CPUAllocatable, CPUUsed: i.Usage.CPUUsage, MemoryAllocatable: i.Usage.MemoryAllocatable,
		MemoryUsed: i.Usage.MemoryUsage, Known: !i.Stale}
}

func (h *Handler) candidates(names []string, now time.Time) []Node {
	out := make([]Node, len(names))
	for i, n := range names {
		if info, ok := h.Source.Node(n, now); ok {
			out[i] = nodeOf(info)
		}
	}
	return out
}

func (h *Handler) cluster(now time.Time) []Node {
	infos := h.Source.Nodes(now)
	out := make([]Node, 0, len(infos))
	for _, i := range infos {
		if !i.Stale {
			out = append(out, nodeOf(i))
		}
	}
	return out
}

// demand is the pod's expected usage: its workload's usage per pod, or
// its requests.
func (h *Handler) demand(pod *corev1.Pod, now time.Time) Demand {
	if info, ok := h.Source.Workload(workloadOf(pod), now); ok && (info.PerPodCPU > 0 || info.PerPodMem > 0) {
		return Demand{CPU: info.PerPodCPU, Memory: info.PerPodMem}
	}
	return requests(pod)
}

// workloadOf is the pod's workload by the reports' rule.
func workloadOf(pod *corev1.Pod) report.Workload {
	var owner *report.Owner
	if c := metav1.GetControllerOfNoCopy(pod); c != nil {
		owner = &report.Owner{Kind: c.Kind, Name: c.Name}
	}
	name := pod.Name
	if name == "" {
		name = pod.GenerateName
	}
	return report.WorkloadOf(pod.Namespace, name, owner, pod.Labels, nil)
}

// requests sums the pod's containers' requests.
func requests(pod *corev1.Pod) Demand {
	var d Demand
	for _, c := range pod.Spec.Containers {
		d.CPU += c.Resources.Requests.Cpu().AsApproximateFloat64()
		d.Memory += c.Resources.Requests.Memory().AsApproximateFloat64()
	}
	return d
}
