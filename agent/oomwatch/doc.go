// Package oomwatch sees OOM kills as they happen and says which cgroup they
// hit.
//
// A Watcher has one of two backends, chosen once by a feature probe in New
// (Watcher.Backend and Watcher.Reason say which and why):
//
//   - BackendBPF: an eBPF program on tp_btf/mark_victim (CO-RE, object
//     committed in oomwatch_bpfel.o, source in bpf/) reports every victim on
//     the node, with pid, comm, the inode of its memory cgroup and its
//     cgroup2 id, through a ring buffer, within microseconds. It needs BTF
//     and Linux 5.8 (ring buffer); neither tracefs nor kprobes nor fentry.
//     Kernels before 6.8 (unless backported: Debian 6.1 has it) pass only
//     the pid to mark_victim; there a second
//     program on tp_btf/signal_generate supplies the task.
//   - BackendCounters: without BPF, the oom_kill counters of the cgroup
//     directories registered with Watch: v2 memory.events through inotify,
//     v1 memory.oom_control through a cgroup.event_control eventfd
//     (containerd/cgroups/v3 cgroup1), both confirmed by the counter and
//     backed by a slow poll. The victim's pid and comm come from the
//     kernel's "oom-kill:" line in /dev/kmsg when it can be read and is not
//     rate-limited; otherwise they are zero.
//
// The caller maps an Event to a pod by inode: Inode stats a cgroup
// directory, and Event.Dir names the registered directory that matched.
// The kernfs id the BPF program reads equals that directory's inode number.
//
// Errors: New fails only on bad configuration or when the caller forced a
// backend that cannot run here (ErrUnavailable); in BackendAuto a missing
// BPF feature is a fallback, not an error. Watch wraps ErrNotCgroup for a
// directory that is not a memory cgroup. Every error names the file or the
// feature and the underlying errno.
//
// It imports cgroup (mount discovery) and no k8s.io package, and must not
// import agent: the agent imports it.
package oomwatch
