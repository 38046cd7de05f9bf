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
// cgroup package's layout (cgroupfs driver, /kubepods); unified: the host
// runs cgroup v2.
type cgroupReader struct {
	layout  *cgroup.Layout
	unified bool
}

func newCgroupReader() (*cgroupReader, error) {
	m, err := cgroup.ReadMounts("/proc")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	l, err := cgroup.NewLayout(m, cgroup.LayoutConfig{KubepodsPath: "/kubepods"})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	return &cgroupReader{layout: l, unified: m.Mode == cgroup.ModeUnified}, nil
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
		if c.Quota, err = readNumber(c.QuotaFile); err != nil {
			return nil, err
		}
		if c.PodQuota, err = readNumber(filepath.Join(pd.CPU, quotaName)); err != nil {
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

// readNumber reads the first number of a cgroup file: cpu.cfs_quota_us,
// cpu.shares, memory.limit_in_bytes, or the first half of cpu.max or
// memory.max ("max" is -1).
func readNumber(file string) (int64, error) {
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

// ResourceFiles are a container's CPU and memory values as the kernel
// holds them: what the kubelet (or the agent) last wrote.
type ResourceFiles struct {
	SharesFile  string // cpu.shares (v1) or cpu.weight (v2)
	Shares      int64
	QuotaFile   string // cpu.cfs_quota_us (v1) or cpu.max (v2)
	Quota       int64  // -1 = no CFS quota
	MemoryFile  string // memory.limit_in_bytes (v1) or memory.max (v2)
	MemoryLimit int64  // -1 = "max" (v2)
	// OOMFile is the container's memory.oom_control on v1; on v2 the
	// pod's memory.events, which counts its containers' kills
	// (hierarchically): the kubelet sets memory.oom.group there, so an OOM
	// ends the whole container and its restart has a new cgroup, counting
	// from 0.
	OOMFile  string
	OOMKills int64 // its oom_kill counter
}

// agrees reports whether f holds what the kubelet writes for res: the
// shares of the CPU request (on v2 as runc converts them to cpu.weight),
// the CFS quota of the CPU limit, and the memory limit (on v2 the kernel
// rounds memory.max down to a page).
func (r *cgroupReader) agrees(f ResourceFiles, res corev1.ResourceRequirements) bool {
	shares := int64(cgroup.KubeletShares(res.Requests.Cpu().MilliValue()))
	if r.unified {
		shares = int64(cgroup.WeightQuadratic.SharesToWeight(uint64(shares)))
	}
	mem := res.Limits.Memory().Value()
	return f.Shares == shares && f.Quota == cgroup.KubeletQuota(res.Limits.Cpu().MilliValue()).QuotaUs &&
		f.MemoryLimit <= mem && f.MemoryLimit > mem-4096
}

// resources reads the first container's ResourceFiles of pod.
func (r *cgroupReader) resources(p *corev1.Pod) (ResourceFiles, error) {
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
		return ResourceFiles{}, fmt.Errorf("%w: pod %s has no running container yet", ErrDemo, p.Name)
	}
	d, err := r.layout.ContainerDirs(string(p.UID), cgroup.QoS(p.Status.QOSClass), p.Status.ContainerStatuses[0].ContainerID)
	if err != nil {
		return ResourceFiles{}, fmt.Errorf("%w: pod %s: %v", ErrDemo, p.Name, err)
	}
	f := ResourceFiles{
		SharesFile: filepath.Join(d.CPU, "cpu.shares"), QuotaFile: filepath.Join(d.CPU, "cpu.cfs_quota_us"),
		MemoryFile: filepath.Join(d.Memory, "memory.limit_in_bytes"), OOMFile: filepath.Join(d.Memory, "memory.oom_control"),
	}
	if d.Unified {
		pd, err := r.layout.PodDirs(string(p.UID), cgroup.QoS(p.Status.QOSClass))
		if err != nil {
			return ResourceFiles{}, fmt.Errorf("%w: pod %s: %v", ErrDemo, p.Name, err)
		}
		f = ResourceFiles{
			SharesFile: filepath.Join(d.CPU, "cpu.weight"), QuotaFile: filepath.Join(d.CPU, "cpu.max"),
			MemoryFile: filepath.Join(d.Memory, "memory.max"), OOMFile: filepath.Join(pd.Memory, "memory.events"),
		}
	}
	if f.Shares, err = readNumber(f.SharesFile); err != nil {
		return f, err
	}
	if f.Quota, err = readNumber(f.QuotaFile); err != nil {
		return f, err
	}
	if f.MemoryLimit, err = readNumber(f.MemoryFile); err != nil {
		return f, err
	}
	b, err := os.ReadFile(f.OOMFile)
	if err != nil {
		return f, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			if f.OOMKills, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil {
				return f, fmt.Errorf("%w: %s: %q: %v", ErrDemo, f.OOMFile, line, err)
			}
		}
	}
	return f, nil
}
