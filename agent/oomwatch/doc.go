// Package oomwatch sees OOM kills as they happen and says which cgroup they
// hit.
//
// A Watcher has one of two backends, chosen once by a feature probe in New
// (Watcher.Backend and Watcher.Reason say which and why):
//
//   - BackendBPF: an eBPF program on tp_btf/mark_victim (CO-RE, object
//     committed in oomwatch_bpfel.o, source in bpf/) reports every victim on
//     the node, with pid, comm, the inode of its memory cgroup and its
//     cgroup2 id, through a ring buffer (0.1-3 ms from the kill to the
//     event, measured on loaded 2-CPU machines). It needs kernel BTF and
//     Linux 5.8 (ring buffer); neither tracefs nor kprobes nor fentry.
//     Kernels whose mark_victim passes only the pid (before 6.8, unless
//     backported as in Debian's 6.1) also get a program on
//     tp_btf/signal_generate, which supplies the task.
//   - BackendCounters: without BPF, the oom_kill counters of the cgroup
//     directories registered with Watch: v2 memory.events through inotify,
//     v1 memory.oom_control through a cgroup.event_control eventfd
//     (containerd/cgroups/v3 cgroup1), both confirmed by the counter and
//     backed by a slow poll. The victim's pid and comm come from the
//     kernel's "oom-kill:" line in /dev/kmsg when it can be read and is not
//     rate-limited; otherwise they are zero. v1 counts a kill only in the
//     victim's own memcg; v2 counts it in every ancestor too, so each
//     watched level (pod and container) gets its own event.
//
// The caller maps an Event to a pod by inode: Inode stats a cgroup
// directory, and Event.Dir names the registered directory that matched.
// The kernfs id the BPF program reads equals that directory's inode number.
// BPF events name only the victim's own cgroup, so watch containers (and
// pods, for kills in the pod cgroup itself).
//
// Files: watcher_linux.go holds the Watcher (Config, New's probe and
// choice of backend, Watch and Unwatch, the match of a kill's inode to a
// watched directory, the kernel clock read as wall time). bpf_linux.go is
// the BPF backend (load, attach, the ring buffer's reader); gen.go holds
// the go:generate line by which bpf2go compiles bpf/ into
// oomwatch_bpfel.o and writes oomwatch_bpfel.go, the generated Go binding
// that embeds that object. counters_linux.go is the counters backend
// (inotify, v1 eventfds, the poll, an event per kill the counter adds),
// kmsg_linux.go its reader of the kernel log's "oom-kill:" lines, and
// parse.go the pure, fuzzed parsers of the counter files, kmsg records
// and those lines. event.go holds Event and Source, errors.go the
// sentinels.
//
// Errors: New fails on bad configuration, when the cgroup mounts cannot
// be read or the counters backend cannot start, and when the caller forced
// a backend that cannot run here (ErrUnavailable); in BackendAuto a
// missing BPF feature is a fallback, not an error. Watch wraps
// ErrNotCgroup for a directory that is not a memory cgroup. Every error
// names the file, the feature or the text at fault, and wraps the
// underlying error (the errno) where there is one.
//
// It imports cgroup (mount discovery, the oom_kill counter's parser),
// cilium/ebpf, containerd/cgroups/v3 (the v1 eventfd), x/sys/unix, logr
// and internal/loop (Config.Guard: a panic in a reader costs one event),
// no k8s.io package, and must not import agent: the agent imports it.
package oomwatch
