//go:build linux

package oomwatch

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// kmsgReader keeps the recent "oom-kill:" lines of the kernel log. It reads
// /dev/kmsg without blocking, only when a counter moved: the kernel logs
// the line before it increments the counter, so the line is already there.
type kmsgReader struct {
	fd     int
	buf    []byte
	recent []kmsgOOM // oldest first, at most kmsgKeep
}

type kmsgOOM struct {
	oomKillLine
	// read is when we read the line (CLOCK_MONOTONIC). The record's own
	// stamp is local_clock, which can run tens of ms apart from
	// CLOCK_MONOTONIC (seen in the qemu VM), so it is not used.
	read time.Duration
	// usedBy lists the watched cgroups (kernel paths) whose counter
	// change this line already explained: on v2 one kill counts in the
	// victim's cgroup and in every ancestor, so one line may explain a
	// change in each watched level, but only one change per level.
	usedBy []string
}

const (
	kmsgKeep = 256
	// kmsgMaxAge bounds how old a line may be to explain a counter change.
	kmsgMaxAge = 30 * time.Second
)

func openKmsg(path string) (*kmsgReader, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// Only new records: the history may hold kills the counters already count.
	if _, err := unix.Seek(fd, 0, unix.SEEK_END); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("seek %s: %w", path, err)
	}
	return &kmsgReader{fd: fd, buf: make([]byte, 8192)}, nil
}

// drain reads every record available now.
func (k *kmsgReader) drain() {
	for {
		n, err := unix.Read(k.fd, k.buf)
		if errors.Is(err, unix.EPIPE) {
			continue // records were overwritten before we read them; go on with the next
		}
		if err != nil || n <= 0 {
			return // EAGAIN: nothing more now
		}
		read := Monotonic()
		r, err := parseKmsgRecord(k.buf[:n])
		if err != nil {
			continue
		}
		l, ok := parseOOMKillLine(r.Msg)
		if !ok {
			continue
		}
		if len(k.recent) == kmsgKeep {
			k.recent = append(k.recent[:0], k.recent[1:]...)
		}
		k.recent = append(k.recent, kmsgOOM{oomKillLine: l, read: read})
	}
}

// take returns up to n lines not yet used for kernelPath, oldest first,
// whose victim was in the cgroup at kernelPath or below it, and marks them
// used for kernelPath.
func (k *kmsgReader) take(kernelPath string, n int) []kmsgOOM {
	k.drain()
	now := Monotonic()
	var out []kmsgOOM
	for i := range k.recent {
		l := &k.recent[i]
		if len(out) == n {
			break
		}
		if slices.Contains(l.usedBy, kernelPath) || now-l.read > kmsgMaxAge {
			continue
		}
		if l.TaskMemcg == kernelPath || strings.HasPrefix(l.TaskMemcg, strings.TrimSuffix(kernelPath, "/")+"/") {
			l.usedBy = append(l.usedBy, kernelPath)
			out = append(out, *l)
		}
	}
	return out
}

func (k *kmsgReader) close() error { return unix.Close(k.fd) }
