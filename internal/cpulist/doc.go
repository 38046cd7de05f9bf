// Package cpulist parses the Linux CPU list format ("0-3,8,10-11") with hard
// bounds, into k8s.io/utils/cpuset sets. It is the one CPU-list parser of
// cgpilot: sysfs and cgroup files, pod annotations, the node configuration,
// the kubelet's checkpoint, cgpilot's own checkpoints and the values the
// cgroup watch reads back all go through it.
//
// It exists because cpuset.Parse expands every range element by element
// before it removes duplicates, so a 256 KiB annotation of repeated
// "0-8191" ranges costs gigabytes; the kernel's own lists never exceed
// NR_CPUS. Parse, in cpulist.go with the bounds, works on a fixed bitset
// of MaxCPUs bits, refuses input longer than MaxLen before doing any work
// and stops at the element past MaxElements, and so parses or fails in
// time linear in its input and memory bounded by MaxCPUs.
//
// Errors wrap ErrSyntax (malformed text) or ErrBounds (an id, a length or an
// element count over the bounds) and name the offending element, id or
// bound.
//
// It imports only the standard library and k8s.io/utils/cpuset, and no
// cgpilot package.
package cpulist
