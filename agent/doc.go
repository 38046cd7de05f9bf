// Package agent wires the node agent together: it watches the node's pods
// and drives topology, cgroup and recommend from them.
//
// It is the only package that knows about Kubernetes objects.
package agent
