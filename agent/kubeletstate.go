package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/agent/podspec"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/internal/cpulist"
)

// kubeletstate.go: what the kubelet's static CPU manager holds, so the
// pools never give those CPUs away and never touch those pods. Two
// sources: the kubelet's PodResources API (a gRPC unix socket: the agent
// needs no other part of /var/lib/kubelet, which holds the kubelet's key
// and every pod's secrets), or its cpu_manager_state checkpoint file.

// ErrKubeletState is wrapped when the kubelet's view cannot be read; the
// agent then keeps the last good view.
var ErrKubeletState = errors.New("kubelet CPU manager state unusable")

// kubeletStatic is what the kubelet's static CPU manager holds: CPUs the
// pools must treat as taken, and pods the agent must never touch.
type kubeletStatic struct {
	Policy string
	Taken  cpuset.CPUSet
	Pods   map[string]bool // pod UIDs (checkpoint) or "namespace/name" keys (PodResources)
}

// holds says whether the kubelet holds exclusive CPUs for pod p.
func (k kubeletStatic) holds(uid, key string) bool { return k.Pods[uid] || k.Pods[key] }

// kubeletMayOwn says whether the kubelet's static CPU manager may have
// given p cores that the agent's view (re-read at each sweep) does not
// show yet: the kubelet assigns them when it admits a Guaranteed pod with
// an integer CPU request, before any of its cgroups exist, so a view older
// than the pod's cgroups could make the agent write the kubelet's
// containers as shared ones.
func (c *controller) kubeletMayOwn(p *corev1.Pod) bool {
	if c.podres == nil && c.cfg.KubeletCPUManagerState == "" {
		return false
	}
	c.mu.Lock()
	k := c.kubelet
	c.mu.Unlock()
	if k.Policy == "none" || k.holds(string(p.UID), podspec.Key(p.Namespace, p.Name)) || podspec.QoS(p) != cgroup.QoSGuaranteed {
		return false
	}
	for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if q := ctr.Resources.Requests[corev1.ResourceCPU]; q.MilliValue() >= 1000 && q.MilliValue()%1000 == 0 {
			return true
		}
	}
	return false
}

// readKubeletState reads the kubelet's cpu_manager_state checkpoint (v2
// format: entries[podUID][container] = "LIST"). A missing file, or the
// "none" policy, means nothing is taken.
func readKubeletState(path string) (kubeletStatic, error) {
	empty := kubeletStatic{Taken: cpuset.New(), Pods: map[string]bool{}}
	if path == "" {
		return empty, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return empty, nil
	}
	if err != nil {
		return empty, fmt.Errorf("%w: %s: %v", ErrKubeletState, path, err)
	}
	return parseKubeletState(path, b)
}

func parseKubeletState(path string, b []byte) (kubeletStatic, error) {
	var f struct {
		PolicyName    string                       `json:"policyName"`
		DefaultCPUSet string                       `json:"defaultCpuSet"`
		Entries       map[string]map[string]string `json:"entries"`
		Checksum      uint64                       `json:"checksum"`
	}
	out := kubeletStatic{Taken: cpuset.New(), Pods: map[string]bool{}}
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&f); err != nil {
		return out, fmt.Errorf("%w: %s: %v", ErrKubeletState, path, err)
	}
	out.Policy = f.PolicyName
	if f.PolicyName != "static" {
		return out, nil
	}
	taken := cpuset.New()
	for uid, containers := range f.Entries {
		for name, list := range containers {
			set, err := cpulist.Parse(list)
			if err != nil {
				return kubeletStatic{Taken: cpuset.New(), Pods: map[string]bool{}}, fmt.Errorf("%w: %s: pod %s container %s: %v", ErrKubeletState, path, uid, name, err)
			}
			taken = taken.Union(set)
			out.Pods[uid] = true
		}
	}
	out.Taken = taken
	return out, nil
}
