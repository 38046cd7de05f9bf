//go:build linux

package demo

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/cgroup"
)

// ContainerCgroup is one container as its cgroup files show it, read
// directly from the host cgroupfs (not through the agent).
type ContainerCgroup struct {
	Pod, Container, Pool string
	CPUSetFile           string        // the container's cpuset.cpus
	CPUs                 cpuset.CPUSet // its content
	QuotaFile            string        // cpu.cfs_quota_us (v1) or cpu.max (v2)
	Quota                int64         // -1 = no CFS quota
	PodCPUs              cpuset.CPUSet // the pod cgroup's cpuset.cpus
	PodQuota             int64
}

// Snapshot is every demo container's cgroup at one moment.
type Snapshot []ContainerCgroup

// Find returns the entry of pod (its first container).
func (s Snapshot) Find(pod string) (ContainerCgroup, bool) {
	for _, c := range s {
		if c.Pod == pod {
			return c, true
		}
	}
	return ContainerCgroup{}, false
}

// cgroupReader resolves pod and container cgroups on this host with the
// cgroup package's layout (cgroupfs driver, /kubepods).
type cgroupReader struct{ layout *cgroup.Layout }

func newCgroupReader() (*cgroupReader, error) {
	m, err := cgroup.ReadMounts("/proc")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	l, err := cgroup.NewLayout(m, cgroup.LayoutConfig{KubepodsPath: "/kubepods"})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	return &cgroupReader{layout: l}, nil
}

// nodeCPUs are the CPUs of the root cpuset: all the pools can hand out
// (the demo reserves none).
func (r *cgroupReader) nodeCPUs() (cpuset.CPUSet, error) {
	d, err := r.layout.DirsAt("/")
	if err != nil {
		return cpuset.CPUSet{}, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	name := "cpuset.cpus"
	if d.Unified {
		name = "cpuset.cpus.effective"
	}
	return readCPUs(filepath.Join(d.CPUSet, name))
}

// read snapshots the first container of every pod; a pod whose container
// has not started yet is an error (the caller polls).
func (r *cgroupReader) read(pods []corev1.Pod) (Snapshot, error) {
	var s Snapshot
	for _, p := range pods {
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
			return nil, fmt.Errorf("%w: pod %s has no running container yet", ErrDemo, p.Name)
		}
		qos := cgroup.QoS(p.Status.QOSClass)
		cd, err := r.layout.ContainerDirs(string(p.UID), qos, p.Status.ContainerStatuses[0].ContainerID)
		if err != nil {
			return nil, fmt.Errorf("%w: pod %s: %v", ErrDemo, p.Name, err)
		}
		pd, err := r.layout.PodDirs(string(p.UID), qos)
		if err != nil {
			return nil, fmt.Errorf("%w: pod %s: %v", ErrDemo, p.Name, err)
		}
		c := ContainerCgroup{Pod: p.Name, Container: p.Spec.Containers[0].Name, Pool: p.Annotations[annoPool]}
		if c.Pool == "" {
			c.Pool = "shared"
		}
		c.CPUSetFile = filepath.Join(cd.CPUSet, "cpuset.cpus")
		if c.CPUs, err = readCPUs(c.CPUSetFile); err != nil {
			return nil, err
		}
		if c.PodCPUs, err = readCPUs(filepath.Join(pd.CPUSet, "cpuset.cpus")); err != nil {
			return nil, err
		}
		quotaName := "cpu.cfs_quota_us"
		if cd.Unified {
			quotaName = "cpu.max"
		}
		c.QuotaFile = filepath.Join(cd.CPU, quotaName)
		if c.Quota, err = readQuota(c.QuotaFile); err != nil {
			return nil, err
		}
		if c.PodQuota, err = readQuota(filepath.Join(pd.CPU, quotaName)); err != nil {
			return nil, err
		}
		s = append(s, c)
	}
	return s, nil
}

func readCPUs(file string) (cpuset.CPUSet, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return cpuset.CPUSet{}, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	set, err := cpuset.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return cpuset.CPUSet{}, fmt.Errorf("%w: %s: %q: %v", ErrDemo, file, b, err)
	}
	return set, nil
}

// readQuota reads cpu.cfs_quota_us, or the quota half of cpu.max ("max" is -1).
func readQuota(file string) (int64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("%w: %s is empty", ErrDemo, file)
	}
	if f[0] == "max" {
		return -1, nil
	}
	q, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %q: %v", ErrDemo, file, b, err)
	}
	return q, nil
}
