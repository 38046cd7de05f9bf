package agent

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/agent/pools"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/internal/cpulist"
)

// keyOf is the workqueue key of a pod: "namespace/name".
func keyOf(namespace, name string) string { return cache.NewObjectName(namespace, name).String() }

// poolPod extracts what the pools need of a pod. static says whether the
// kubelet's static CPU manager holds CPUs for it.
func (c *controller) poolPod(p *corev1.Pod, static bool) pools.Pod {
	req, err := local.ParseAnnotations(p.Annotations)
	milli := cpuDemandMilli(p)
	info := pools.Pod{
		Key: keyOf(p.Namespace, p.Name), UID: string(p.UID), Namespace: p.Namespace, Name: p.Name,
		Generation: p.Generation, Created: p.CreationTimestamp.Time, QoS: qosClass(p), Req: req, ReqErr: err,
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
		info.CPULimitsMilli[st.ContainerID] = milliOf(q)
	}
	info.Untouched = !c.cfg.manages(p.Namespace) || static || (err == nil && req.Pool == local.PoolNone) ||
		p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	return info
}

// maxMilli bounds every CPU amount taken from a pod spec: more than the
// largest machine is as good as infinite, and the arithmetic on it must
// not overflow (a huge limit once panicked a worker).
const maxMilli = cpulist.MaxCPUs * 1000

// milliOf is q in millicores, saturated to [0, maxMilli].
func milliOf(q resource.Quantity) int64 {
	if q.Sign() <= 0 {
		return 0
	}
	if q.Cmp(*resource.NewMilliQuantity(maxMilli, resource.DecimalSI)) >= 0 {
		return maxMilli
	}
	return q.MilliValue()
}

// cpuDemandMilli is the pod's CPU limit (else request) over its app
// containers, or the largest init container's if larger, in millicores,
// saturated at maxMilli.
func cpuDemandMilli(p *corev1.Pod) int64 {
	of := func(cs []corev1.Container) (sum, maxOne int64) {
		for _, c := range cs {
			q, ok := c.Resources.Limits[corev1.ResourceCPU]
			if !ok {
				q = c.Resources.Requests[corev1.ResourceCPU]
			}
			m := milliOf(q)
			sum = min(sum, math.MaxInt64-m) + m
			maxOne = max(maxOne, m)
		}
		return min(sum, maxMilli), maxOne
	}
	app, _ := of(p.Spec.Containers)
	_, initMax := of(p.Spec.InitContainers)
	return max(app, initMax)
}

// qosClass is the pod's QoS class: the status field when the kubelet has
// set it, else computed by the Kubernetes rule.
func qosClass(p *corev1.Pod) cgroup.QoS {
	switch p.Status.QOSClass {
	case corev1.PodQOSGuaranteed:
		return cgroup.QoSGuaranteed
	case corev1.PodQOSBurstable:
		return cgroup.QoSBurstable
	case corev1.PodQOSBestEffort:
		return cgroup.QoSBestEffort
	}
	any, guaranteed := false, true
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			if hasReq || hasLim {
				any = true
			}
			if !hasLim || (hasReq && req.Cmp(lim) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !any:
		return cgroup.QoSBestEffort
	case guaranteed:
		return cgroup.QoSGuaranteed
	}
	return cgroup.QoSBurstable
}
