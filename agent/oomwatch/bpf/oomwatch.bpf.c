// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * oomwatch.bpf.c - report every OOM victim the moment the kernel marks it.
 *
 * tp_btf/mark_victim fires in __oom_kill_process for memcg and global OOM
 * kills alike, needs neither tracefs nor kprobes, and is the only hook that
 * works on kernels that refuse fentry. Since Linux 6.8 the tracepoint passes
 * the victim task; before that only its pid. For those kernels,
 * tp_btf/signal_generate remembers every task that gets a kernel-sent
 * SIGKILL (the OOM killer sends it just before mark_victim), and
 * mark_victim looks the pid up there.
 */
#include "core.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct event {
	__u64 ktime_ns;  /* bpf_ktime_get_ns at mark_victim, CLOCK_MONOTONIC */
	__u64 memcg_ino; /* kernfs id (= dir inode) of the victim's memory cgroup */
	__u64 cgroup_id; /* kernfs id of the victim's cgroup2 (default hierarchy) cgroup */
	__u32 pid;       /* thread group id of the victim */
	__u32 tid;       /* the thread the OOM killer chose */
	__u8 comm[TASK_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
	__type(value, struct event);
} events SEC(".maps");

/* tid -> victim facts, for kernels whose mark_victim gives only the pid. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct event);
} killed SEC(".maps");

static __always_inline void fill(struct event *e, struct task_struct *t)
{
	int memcg = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);

	e->pid = BPF_CORE_READ(t, tgid);
	e->tid = BPF_CORE_READ(t, pid);
	BPF_CORE_READ_STR_INTO(&e->comm, t, comm);
	e->memcg_ino = BPF_CORE_READ(t, cgroups, subsys[memcg], cgroup, kn, id);
	e->cgroup_id = BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
}

/* Set only by the Go tests, to run the pre-6.8 path on a newer kernel. */
const volatile bool force_pid_path = false;

static __always_inline bool victim_is_task(void)
{
	return bpf_core_field_exists(struct trace_event_raw_mark_victim, anon_rss);
}

static __always_inline bool use_task_arg(void)
{
	return victim_is_task() && !force_pid_path;
}

/* SEND_SIG_PRIV: the kernel's own "this signal comes from the kernel". */
#define SEND_SIG_PRIV ((void *)1)

SEC("tp_btf/signal_generate")
int BPF_PROG(remember_kill, int sig, void *info, struct task_struct *t)
{
	struct event e = {};
	__u32 tid;

	if (sig != SIGKILL || info != SEND_SIG_PRIV || use_task_arg())
		return 0;
	fill(&e, t);
	tid = e.tid;
	bpf_map_update_elem(&killed, &tid, &e, BPF_ANY);
	return 0;
}

SEC("tp_btf/mark_victim")
int on_mark_victim(__u64 *ctx)
{
	struct event *e;

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	if (use_task_arg()) {
		fill(e, (struct task_struct *)ctx[0]);
	} else {
		/* Before 6.8 the argument is the victim's pid (tsk->pid). */
		__u32 tid = victim_is_task() ? BPF_CORE_READ((struct task_struct *)ctx[0], pid) : (__u32)ctx[0];
		struct event *seen = bpf_map_lookup_elem(&killed, &tid);

		if (seen) {
			__builtin_memcpy(e, seen, sizeof(*e));
			bpf_map_delete_elem(&killed, &tid);
		} else {
			/* No SIGKILL seen (not expected): report the pid alone. */
			__builtin_memset(e, 0, sizeof(*e));
			e->pid = tid;
			e->tid = tid;
		}
	}
	e->ktime_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(e, 0);
	return 0;
}
