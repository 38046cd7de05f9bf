package agent

import (
	"errors"

	"k8s.io/utils/cpuset"
)

// ErrCgroupWrite is wrapped by every failed cgroup write the pool manager
// reports (the backend's own error, naming file, value and errno, is kept).
var ErrCgroupWrite = errors.New("cgroup write failed")

// QoSClass is a pod's QoS class as spelled in the Kubernetes API.
type QoSClass string

const (
	QoSGuaranteed QoSClass = "Guaranteed"
	QoSBurstable  QoSClass = "Burstable"
	QoSBestEffort QoSClass = "BestEffort"
)

// cpusWrite is one cgroup's wanted cpuset.cpus. Paths are from each
// hierarchy's root ("/kubepods/burstable/pod<uid>").
type cpusWrite struct {
	Path string
	CPUs cpuset.CPUSet
	// WidenOnly: make the cgroup a superset of CPUs, never narrow it (QoS
	// parents hold pods of both pools).
	WidenOnly bool
}

// cgroupBackend is all the pool manager needs from the cgroup package. It
// is an interface so pure planning is unit-tested on a recording fake; the
// real implementation writes the kernel's files.
type cgroupBackend interface {
	// PodPath is the pod cgroup's path from each hierarchy root.
	PodPath(uid string, qos QoSClass) (string, error)
	// QoSPaths are the parents of pod cgroups (kubepods and its QoS dirs).
	QoSPaths() []string
	// Children lists the child cgroups (containers, sandbox) of path;
	// a missing path gives os.ErrNotExist.
	Children(path string) ([]string, error)
	// ReadCPUs reads cpuset.cpus.
	ReadCPUs(path string) (cpuset.CPUSet, error)
	// ApplyCPUs writes levels (index 0 = top) in leveled order: a first
	// pass top-down widens every cgroup to the union of its old and new set,
	// a second pass bottom-up writes the new sets. It returns the number of
	// writes per path and the failures by path (one failed cgroup does not
	// stop the others); missing cgroups are skipped, not errors.
	ApplyCPUs(levels [][]cpusWrite) (written map[string]int, failed map[string]error)
	// SetUnlimitedQuota removes the CFS quota of path and its children,
	// parent first (v1: -1, v2: max).
	SetUnlimitedQuota(path string) error
	// CPUSetDir is the directory of path in the cpuset hierarchy (the one
	// watched for new cgroups).
	CPUSetDir(path string) string
}
