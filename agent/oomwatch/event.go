package oomwatch

import (
	"fmt"
	"time"
)

// Source says which mechanism saw a kill.
type Source int

const (
	// SourceBPF: the tp_btf/mark_victim program.
	SourceBPF Source = iota + 1
	// SourceMemoryEvents: a v2 memory.events oom_kill increment.
	SourceMemoryEvents
	// SourceOOMControl: a v1 memory.oom_control oom_kill increment.
	SourceOOMControl
)

func (s Source) String() string {
	switch s {
	case SourceBPF:
		return "bpf:mark_victim"
	case SourceMemoryEvents:
		return "memory.events"
	case SourceOOMControl:
		return "memory.oom_control"
	}
	return fmt.Sprintf("Source(%d)", int(s))
}

// Event is one OOM kill.
type Event struct {
	// Time is the wall-clock time of the kill: the kernel's stamp for
	// SourceBPF, when the counter change was seen otherwise.
	Time time.Time
	// Kernel is the CLOCK_MONOTONIC time at which the kernel marked the
	// victim (SourceBPF); 0 when unknown.
	Kernel time.Duration
	// Seen is the CLOCK_MONOTONIC time at which the Watcher had the event,
	// so Seen-Kernel is the delivery latency.
	Seen time.Duration
	// PID is the victim's process id (thread group id); 0 when unknown.
	PID int
	// Comm is the victim's command name; "" when unknown.
	Comm string
	// MemcgInode is the inode of the victim's memory cgroup directory: in
	// the v1 memory hierarchy on v1 and hybrid hosts, in the cgroup2 tree
	// on unified hosts. For counter events without a kmsg match it is the
	// registered directory's inode.
	MemcgInode uint64
	// CgroupID is the victim's cgroup2 id (its directory's inode in the
	// cgroup2 tree); 0 when unknown.
	CgroupID uint64
	// Dir is the registered directory the kill belongs to (the victim's
	// memory cgroup or cgroup2 directory, or the counter's directory); ""
	// when no registered directory matched.
	Dir string
	// Source says which mechanism saw it.
	Source Source
}

func (e Event) String() string {
	return fmt.Sprintf("oom kill pid=%d comm=%q memcg_ino=%d cgroup_id=%d dir=%q source=%s at %s",
		e.PID, e.Comm, e.MemcgInode, e.CgroupID, e.Dir, e.Source, e.Time.Format(time.RFC3339Nano))
}
