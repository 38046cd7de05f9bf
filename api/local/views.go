package local

import "time"

// Paths of the local API (JSON over the agent's unix socket).
const (
	PathPods     = "/v1/pods"     // []PodView
	PathPools    = "/v1/pools"    // PoolsView
	PathTopology = "/v1/topology" // TopologyView
	PathExplain  = "/v1/explain"  // ?pod=NS/NAME: ExplainView
	PathEvents   = "/v1/events"   // [?pod=NS/NAME]: []EventRecord
)

// Reasons of a pod's status, its Events and the refusals metric: why an
// exclusive request was refused or failed.
const (
	ReasonTooManyCPUs       = "TooManyCPUs"
	ReasonCapExceeded       = "CapExceeded"
	ReasonInsufficientCPUs  = "InsufficientCPUs"
	ReasonCPUsTaken         = "CPUsTaken"
	ReasonReservedOverlap   = "ReservedOverlap"
	ReasonCPUsNotOnNode     = "CPUsNotOnNode"
	ReasonNoCPUCount        = "NoCPUCount"
	ReasonTopologyNoFit     = "TopologyNoFit"
	ReasonInvalidAnnotation = "InvalidAnnotation"
	ReasonCheckpointWrite   = "CheckpointWriteFailed"
	ReasonCgroupWrite       = "CgroupWriteFailed"
	ReasonError             = "Error"
)

// Event reasons the agent emits.
const (
	EventCPUsAllocated     = "CPUsAllocated"
	EventCPUsResized       = "CPUsResized"
	EventReleased          = "Released"
	EventIsolationChanged  = "IsolationChanged"
	EventCPUPoolRefused    = "CPUPoolRefused"
	EventCgroupWriteFailed = "CgroupWriteFailed"
	EventDriftCorrected    = "DriftCorrected"
	EventCheckpointCorrupt = "CheckpointCorrupt"
	EventReconcilePanic    = "ReconcilePanicked"
	// EventAnnotationRefused (Warning): a pod's right-sizing annotation
	// its policy does not let it use; the policy's values apply.
	EventAnnotationRefused = "RightsizeAnnotationRefused"
	// EventClamped: a value the agent applies was moved by a bound (the
	// policy's, the LimitRange's, the node's allocatable, usage).
	EventClamped = "RightsizeClamped"
	// EventMemoryRaiseRefused (Warning): pods/resize refused to keep an
	// OOM bump; the cgroup limit went back to the spec's.
	EventMemoryRaiseRefused = "MemoryRaiseRefused"
	// EventMemoryRaiseReverted: the cgroups of a refused OOM bump are
	// back at the spec's values, after usage held the first write up.
	EventMemoryRaiseReverted = "MemoryRaiseReverted"
)

// PodView is one pod in `cgpilotctl pods`.
type PodView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	QoS       string `json:"qos"` // Guaranteed | Burstable | BestEffort
	Pool      Pool   `json:"pool"`
	State     string `json:"state"`
	CPUs      string `json:"cpus"` // the target cpuset ("" when untouched)
	Reason    string `json:"reason,omitempty"`
}

// PoolsView is `cgpilotctl pools`.
type PoolsView struct {
	NodeSummary
	Assignments []AssignmentView `json:"assignments"`
}

// AssignmentView is one exclusive allocation.
type AssignmentView struct {
	Namespace        string `json:"namespace"`
	Name             string `json:"name"`
	UID              string `json:"uid"`
	CPUs             string `json:"cpus"`
	ReleaseIsolation bool   `json:"releaseIsolation,omitempty"`
}

// TopologyView is what the agent allocates from.
type TopologyView struct {
	CPUs     string `json:"cpus"`
	Reserved string `json:"reserved"`
	Source   string `json:"source"`
	Machine  string `json:"machine,omitempty"`
}

// ExplainView is `cgpilotctl explain POD`: every input of the decision and
// the cgroups as they are now.
type ExplainView struct {
	PodView
	Annotations   map[string]string `json:"annotations"`
	ParseError    string            `json:"parseError,omitempty"`
	DemandCPUs    int               `json:"demandCPUs"`
	Untouched     bool              `json:"untouched"`
	KubeletStatic bool              `json:"kubeletStatic"`
	Decision      string            `json:"decision"`
	Cgroups       []CgroupView      `json:"cgroups"`
	// Containers are the pod's containers as the agent's informer last
	// saw them: a container the API server says runs but the agent does
	// not is an informer behind, not a sampling fault.
	Containers []ContainerView `json:"containers,omitempty"`
	Events     []EventRecord   `json:"events"`
	// Rightsizing is the pod's right-sizing decision and recommendation
	// (nil when right-sizing is off or the pod is not tracked).
	Rightsizing *Recommendation `json:"rightsizing,omitempty"`
	// Usage of each container's workload histograms, by container name.
	Usage map[string]RecView `json:"usage,omitempty"`
}

// ContainerView is one container of an explained pod.
type ContainerView struct {
	Name  string `json:"name"`
	ID    string `json:"id,omitempty"` // "<runtime>://<id>"; empty before the runtime made it
	State string `json:"state"`        // ContainerRunning, ContainerWaiting, ContainerTerminated or ContainerUnknown
	// Sampled says whether right-sizing samples the container (false when
	// right-sizing is off or the container does not run).
	Sampled bool `json:"sampled"`
}

// ContainerView.State values.
const (
	ContainerRunning    = "running"
	ContainerWaiting    = "waiting"
	ContainerTerminated = "terminated"
	ContainerUnknown    = "unknown"
)

// CgroupView is one cgroup's current cpuset.cpus.
type CgroupView struct {
	Path  string `json:"path"`
	CPUs  string `json:"cpus"`
	Error string `json:"error,omitempty"`
}

// EventRecord is one Event as the local API serves it.
type EventRecord struct {
	Time      time.Time `json:"time"`
	Type      string    `json:"type"` // Normal | Warning
	Reason    string    `json:"reason"`
	Namespace string    `json:"namespace,omitempty"`
	Pod       string    `json:"pod,omitempty"`
	UID       string    `json:"uid,omitempty"`
	Message   string    `json:"message"`
}

// ErrorView is the body of every answer that is not 200.
type ErrorView struct {
	Error string `json:"error"`
}
