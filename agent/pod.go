package agent

import (
	"math"

	corev1 "k8s.io/api/core/v1"

	"github.com/cgpilot/cgpilot/agent/podspec"
	"github.com/cgpilot/cgpilot/agent/pools"
	local "github.com/cgpilot/cgpilot/api/local"
)

// poolPod extracts what the pools need of a pod. static says whether the
// kubelet's static CPU manager holds CPUs for it.
func (c *controller) poolPod(p *corev1.Pod, static bool) pools.Pod {
	req, err := local.ParseAnnotations(p.Annotations)
	milli := cpuDemandMilli(p)
	info := pools.Pod{
		Key: podspec.Key(p.Namespace, p.Name), UID: string(p.UID), Namespace: p.Namespace, Name: p.Name,
		Generation: p.Generation, Created: p.CreationTimestamp.Time, QoS: podspec.QoS(p), Req: req, ReqErr: err,
		DemandMilli: milli, DemandCPUs: int((milli + 999) / 1000), KubeletStatic: static,
	}
	limits := map[string]corev1.ResourceList{}
	for _, ctr := range p.Spec.Containers {
		limits[ctr.Name] = ctr.Resources.Limits
	}
	for _, sts := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for _, st := range sts {
			info.Containers = append(info.Containers, pools.ContainerState{ID: st.ContainerID, Running: st.State.Running != nil, Terminated: st.State.Terminated != nil})
			if st.ContainerID != "" && st.State.Running != nil {
				if info.Running == nil {
					info.Running = map[string]bool{}
				}
				info.Running[st.ContainerID] = true
			}
		}
	}
	info.AllReported = len(p.Status.ContainerStatuses) >= len(p.Spec.Containers) && len(p.Status.InitContainerStatuses) >= len(p.Spec.InitContainers)
	info.Deleting = p.DeletionTimestamp != nil
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		info.Terminal = string(p.Status.Phase)
	}
	for _, st := range p.Status.ContainerStatuses {
		if st.ContainerID == "" {
			continue
		}
		if info.CPULimitsMilli == nil {
			info.CPULimitsMilli = map[string]int64{}
		}
		q := limits[st.Name][corev1.ResourceCPU]
		info.CPULimitsMilli[st.ContainerID] = podspec.MilliOf(q)
	}
	info.Untouched = !c.cfg.manages(p.Namespace) || static || (err == nil && req.Pool == local.PoolNone) ||
		p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	return info
}

// cpuDemandMilli is the pod's CPU limit (else request) over its app
// containers, or the largest init container's if larger, in millicores,
// saturated at podspec.MaxMilli.
func cpuDemandMilli(p *corev1.Pod) int64 {
	of := func(cs []corev1.Container) (sum, maxOne int64) {
		for _, c := range cs {
			q, ok := c.Resources.Limits[corev1.ResourceCPU]
			if !ok {
				q = c.Resources.Requests[corev1.ResourceCPU]
			}
			m := podspec.MilliOf(q)
			sum = min(sum, math.MaxInt64-m) + m
			maxOne = max(maxOne, m)
		}
		return min(sum, podspec.MaxMilli), maxOne
	}
	app, _ := of(p.Spec.Containers)
	_, initMax := of(p.Spec.InitContainers)
	return max(app, initMax)
}
