// Package topology reads a node's CPU, cache, NUMA and IO-queue topology from
// sysfs and procfs and picks exclusive cores for a request.
//
// It imports no k8s.io/* package except k8s.io/utils/cpuset, and none of
// cgroup, recommend or agent. Roots are parameters, so the same code reads the
// live machine and captured trees.
package topology
