// Package millicpu is the one rounding of CPU amounts to the whole
// millicores Kubernetes writes requests and limits in: the agent's
// decisions and the cgroup values it writes for them (shares and quota,
// as the kubelet's MilliValue rounds them), the policy compiler's clamp
// and quantities, the aggregator's
// WorkloadRecommendation objects and the local API's strings (cgpilotctl)
// all go through it, so a value reads the same everywhere.
//
// millicpu.go holds the three roundings. Ceil rounds up and Floor down,
// each forgiving a hair of float error at a whole millicore (0.1 core is
// 100m, not 101m), and Cores is Ceil back in cores (the amount a request
// is written as); NaN, -Inf and values ≤ 0 are 0 and values above
// MaxCores (+Inf too) are MaxCores, so the millicores always fit an int64
// with room to add.
//
// It imports only the standard library (api/local, which cgpilotctl links,
// uses it).
package millicpu
