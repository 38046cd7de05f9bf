package oomwatch

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cgpilot/cgpilot/cgroup"
)

// parseOOMKillCounter returns the oom_kill counter of a v1
// memory.oom_control or v2 memory.events file, by cgroup.ParseOOMKills.
func parseOOMKillCounter(b []byte) (uint64, error) {
	n, ok, err := cgroup.ParseOOMKills(b)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w: oom_kill counter in %q: %w", ErrParse, truncate(b), err)
	case !ok:
		return 0, fmt.Errorf("%w: no oom_kill line in %q", ErrParse, truncate(b))
	}
	return n, nil
}

func truncate(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "..."
	}
	return string(b)
}

// kmsgRecord is one /dev/kmsg record (Documentation/ABI/testing/dev-kmsg):
// "prio,seq,usec,flags[,...];message\n" plus optional " KEY=value" lines.
type kmsgRecord struct {
	Seq uint64
	// Mono is the kernel's printk timestamp (local_clock: close to, but
	// not the same clock as, CLOCK_MONOTONIC).
	Mono time.Duration
	Msg  string
}

func parseKmsgRecord(b []byte) (kmsgRecord, error) {
	head, body, ok := bytes.Cut(b, []byte{';'})
	if !ok {
		return kmsgRecord{}, fmt.Errorf("%w: kmsg record without ';': %q", ErrParse, truncate(b))
	}
	f := bytes.SplitN(head, []byte{','}, 5)
	if len(f) < 4 {
		return kmsgRecord{}, fmt.Errorf("%w: kmsg header %q", ErrParse, truncate(head))
	}
	seq, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return kmsgRecord{}, fmt.Errorf("%w: kmsg sequence %q: %w", ErrParse, f[1], err)
	}
	usec, err := strconv.ParseUint(string(f[2]), 10, 63)
	if err != nil || usec > uint64(1<<63-1)/uint64(time.Microsecond) {
		return kmsgRecord{}, fmt.Errorf("%w: kmsg timestamp %q", ErrParse, f[2])
	}
	msg, _, _ := bytes.Cut(body, []byte{'\n'})
	return kmsgRecord{Seq: seq, Mono: time.Duration(usec) * time.Microsecond, Msg: string(msg)}, nil
}

// oomKillLine is the kernel's one-line OOM summary (mm/oom_kill.c,
// dump_oom_summary):
//
//	oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a,task_memcg=/a/b,task=hog,pid=42,uid=0
//
// It is rate-limited together with the rest of the OOM report, so a burst
// of kills can lack it.
type oomKillLine struct {
	Constraint string
	TaskMemcg  string // path of the victim's memory cgroup from its hierarchy root
	Comm       string
	PID        int
}

const oomKillPrefix = "oom-kill:"

// parseOOMKillLine parses msg; ok is false for any other message. Cgroup
// paths and comm may contain commas, so the fields are cut at the known
// keys: pid and uid from the end, the rest from the front.
func parseOOMKillLine(msg string) (l oomKillLine, ok bool) {
	rest, found := strings.CutPrefix(msg, oomKillPrefix)
	if !found {
		return oomKillLine{}, false
	}
	c, _, _ := strings.Cut(rest, ",")
	if l.Constraint, found = strings.CutPrefix(c, "constraint="); !found {
		return oomKillLine{}, false
	}
	iu := strings.LastIndex(rest, ",uid=")
	if iu < 0 {
		return oomKillLine{}, false
	}
	ip := strings.LastIndex(rest[:iu], ",pid=")
	if ip < 0 {
		return oomKillLine{}, false
	}
	pid, err := strconv.Atoi(rest[ip+len(",pid=") : iu])
	if err != nil || pid <= 0 {
		return oomKillLine{}, false
	}
	im := strings.Index(rest[:ip], ",task_memcg=")
	if im < 0 {
		return oomKillLine{}, false
	}
	mid := rest[im+len(",task_memcg=") : ip]
	// The first ",task=": cgroup names come from the runtime, comm from the
	// process itself, so a comm cannot move the cgroup boundary.
	it := strings.Index(mid, ",task=")
	if it < 0 {
		return oomKillLine{}, false
	}
	l.TaskMemcg, l.Comm, l.PID = mid[:it], mid[it+len(",task="):], pid
	if !strings.HasPrefix(l.TaskMemcg, "/") {
		return oomKillLine{}, false
	}
	return l, true
}

// String formats l as the kernel does (the fields parseOOMKillLine reads).
func (l oomKillLine) String() string {
	return fmt.Sprintf("%sconstraint=%s,nodemask=(null),cpuset=/,mems_allowed=0,task_memcg=%s,task=%s,pid=%d,uid=0",
		oomKillPrefix, l.Constraint, l.TaskMemcg, l.Comm, l.PID)
}
