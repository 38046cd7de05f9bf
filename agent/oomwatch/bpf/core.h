/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * core.h - the few kernel types oomwatch.bpf.c reads, declared by hand with
 * preserve_access_index so that CO-RE relocates every field against the
 * running kernel's BTF. It replaces a 3 MB generated vmlinux.h: only the
 * fields named here must exist, at whatever offset the kernel puts them.
 */
#ifndef OOMWATCH_CORE_H
#define OOMWATCH_CORE_H

typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

/* UAPI constants (stable ABI, from linux/bpf.h). */
enum bpf_map_type {
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};
#define BPF_ANY 0

#define TASK_COMM_LEN 16
#define SIGKILL 9

#pragma clang attribute push (__attribute__((preserve_access_index)), apply_to = record)

struct kernfs_node {
	__u64 id; /* since 5.5 the inode number of the cgroup directory */
};

struct cgroup {
	struct kernfs_node *kn;
};

struct cgroup_subsys_state {
	struct cgroup *cgroup;
};

struct css_set {
	/* The length is a placeholder: the index is relocated by enum value. */
	struct cgroup_subsys_state *subsys[1];
	struct cgroup *dfl_cgrp;
};

struct task_struct {
	int pid;
	int tgid;
	char comm[TASK_COMM_LEN];
	struct css_set *cgroups;
};

/* Only used to ask whether the kernel's mark_victim tracepoint carries the
 * task (6.8 and later) or just its pid. */
struct trace_event_raw_mark_victim {
	unsigned long anon_rss;
};

#pragma clang attribute pop

enum cgroup_subsys_id {
	memory_cgrp_id = 4, /* relocated with bpf_core_enum_value */
};

#endif
