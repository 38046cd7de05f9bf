package agent

import (
	"errors"

	"k8s.io/utils/cpuset"
)

// ErrCgroupWrite is wrapped by every failed cgroup write the pool manager
// reports (the cgroup package's own error, naming file, value and errno,
// is kept in the chain).
var ErrCgroupWrite = errors.New("cgroup write failed")

// QoSClass is a pod's QoS class as spelled in the Kubernetes API.
type QoSClass string

const (
	QoSGuaranteed QoSClass = "Guaranteed"
	QoSBurstable  QoSClass = "Burstable"
	QoSBestEffort QoSClass = "BestEffort"
)

// podCgroupPlan is one pod's wanted cpuset. Paths are from each hierarchy's
// root ("/kubepods/burstable/pod<uid>").
type podCgroupPlan struct {
	UID        string
	Path       string   // the pod cgroup
	Containers []string // its child cgroups (containers and sandbox)
	CPUs       cpuset.CPUSet
	// UnlimitedQuota removes the CFS quota of the pod and its containers
	// (exclusive pods own their cores; throttling them only hurts).
	UnlimitedQuota bool
	// RestoreQuota, when set, puts back the kubelet's CFS quotas (from the
	// pod's limits) after the pod left the exclusive pool.
	RestoreQuota *quotaSpec
}

// quotaSpec is the kubelet's CFS quota for a pod (period 100 ms): -1 means
// unlimited. Containers are keyed by cgroup path; a child not listed (the
// sandbox) keeps its quota.
type quotaSpec struct {
	Pod        int64
	Containers map[string]int64
}

// cgroupBackend is all the pool manager needs from the cgroup package. It
// is an interface so that planning is unit-tested on a recording fake; the
// real implementation (cgroups_linux.go) hands each plan to cgroup.Writer.
type cgroupBackend interface {
	// PodPath is the pod cgroup's path from each hierarchy root.
	PodPath(uid string, qos QoSClass) (string, error)
	// QoSPaths are the parents of pod cgroups (kubepods and its QoS dirs).
	QoSPaths() []string
	// Children lists the child cgroups of path; a missing path gives an
	// error wrapping os.ErrNotExist.
	Children(path string) ([]string, error)
	// KnownChildren is Children from a cache the cgroup watcher keeps
	// current (ForgetChildren on every create and remove); the refresh of
	// every shared pod reads it instead of listing 200 directories.
	KnownChildren(path string) ([]string, error)
	// ForgetChildren drops the cached listing of the cpuset dir dir, or
	// all of them for "".
	ForgetChildren(dir string)
	// ReadCPUs reads cpuset.cpus.
	ReadCPUs(path string) (cpuset.CPUSet, error)
	// WidenCPUs makes path's cpuset a superset of cpus (QoS parents hold
	// pods of both pools, so they are only ever widened).
	WidenCPUs(path string, cpus cpuset.CPUSet) (written int, err error)
	// ApplyPod writes one pod's plan in leveled order (widen top-down,
	// narrow bottom-up) and returns the paths it wrote. A pod whose cgroup
	// does not exist yet is not an error: nothing is written.
	ApplyPod(p podCgroupPlan) (written []string, err error)
	// ContainerPath is a container's cgroup path from its pod status ID
	// ("containerd://<id>").
	ContainerPath(uid string, qos QoSClass, containerID string) (string, error)
	// MayRun reports whether a process may still be in path's cgroup:
	// true while the cgroup exists. cgroup.procs cannot prove it empty: it
	// lists only the processes of the reader's PID namespace, and the agent
	// runs in its own. The runtime removes a container's cgroup when it
	// deletes the exited task.
	MayRun(path string) (bool, error)
	// CPUSetDir is the directory of path in the cpuset hierarchy (the one
	// watched for new cgroups).
	CPUSetDir(path string) string
}
