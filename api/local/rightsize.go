package local

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/cgpilot/cgpilot/internal/millicpu"
)

// Right-sizing on the wire: the cgpilot.io/recommendation annotation the
// agent writes on each pod a RightsizePolicy selects, and the local API's
// view behind `cgpilotctl recs`.

// PathRecs is the local API path of []RecView.
const PathRecs = "/v1/recs"

// PathHistory streams the node's usage history as a trace CSV (?since=7d).
const PathHistory = "/v1/history"

// PathAggregator answers AggregatorView: the agent's reports to the
// cluster aggregator (404 when it does not report).
const PathAggregator = "/v1/aggregator"

// AggregatorView is how the agent's reports to the aggregator go.
type AggregatorView struct {
	URL           string `json:"url"`
	PeriodSeconds int    `json:"periodSeconds"`
	// Reports accepted, answered as duplicates, refused for good, and
	// failed attempts (retried); Coalesced: buffered reports merged while
	// the aggregator was away, DroppedEvents the events that merging
	// could not keep.
	Accepted      int `json:"accepted"`
	Duplicates    int `json:"duplicates"`
	Rejected      int `json:"rejected"`
	Failures      int `json:"failures"`
	Coalesced     int `json:"coalesced"`
	DroppedEvents int `json:"droppedEvents"`
	// Buffered reports (and bytes) waiting for the aggregator.
	Buffered      int    `json:"buffered"`
	BufferedBytes int    `json:"bufferedBytes"`
	LastError     string `json:"lastError,omitempty"`
	// Merged recommendations last fetched, how many are fresh (used in
	// decisions), when, and the last fetch error.
	Merged     int        `json:"merged"`
	Fresh      int        `json:"fresh"`
	Fetched    *time.Time `json:"fetched,omitempty"`
	FetchError string     `json:"fetchError,omitempty"`
}

// Recommendation is the JSON of the cgpilot.io/recommendation annotation.
type Recommendation struct {
	Policy string `json:"policy,omitempty"`
	Preset string `json:"preset,omitempty"`
	Mode   string `json:"mode"`
	// State is the last decision: Resize, Applied, DryRun, Unchanged,
	// InsufficientHistory, Paused, AvoidWindow, ResizePending,
	// StepWait, NotAdjustable, Conflict, InvalidPolicy, Failed.
	State       string                    `json:"state"`
	Reason      string                    `json:"reason,omitempty"`
	LastApplied *time.Time                `json:"lastApplied,omitempty"`
	Containers  []ContainerRecommendation `json:"containers,omitempty"`
}

// ContainerRecommendation is one container's part of a Recommendation.
type ContainerRecommendation struct {
	Name string `json:"name"`
	// Source is "aggregator" when the targets are the cluster
	// aggregator's, merged from Nodes nodes' samples; empty: the node's own.
	Source string                  `json:"source,omitempty"`
	Nodes  int                     `json:"nodes,omitempty"`
	CPU    *ResourceRecommendation `json:"cpu,omitempty"`
	Memory *ResourceRecommendation `json:"memory,omitempty"`
}

// ResourceRecommendation is one resource: the recommendation (Kubernetes
// quantities) and, when the agent changes it, what it sets; Note says why
// the container's value does not simply follow the target.
type ResourceRecommendation struct {
	Target  string `json:"target"`
	Lower   string `json:"lower"`
	Upper   string `json:"upper"`
	Request string `json:"request,omitempty"` // in force (the pod spec)
	// Original is the request the pod had when the agent first decided
	// for it, before any right-sizing: kept across restarts here.
	Original string `json:"original,omitempty"`
	Limit    string `json:"limit,omitempty"`
	Next     string `json:"next,omitempty"` // the request being set
	Note     string `json:"note,omitempty"`
	// Explain: the objective, percentile and margin the target came from
	// and the realised violation rate.
	Explain string `json:"explain,omitempty"`
}

// Encode returns the annotation value.
func (r Recommendation) Encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// RecView is one container in `cgpilotctl recs`.
type RecView struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	Workload  string `json:"workload"`
	// Usage of the workload container from its histograms: CPU in cores,
	// memory in bytes (percentiles over the decayed history).
	CPUP50, CPUP95, CPUMax float64
	MemP50, MemP95, MemMax float64
	Request, Limit         string // "cpu/memory" in force
	Recommendation         string // "cpu/memory" target, "-" without enough history
	Policy, Mode, State    string
	Why                    string `json:"why,omitempty"`
	// ResizeDecided is when the agent last decided to resize the pod (a
	// step's change, not an OOM raise; after a restart, when the pod's
	// recommendation annotation says the last change was applied).
	ResizeDecided *time.Time `json:"resizeDecided,omitempty"`
}

// FormatCPU writes cores as a Kubernetes quantity in whole millicores,
// rounded up by internal/millicpu (values above millicpu.MaxCores are
// written as it); NaN, ±Inf and values ≤ 0 are "0".
func FormatCPU(cores float64) string {
	if math.IsInf(cores, 1) {
		return "0"
	}
	m := millicpu.Ceil(cores)
	if m%1000 == 0 {
		return strconv.FormatInt(m/1000, 10)
	}
	return strconv.FormatInt(m, 10) + "m"
}

// HumanMemory writes bytes for people (usage columns), not as a quantity
// to send: whole MiB below 10 GiB, GiB with one decimal above.
func HumanMemory(bytes float64) string {
	switch {
	case bytes <= 0 || math.IsNaN(bytes) || math.IsInf(bytes, 0):
		return "0"
	case bytes < 10<<30:
		return fmt.Sprintf("%.0fMi", math.Ceil(bytes/(1<<20)))
	}
	return fmt.Sprintf("%.1fGi", bytes/(1<<30))
}

// FormatMemory writes bytes as a Kubernetes quantity (Mi or Gi when
// exact), rounded up to a whole byte; NaN, ±Inf and values ≤ 0 are "0",
// and values past int64's range are its largest (a float conversion past
// it is undefined in Go and wrapped to a negative here).
func FormatMemory(bytes float64) string {
	if bytes <= 0 || math.IsNaN(bytes) || math.IsInf(bytes, 0) {
		return "0"
	}
	if bytes >= math.MaxInt64 { // 2^63 as a float64: no int64 holds it
		return strconv.FormatInt(math.MaxInt64, 10)
	}
	b := int64(math.Ceil(bytes - 1e-6))
	switch {
	case b%(1<<30) == 0:
		return fmt.Sprintf("%dGi", b>>30)
	case b%(1<<20) == 0:
		return fmt.Sprintf("%dMi", b>>20)
	}
	return strconv.FormatInt(b, 10)
}
