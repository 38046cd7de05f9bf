package report

import (
	"strings"
	"time"
)

// APIVersion names the report format; the aggregator refuses any other.
// A change that an older aggregator would misread gets a new version.
const APIVersion = "report.cgpilot.io/v1"

// HTTP paths of the aggregator's agent API (HTTPS, bearer token).
const (
	// PathReports takes a POSTed Report (JSON, optionally gzip).
	PathReports = "/v1/reports"
	// PathRecommendations answers GET ?node=NAME with Recommendations for
	// the workload-containers that node reported.
	PathRecommendations = "/v1/recommendations"
)

// Report is what an agent sends for one window of the report grid: the
// samples of every workload-container on its node, counted, plus what the
// aggregator's analysis needs. Times are UTC; amounts are cores and bytes.
type Report struct {
	APIVersion string `json:"apiVersion"`
	// Node is the agent's node; it must be the node named in the agent's
	// service-account token.
	Node string `json:"node"`
	// Agent identifies the agent process: a random ID chosen at its start,
	// and the start time. Sequence counts its reports from 1. The
	// aggregator accepts, per node, only a Sequence above the last it
	// accepted from the same Agent, or a newer Agent (a later Started):
	// a replayed or duplicated report is refused (409).
	Agent    Agent  `json:"agent"`
	Sequence uint64 `json:"sequence"`
	// WindowEnd is the end of the window [WindowEnd − Period·Windows,
	// WindowEnd): a multiple of Period since the Unix epoch, so that every
	// node's windows line up and the aggregator sums them before merging
	// (the exact merge, see recommend.AddCounts). PeriodSeconds must be
	// the aggregator's. Windows is 1, or more when the agent coalesced
	// reports it buffered while the aggregator was away (their samples
	// then count at WindowEnd).
	WindowEnd     time.Time `json:"windowEnd"`
	PeriodSeconds int       `json:"periodSeconds"`
	Windows       int       `json:"windows"`
	// Containers: one entry per workload-container with pods on the node.
	Containers []Container `json:"containers"`
	// OOMKills and Adjustments since the previous report.
	OOMKills    []OOMKill    `json:"oomKills,omitempty"`
	Adjustments []Adjustment `json:"adjustments,omitempty"`
	// Usage is the node's capacity, requests and real usage.
	Usage NodeUsage `json:"usage"`
	// Pools is the CPU pools' state; nil without pools.
	Pools *Pools `json:"pools,omitempty"`
	// Rounds is how many sampling rounds completed in the window(s) and
	// MissedRounds how many were due but did not (sampling gaps).
	Rounds       int `json:"rounds"`
	MissedRounds int `json:"missedRounds,omitempty"`
}

// Agent identifies one agent process.
type Agent struct {
	ID      string    `json:"id"`
	Started time.Time `json:"started"`
}

// Workload names what owns a pod, following the controller chain
// (WorkloadOf): Deployment, StatefulSet, DaemonSet, CronJob, Job, another
// controller's kind, or Pod for a bare pod (Name is then the pod's).
type Workload struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
}

// String is "namespace/Kind/name".
func (w Workload) String() string { return w.Namespace + "/" + w.Kind + "/" + w.Name }

// Key names one container of a workload: the unit recommendations are
// made and merged for.
type Key struct {
	Workload
	Container string `json:"container"`
}

// String is "namespace/Kind/name/container".
func (k Key) String() string { return k.Workload.String() + "/" + k.Container }

// ParseKey reads a Key's String; false when a part is missing or empty.
func ParseKey(s string) (Key, bool) {
	parts := strings.SplitN(s, "/", 4)
	if len(parts) != 4 || parts[0] == "" || parts[1] == "" || parts[2] == "" || parts[3] == "" {
		return Key{}, false
	}
	return Key{Workload: Workload{Namespace: parts[0], Kind: parts[1], Name: parts[2]}, Container: parts[3]}, true
}

// Workload kinds WorkloadOf returns besides a controller's own kind.
const (
	KindDeployment  = "Deployment"
	KindStatefulSet = "StatefulSet"
	KindDaemonSet   = "DaemonSet"
	KindCronJob     = "CronJob"
	KindJob         = "Job"
	KindReplicaSet  = "ReplicaSet"
	KindPod         = "Pod"
)

// Container is one workload-container on the reporting node.
type Container struct {
	Key
	// Pods is how many of the workload's pods ran this container on the
	// node during the window.
	Pods int `json:"pods"`
	// CPU and Memory are the window's samples (CPU cores since the
	// previous sample, memory working set bytes) of every such pod,
	// counted per bucket: recommend.Counts in the sparse histogram
	// encoding, CPU and memory layouts of recommend.
	CPU    []byte `json:"cpu"`
	Memory []byte `json:"memory"`
	// UsageCPU and UsageMemory are the window's mean usage summed over
	// the pods (cores, bytes).
	UsageCPU    float64 `json:"usageCPU"`
	UsageMemory float64 `json:"usageMemory"`
	// Current is one pod's requests and limits in force; Original what
	// the workload declared before any right-sizing. Both are per pod.
	Current  Resources `json:"current"`
	Original Resources `json:"original"`
	// QOS is the pods' QoS class: Guaranteed, Burstable or BestEffort.
	QOS string `json:"qos,omitempty"`
	// Local is the agent's own recommendation; nil while it has none.
	Local *Recommendation `json:"local,omitempty"`
	// Policy is the RightsizePolicy that covers the container (empty:
	// none), Mode and Preset its mode and preset.
	Policy string `json:"policy,omitempty"`
	Mode   string `json:"mode,omitempty"`
	Preset string `json:"preset,omitempty"`
	// Conflicts lists every policy that matched when more than one did:
	// the agent then applies none (an anomaly).
	Conflicts []string `json:"conflicts,omitempty"`
	// Adjustable says whether the agent can apply recommendations to the
	// container; Reason says why not (e.g. ExclusiveCPUs,
	// MatchedByTwoPolicies, NoResizeSupport, BestEffort).
	Adjustable bool   `json:"adjustable"`
	Reason     string `json:"reason,omitempty"`
	// Unadmitted counts those pods that a policy in mode Auto covers but
	// that carry no cgpilot.io/admission annotation: the aggregator's
	// webhook was unreachable when they were created, and the API server
	// admitted them unchanged (its failurePolicy is Ignore).
	Unadmitted int `json:"unadmitted,omitempty"`
}

// Resources are requests and limits in cores and bytes (0: unset).
type Resources struct {
	CPURequest    float64 `json:"cpuRequest,omitempty"`
	CPULimit      float64 `json:"cpuLimit,omitempty"`
	MemoryRequest float64 `json:"memoryRequest,omitempty"`
	MemoryLimit   float64 `json:"memoryLimit,omitempty"`
}

// Estimate is a recommendation for one resource (cores or bytes).
type Estimate struct {
	Target float64 `json:"target"`
	Lower  float64 `json:"lower,omitempty"`
	Upper  float64 `json:"upper,omitempty"`
	Limit  float64 `json:"limit,omitempty"`
}

// Recommendation is a CPU and a memory Estimate.
type Recommendation struct {
	CPU    Estimate `json:"cpu"`
	Memory Estimate `json:"memory"`
}

// OOMKill is one OOM kill of a container.
type OOMKill struct {
	Key
	Pod          string    `json:"pod"`
	Time         time.Time `json:"time"`
	UsageBytes   float64   `json:"usageBytes"`
	LimitBytes   float64   `json:"limitBytes,omitempty"`
	RequestBytes float64   `json:"requestBytes,omitempty"`
}

// Adjustment is one change the agent made, or tried to make, to a
// container's request: Error is empty when it was applied.
type Adjustment struct {
	Key
	Pod  string    `json:"pod"`
	Time time.Time `json:"time"`
	// Resource is "cpu" or "memory"; From and To the request before and
	// after (cores or bytes).
	Resource string  `json:"resource"`
	From     float64 `json:"from"`
	To       float64 `json:"to"`
	// Reason is "recommendation" or "oom" (a bump after an OOM kill).
	Reason string `json:"reason"`
	Error  string `json:"error,omitempty"`
}

// Adjustment reasons and resources.
const (
	ReasonRecommendation = "recommendation"
	ReasonOOM            = "oom"
	ResourceCPU          = "cpu"
	ResourceMemory       = "memory"
)

// NodeUsage is the node's size, the requests of its pods and its real
// usage (the window's mean).
type NodeUsage struct {
	CPUCapacity       float64 `json:"cpuCapacity"`
	CPUAllocatable    float64 `json:"cpuAllocatable"`
	CPURequests       float64 `json:"cpuRequests"`
	CPUUsage          float64 `json:"cpuUsage"`
	MemoryCapacity    float64 `json:"memoryCapacity"`
	MemoryAllocatable float64 `json:"memoryAllocatable"`
	MemoryRequests    float64 `json:"memoryRequests"`
	MemoryUsage       float64 `json:"memoryUsage"`
	Pods              int     `json:"pods"`
}

// Pools is the state of the node's CPU pools.
type Pools struct {
	SharedCPUs    int `json:"sharedCPUs"`
	ExclusiveCPUs int `json:"exclusiveCPUs"`
	ReservedCPUs  int `json:"reservedCPUs"`
	ExclusivePods int `json:"exclusivePods"`
}

// Recommendations is the aggregator's answer to an agent's GET of
// PathRecommendations: the merged recommendation of every
// workload-container the node reported and the aggregator has one for.
type Recommendations struct {
	APIVersion string                   `json:"apiVersion"`
	Generated  time.Time                `json:"generated"`
	Items      []WorkloadRecommendation `json:"items"`
}

// WorkloadRecommendation is one workload-container's merged
// recommendation. An agent prefers it to its own until FreshUntil and
// falls back to its own afterwards (or when the aggregator is away).
type WorkloadRecommendation struct {
	Key
	Recommendation
	// Policy and Preset it was computed under (with the policy's
	// overrides).
	Policy string `json:"policy,omitempty"`
	Preset string `json:"preset"`
	// Nodes and Samples it rests on; Updated is when it was computed.
	Nodes      int       `json:"nodes"`
	Samples    int64     `json:"samples"`
	Updated    time.Time `json:"updated"`
	FreshUntil time.Time `json:"freshUntil"`
}

// Answer is the aggregator's JSON body for a refused request (and for an
// accepted report: Result "accepted").
type Answer struct {
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
	// RetryAfterSeconds, when > 0, is how long to wait before retrying.
	RetryAfterSeconds int `json:"retryAfterSeconds,omitempty"`
}

// Results of a report, also the label of the aggregator's metric.
const (
	ResultAccepted        = "accepted"
	ResultMalformed       = "malformed"
	ResultOversized       = "oversized"
	ResultReplayed        = "replayed"
	ResultUnauthenticated = "unauthenticated"
	ResultForbidden       = "forbidden"
	ResultNotLeader       = "not_leader"
	ResultUnavailable     = "unavailable"
)
