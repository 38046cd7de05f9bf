// Package agent is the cgpilot node agent: it watches its node's pods and
// runs exclusive and shared CPU pools from pod annotations, writing the
// pods' cgroups through the cgroup package.
//
// # CPU pools
//
// The kubelet CPU manager split: pool state (state.go, checkpointed by
// checkpoint.go), a pure idempotent policy that receives the state
// (policy.go), and the machine's CPUs. The path of a pod change to a cgroup
// write is informer.go → reconcile.go (one workqueue hand-off) → pools.go
// → cgroup.Writer (through the thin cgroups_linux.go adapter). Reconcile
// computes the plan (the pool decision and every pod's target cpuset)
// before it writes; a failed write becomes a status annotation, an Event
// and a requeue. Annotations are patched afterwards by a second worker
// (off the write path), so an API round trip never delays the next
// cgroup write. Late container cgroups are caught by inotify
// (cgroupwatch_linux.go, cgroupfs and systemd naming) with a periodic sweep
// as the backstop; the watcher also keeps a cache of pod cgroup listings
// current, so a shared-pool refresh does not list every pod directory.
// The agent builds on Linux only.
//
// A deleted exclusive pod gives its cores back as soon as it can no longer
// run on them (every container reported terminated, or its container
// cgroups removed by the runtime), not when the pod object goes; never
// while a container the kubelet reports running has a cgroup we cannot
// vouch for. Drift is a value we wrote changed behind our back: a cgroup
// counts once it settled (its container reported running, or 5 s after we
// first saw it), so the runtime's own first cpuset on a new container is
// not drift.
//
// Annotation protocol (annotations.go): users set cgpilot.io/cpu-pool
// (exclusive | shared | none), cgpilot.io/cpus, cgpilot.io/cpuset,
// cgpilot.io/cpu-policy, cgpilot.io/numa, cgpilot.io/io-queues and
// cgpilot.io/release-isolation; the agent writes cgpilot.io/allocated-cpus
// and cgpilot.io/status on the pod, cgpilot.io/shared-pool and
// cgpilot.io/pool-summary on the Node.
//
// # Error contract
//
// Every error wraps a package sentinel: ErrInvalidAnnotation (and its
// specific children), ErrRefused (and its reasons, see Reason),
// ErrInvalidConfig, ErrCheckpointNotFound / ErrCheckpointCorrupt /
// ErrCheckpointVersion / ErrCheckpointWrite, ErrKubeletState and
// ErrCgroupWrite; each names the annotation, file or value involved. Bad
// input from a pod never changes anything but that pod's status: no other
// pod's cgroup, no allocation, no checkpoint byte.
//
// # Imports
//
// agent is the only package that knows Kubernetes objects. It imports
// cgroup (and later topology and recommend), client-go and Prometheus; it
// must not be imported by cgroup, topology or recommend.
package agent
