package pools

import (
	"time"

	"k8s.io/utils/cpuset"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
)

// Pod is what the pools need of a pod, extracted by the controller from
// the API object.
type Pod struct {
	Key        string // namespace/name
	UID        string
	Namespace  string
	Name       string
	Generation int64
	Created    time.Time // creation timestamp: the older pod wins a restore
	QoS        cgroup.QoS
	Req        local.PodRequest
	ReqErr     error // annotation parse error (the pod is refused)
	// DemandCPUs is the CPU limit (else request) of the app containers (or
	// the largest init container's, if larger), rounded up to whole CPUs;
	// 0 when the pod sets neither. DemandMilli is the same in millicores.
	DemandCPUs  int
	DemandMilli int64
	// Untouched: ignored namespace, cpu-pool none, kubelet static
	// assignment, or a terminal phase. The pools write nothing for it.
	Untouched     bool
	KubeletStatic bool
	// CPULimitsMilli are the containers' CPU limits by pod-status container
	// ID (0 = no limit), to restore the kubelet's quotas when the pod
	// leaves the exclusive pool.
	CPULimitsMilli map[string]int64
	// Running are the pod-status IDs of the containers the kubelet reports
	// running: their runtime has finished setting up their cgroups.
	Running map[string]bool
	// Terminal is the pod's phase when Succeeded or Failed, else "".
	Terminal string
	// Deleting: the pod has a deletionTimestamp.
	Deleting bool
	// Containers are the kubelet-reported states of every container
	// (init, app, ephemeral); AllReported is false while some container of
	// the spec has no status yet.
	Containers  []ContainerState
	AllReported bool
}

// ContainerState is one pod-status container entry.
type ContainerState struct {
	ID         string // "containerd://<id>", "" before it was created
	Running    bool
	Terminated bool
}

// Event is a Kubernetes Event the controller emits for a pod.
type Event struct {
	Warning bool
	Reason  string // one of local.Event*
	Message string
}

// Result is what one Sync, Forget or Sweep did.
type Result struct {
	Status        *local.Status // nil: write no status (untouched pods)
	AllocatedCPUs string        // "" when not exclusive
	Events        []Event
	SharedChanged bool
	SharedPool    cpuset.CPUSet
	Written       int
	Drift         int              // cgroup files found off their applied value and rewritten
	DriftUIDs     map[string]int   // the same, by pod UID
	DriftWrites   []cgroup.Written // the writes that set drift back (what was found, what was put back)
	Failed        map[string]error // write failures by pod UID (this pod or others)
	// Pending are pods whose cgroups exist in some hierarchies and not yet
	// in all: not a failure, to be synced again shortly.
	Pending  map[string]bool
	Refusal  string // reason, when refused
	Released bool   // exclusive CPUs were released
	// Unsaved: the checkpoint has a change of release-isolation to write
	// (Manager.Flush), left out of the path to the cgroups.
	Unsaved bool
}

func (r *Result) fail(uid string, err error) {
	if r.Failed == nil {
		r.Failed = map[string]error{}
	}
	if prev, ok := r.Failed[uid]; ok {
		err = joinErr(prev, err)
	}
	r.Failed[uid] = err
}

func (r *Result) pending(uid string) {
	if r.Pending == nil {
		r.Pending = map[string]bool{}
	}
	r.Pending[uid] = true
}
