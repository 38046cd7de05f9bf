// Package cgroup finds pod and container cgroups on cgroup v1, hybrid and v2
// nodes, reads their usage cheaply and writes resources in a safe order.
//
// It never creates or deletes cgroups it does not own. It imports no k8s.io/*
// package except k8s.io/utils/cpuset, and none of topology, recommend or agent.
package cgroup
