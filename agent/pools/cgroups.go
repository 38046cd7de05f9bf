package pools

import (
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/cgroup"
)

// Cgroups is what the pools need of the node's kubepods tree:
// *cgroup.Kubepods in production. It is an interface so that the planning
// is unit-tested on a recording fake; the kernel rules are tested on real
// cgroups (kernel_test.go).
type Cgroups interface {
	PodPath(uid string, qos cgroup.QoS) (string, error)
	ContainerPath(uid string, qos cgroup.QoS, containerID string) (string, error)
	QoSPaths() []string
	Children(path string) ([]string, error)
	KnownChildren(path string) ([]string, error)
	ForgetChildren(path string)
	ReadCPUs(path string) (cpuset.CPUSet, error)
	WidenCPUs(path string, cpus cpuset.CPUSet) (int, error)
	ApplyPod(p cgroup.PodCPUs) ([]cgroup.Written, error)
	Exists(path string) (bool, error)
}
