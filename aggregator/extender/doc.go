// Package extender is a kube-scheduler extender. Its filter verb (Filter)
// keeps a pod off nodes where the 7-day peaks of the pods there plus its
// own would pass profile.Rule; its prioritize verb (Handler) scores nodes
// by their real usage, with weights that follow what the pod needs most:
//
//	demand_r = the pod's expected usage of r / the cluster's average free amount of r
//	weight_r = demand_r / (mean of demand over the resources)
//	score    = Σ_r freeFraction_r(node) × 10 × weight_r
//
// over r ∈ {CPU, memory}, where a node's free amount is allocatable minus
// its real usage (the latest report), its free fraction that amount over
// allocatable (clamped to [0, 1]), and the cluster's average free amount
// the mean over the nodes reporting. A pod that needs much CPU relative to
// what is free on average gets its score mostly from free CPU. The weights
// average 1, so scores lie in [0, 10 × 2]; the scheduler multiplies them by
// the extender's weight without clamping. A pod with no expected usage
// weighs both resources 1.
//
// A pod's expected usage is its workload's latest usage per pod (from the
// reports); a workload not seen yet counts its pod's requests. A node
// with no report gets the candidates' mean free fraction (neutral: new
// nodes are neither favoured nor avoided).
//
// Files: extender.go is the prioritize verb (Scores, Weights, Handler)
// and what both verbs share (reading the scheduler's ExtenderArgs, a
// pod's workload and its requests); filter.go is the filter verb (Filter),
// which asks profile.Rule of each candidate node's load.
//
// It imports the kube-scheduler extender types, api/report (the workload
// rule) and aggregator/profile; no client-go.
package extender
