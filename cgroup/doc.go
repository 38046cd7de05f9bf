// Package cgroup finds pod and container cgroups on cgroup v1, hybrid and v2
// nodes, reads their usage cheaply and writes resources in a safe order.
//
// The agent uses three things:
//
//   - Layout (layout.go): ReadMounts("/proc") detects the mode from
//     mountinfo, NewLayout detects the kubelet driver (cgroupfs or systemd)
//     from the kubepods cgroup on disk, and PodDirs / ContainerDirs turn
//     (pod UID, QoS class, "containerd://<id>") into per-controller
//     directories, with the naming of containerd, CRI-O and docker.
//     LayoutConfig overrides detection for unusual nodes.
//   - Reader (reader.go): OpenReader(dirs) holds the stat files open and
//     Read fills a Stats (stats.go: CPU, throttling, memory, working set,
//     limit, OOM kills, PSI) with one pread per file and no allocation.
//   - Writer (writer.go): Apply(Plan) sets cpuset, shares/weight, CFS quota
//     and memory limits on a pod and its containers in the leveled order
//     documented on Apply, after safety checks, with dry-run, an audit
//     record per write, rollback on failure and Reassert for drift.
//   - Kubepods (kubepods.go): the node's kubepods tree as a whole, for the
//     CPU pools: the QoS parents, a pod's child cgroups (listed, and cached
//     while Watch keeps the cache current), cpuset reads, and ApplyPod,
//     which writes a pod's CPU placement through the Writer and absorbs the
//     races with the runtime that creates and removes those cgroups.
//     While Watch runs, the tree records the cpusets and CFS quotas it
//     wrote and read (known.go), reads and writes them through
//     descriptors held open while their directory is watched (one pread
//     or pwrite each, closed when the directory goes or the watch ends),
//     and ApplyPod writes from that record instead of reading first
//     unless asked to verify: the watch drops a value someone else wrote
//     before its handler sees the event, and a write the kernel rejects on
//     a wrong record is rolled back and the plan applied again reading
//     every file. Memory files are never recorded.
//     ApplyPodResources writes a pod's and its containers' CPU and memory
//     values in the same leveled order (resizes without pods/resize, OOM
//     raises); ReadCurrent reads what a cgroup holds, ReadMemoryLimit its
//     memory limit alone (the OOM raise's one read).
//     ParsePodDir reads a pod UID from a directory name, KubeletQuota is
//     the kubelet's CFS quota for a CPU limit.
//   - Watch (watch.go): inotify on the kubepods tree: pods and containers
//     appearing, containers going away, and writes to a pod's or
//     container's cpuset or CFS quota (FileWritten, with the value read
//     back), on every hierarchy the pools write; it keeps the record
//     above current.
//
// file.go is the only file that opens cgroup files; it goes through
// opencontainers/cgroups (openat2 confined to /sys/fs/cgroup, fstatfs check
// elsewhere), so the host cgroupfs must be mounted at /sys/fs/cgroup. This
// package never creates or deletes cgroups.
//
// One file per controller names its files on v1 and v2 and parses them:
// cpu.go (cpu and cpuacct: cpu.stat, the CFS quota and the order of its v1
// writes, shares and weight with the OCI runtime's conversion, KubeletQuota
// and KubeletShares), cpuset.go (cpuset.cpus and cpuset.mems), memory.go
// (usage, limits, memory.high, memory.stat's inactive file, the OOM-kill
// counter, memory.oom.group) and psi.go (the *.pressure files of the v2
// directory, also on hybrid hosts). parse.go is their allocation-free
// parsing of file contents as bytes (decimals, PSI's two-digit fractions,
// "key value" lines), which the Reader runs on every sample.
//
// Errors: every error wraps one sentinel of errors.go (ErrGone for a cgroup
// that disappeared, ErrNotReady for one not yet created in every hierarchy,
// ErrParse, ErrRefused, ErrWrite, ErrRead, ErrLayout, ErrNotCgroupfs,
// ErrBadName, ErrUnsupported) and names the file and the
// value; *FileError carries the errno, *Refusal the rule that refused. A
// refused plan writes nothing; a plan the kernel rejects half-way is rolled
// back. Whatever its callers computed, the Writer refuses a value that came
// from a negative or overflowed amount: a memory limit or memory.high below
// -1 (v1 reads any negative limit as unlimited), a quota below -1
// (KubeletQuota of a negative limit is InvalidQuota), shares of 0
// (KubeletShares of a negative request); a memory margin that is no
// fraction (NaN would turn the usage check off) is the default one.
//
// It imports no k8s.io/* package except k8s.io/utils/cpuset, internal/*
// (cpulist parses every CPU list), fsnotify, and none of topology,
// recommend, api or agent.
package cgroup
