// Package podspec reads what the agent needs of a pod object, by one rule
// each: its QoS class, CPU amounts in saturated millicores, a container's
// requests and limits in cores and bytes, and its key. The pools
// controller (package agent) and right-sizing (agent/rightsize/runner and
// agent/reporter) read pods through it, so that both see the same class
// and the same amounts.
//
// It imports k8s.io/api's core types, apimachinery's quantities, cgroup
// (for cgroup.QoS) and internal/cpulist; never client-go, never another
// package of the agent (hack/checkimports/walls.go).
package podspec

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/internal/cpulist"
)

// Key is the key of a pod: "namespace/name", client-go's object name
// (cache.MetaNamespaceKeyFunc's), the agent's workqueue key.
func Key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// MaxMilli bounds every CPU amount taken from a pod spec: more than the
// largest machine is as good as infinite, and the arithmetic on it must
// not overflow (a huge limit once panicked a worker).
const MaxMilli = cpulist.MaxCPUs * 1000

// MilliOf is q in millicores, saturated to [0, MaxMilli].
func MilliOf(q resource.Quantity) int64 {
	if q.Sign() <= 0 {
		return 0
	}
	if q.Cmp(*resource.NewMilliQuantity(MaxMilli, resource.DecimalSI)) >= 0 {
		return MaxMilli
	}
	return q.MilliValue()
}

// maxMemory caps a memory amount read from a spec: a petabyte is as good
// as unlimited, and adds without overflow.
const maxMemory = 1 << 50

// Requirements reads a container's requests and limits in cores and
// bytes, saturated like every amount the agent takes from a spec (CPU by
// MilliOf, memory at a petabyte; negative amounts are none).
func Requirements(r corev1.ResourceRequirements) (req, lim policy.Values) {
	cpu := func(l corev1.ResourceList) float64 {
		q, ok := l[corev1.ResourceCPU]
		if !ok {
			return 0
		}
		return float64(MilliOf(q)) / 1000
	}
	mem := func(l corev1.ResourceList) float64 {
		q, ok := l[corev1.ResourceMemory]
		if !ok || q.Sign() <= 0 {
			return 0
		}
		if q.Cmp(*resource.NewQuantity(maxMemory, resource.BinarySI)) > 0 {
			return maxMemory
		}
		return float64(q.Value())
	}
	return policy.Values{CPU: cpu(r.Requests), Memory: mem(r.Requests)}, policy.Values{CPU: cpu(r.Limits), Memory: mem(r.Limits)}
}

// QoS is the pod's QoS class: the status field when the API server has
// set it (it does when it admits a pod), else policy.QoSClass, the one
// QoS rule, over the keys present in the resource lists (init containers
// included; a present key counts as set whatever its value).
func QoS(p *corev1.Pod) cgroup.QoS {
	switch p.Status.QOSClass {
	case corev1.PodQOSGuaranteed:
		return cgroup.QoSGuaranteed
	case corev1.PodQOSBurstable:
		return cgroup.QoSBurstable
	case corev1.PodQOSBestEffort:
		return cgroup.QoSBestEffort
	}
	var rs []policy.QoSResource
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			rs = append(rs, policy.QoSResource{Request: hasReq, Limit: hasLim, Equal: hasReq && hasLim && req.Cmp(lim) == 0})
		}
	}
	return cgroup.QoS(policy.QoSClass(rs))
}
