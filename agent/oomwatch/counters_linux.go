//go:build linux

package oomwatch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/containerd/cgroups/v3/cgroup1"
	"golang.org/x/sys/unix"
)

// counterBackend watches the oom_kill counters of the watched directories.
// Notifications only say "look now"; the counter decides how many kills
// there were, because the v1 eventfd fires on the OOM condition, before
// (and sometimes without) a kill.
type counterBackend struct {
	w       *Watcher
	inotify *os.File       // v2 memory.events modifications
	byWd    map[int]string // inotify watch → directory; guarded by w.mu
	kmsg    *kmsgReader    // nil when /dev/kmsg cannot be read
	kmsgErr error
	// degraded is closed when the inotify reader fails: the poll then
	// runs every FallbackPoll.
	degraded chan struct{}
}

// confirmWindow bounds how long a v1 eventfd wake-up waits for the counter:
// the kill follows the OOM condition by well under a millisecond when the
// killer is not starved of CPU. A wake-up the counter does not confirm in
// that window is checked once more FallbackPoll later.
const confirmWindow = 250 * time.Millisecond

// DefaultPoll and FallbackPoll pace the re-reading of every watched
// counter. Each counter has its own notification (v2 inotify, v1 eventfd;
// TestOOMKillSeen sees kills with no poll at all), so the poll is only a
// safety net, once a minute: at 2 s it read two files of every pod each
// time, half of the agent's CPU on a node of 110 pods
// (BenchmarkNodeFootprint's profile). If the inotify reader fails, the v2
// counters have no notification left and are polled every FallbackPoll.
const (
	DefaultPoll  = time.Minute
	FallbackPoll = 2 * time.Second
)

func startCounters(w *Watcher) (*counterBackend, error) {
	c := &counterBackend{w: w, byWd: map[int]string{}, degraded: make(chan struct{})}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("oomwatch: inotify_init1: %w", err)
	}
	// A non-blocking fd in os.File goes through the runtime poller, so
	// Close wakes the reader.
	c.inotify = os.NewFile(uintptr(fd), "inotify")
	if w.cfg.Kmsg != "-" {
		c.kmsg, c.kmsgErr = openKmsg(w.cfg.Kmsg)
		if c.kmsgErr != nil {
			w.log.Info("no victim pids from the kernel log", "err", c.kmsgErr.Error())
		}
	} else {
		c.kmsgErr = errors.New("disabled by configuration")
	}
	w.wg.Add(2)
	go func() { defer w.wg.Done(); c.readInotify() }()
	go func() { defer w.wg.Done(); c.poll() }()
	return c, nil
}

func (c *counterBackend) kmsgState() string {
	if c.kmsg != nil {
		return c.w.cfg.Kmsg + " oom-kill lines"
	}
	return fmt.Sprintf("nowhere (%v)", c.kmsgErr)
}

// add starts watching d's counter. Caller holds w.mu.
func (c *counterBackend) add(d *watchedDir) error {
	n, err := readCounter(d)
	if err != nil {
		return err
	}
	d.last = n
	file := filepath.Join(d.path, d.counter)
	if d.v2 {
		wd, err := unix.InotifyAddWatch(int(c.inotify.Fd()), file, unix.IN_MODIFY)
		if err != nil {
			return fmt.Errorf("%w: inotify %s: %w", ErrNotCgroup, file, err)
		}
		d.wd = wd
		c.byWd[wd] = d.path
		return nil
	}
	efd, err := oomEventFD(d)
	if err != nil {
		return err
	}
	d.efd = efd
	c.w.wg.Add(1)
	go func() { defer c.w.wg.Done(); c.readEventFD(d.path, efd) }()
	return nil
}

// oomEventFD registers an eventfd for the v1 OOM notification of d with
// containerd's cgroup1 helper (write "<efd> <fd of memory.oom_control>" to
// cgroup.event_control). The helper addresses cgroups as (mount parent
// joined with "memory", path), so the hierarchy must be mounted at
// <something>/memory, as every runtime mounts it.
func oomEventFD(d *watchedDir) (*os.File, error) {
	if filepath.Base(d.mountPoint) != "memory" {
		return nil, fmt.Errorf("%w: v1 memory hierarchy mounted at %s, not .../memory: no OOM eventfd", ErrNotCgroup, d.mountPoint)
	}
	rel := strings.TrimPrefix(d.path, d.mountPoint)
	mem := cgroup1.NewMemory(filepath.Dir(d.mountPoint))
	cg, err := cgroup1.Load(cgroup1.StaticPath(rel), cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) {
		return []cgroup1.Subsystem{mem}, nil
	}))
	if err != nil {
		return nil, fmt.Errorf("%w: load v1 memory cgroup %s: %w", ErrNotCgroup, d.path, err)
	}
	fd, err := cg.OOMEventFD()
	if err != nil {
		return nil, fmt.Errorf("%w: OOM eventfd for %s: %w", ErrNotCgroup, filepath.Join(d.path, "memory.oom_control"), err)
	}
	if err := unix.SetNonblock(int(fd), true); err != nil {
		unix.Close(int(fd))
		return nil, fmt.Errorf("oomwatch: eventfd for %s: %w", d.path, err)
	}
	return os.NewFile(fd, "oom-eventfd:"+d.path), nil
}

// remove stops watching d. Caller holds w.mu.
func (c *counterBackend) remove(d *watchedDir) {
	if d.wd >= 0 {
		_, _ = unix.InotifyRmWatch(int(c.inotify.Fd()), uint32(d.wd))
		delete(c.byWd, d.wd)
	}
	if d.efd != nil {
		_ = d.efd.Close() // ends readEventFD; the kernel drops the registration
	}
}

func (c *counterBackend) close() error {
	err := c.inotify.Close()
	c.w.mu.Lock()
	for _, d := range c.w.dirs {
		if d.efd != nil {
			_ = d.efd.Close()
		}
	}
	c.w.mu.Unlock()
	if c.kmsg != nil {
		err = errors.Join(err, c.kmsg.close())
	}
	return err
}

func (c *counterBackend) readInotify() {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := c.inotify.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				c.w.log.Error(err, "inotify read failed; falling back to polling", "every", FallbackPoll.String())
				close(c.degraded)
			}
			return
		}
		_ = c.w.cfg.Guard.Do(Loop, func() {
			for _, d := range c.notified(buf[:n]) {
				c.check(d, 0)
			}
		})
	}
}

// notified are the watched directories a batch of inotify events names.
func (c *counterBackend) notified(buf []byte) []string {
	var dirs []string
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		if d, ok := c.byWd[int(ev.Wd)]; ok {
			if ev.Mask&unix.IN_IGNORED != 0 { // the cgroup was removed
				delete(c.byWd, int(ev.Wd))
			} else {
				dirs = append(dirs, d)
			}
		}
		off += unix.SizeofInotifyEvent + int(ev.Len)
	}
	return dirs
}

func (c *counterBackend) readEventFD(dir string, f *os.File) {
	var b [8]byte
	var recheck atomic.Bool // one late look pending at most
	for {
		if _, err := f.Read(b[:]); err != nil {
			return // closed by remove/close
		}
		_ = c.w.cfg.Guard.Do(Loop, func() {
			if c.check(dir, confirmWindow) == 0 && recheck.CompareAndSwap(false, true) {
				// Not confirmed yet (a killer starved of CPU, or an OOM
				// condition that reclaim resolved): look once more, in
				// case the kill came late.
				c.w.wg.Add(1) // this reader is counted: Close has not waited yet
				go func() {
					defer c.w.wg.Done()
					defer recheck.Store(false)
					select {
					case <-c.w.done:
					case <-time.After(FallbackPoll):
						_ = c.w.cfg.Guard.Do(Loop, func() { c.check(dir, 0) })
					}
				}()
			}
		})
	}
}

func (c *counterBackend) poll() {
	every := c.w.cfg.Poll
	t := time.NewTicker(every)
	defer t.Stop()
	degraded := c.degraded
	for {
		select {
		case <-c.w.done:
			return
		case <-degraded:
			degraded = nil
			if every > FallbackPoll {
				every = FallbackPoll
				t.Reset(every)
			}
			continue
		case <-t.C:
		}
		_ = c.w.cfg.Guard.Do(Loop, func() {
			for _, d := range c.w.watched() {
				c.check(d, 0)
			}
		})
	}
}

// check reads dir's counter and emits one event per new kill, and returns
// how many it emitted (-1: the cgroup is gone and no longer watched). With
// wait > 0 (a v1 OOM notification) it re-reads until the counter moves or
// wait has passed.
func (c *counterBackend) check(dir string, wait time.Duration) int {
	deadline := time.Now().Add(wait)
	for delay := 200 * time.Microsecond; ; delay *= 2 {
		evs, err := c.diff(dir)
		if err != nil {
			c.w.log.Info("dropping watched cgroup", "dir", dir, "err", err.Error())
			c.w.Unwatch(dir)
			return -1
		}
		for _, e := range evs {
			c.w.emit(e)
		}
		if len(evs) > 0 || !time.Now().Add(delay).Before(deadline) {
			return len(evs)
		}
		select {
		case <-c.w.done:
			return 0
		case <-time.After(delay):
		}
	}
}

// maxBurst caps the events of one counter jump; the rest are counted in
// the last event's log line only.
const maxBurst = 64

func (c *counterBackend) diff(dir string) ([]Event, error) {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	d, ok := c.w.dirs[dir]
	if !ok {
		return nil, nil
	}
	n, err := readCounter(d)
	if err != nil {
		return nil, err
	}
	if n <= d.last {
		return nil, nil
	}
	kills := n - d.last
	d.last = n
	seen := Monotonic()
	if kills > maxBurst {
		c.w.log.Info("more kills than events", "dir", dir, "kills", kills, "events", maxBurst)
		kills = maxBurst
	}
	src := SourceOOMControl
	if d.v2 {
		src = SourceMemoryEvents
	}
	var lines []kmsgOOM
	if c.kmsg != nil {
		lines = c.kmsg.take(d.kernelPath, int(kills))
	}
	evs := make([]Event, kills)
	for i := range evs {
		e := Event{Time: wallAt(seen), Seen: seen, MemcgInode: d.ino, Dir: dir, Source: src}
		if d.v2 {
			e.CgroupID = d.ino
		}
		if i < len(lines) {
			l := lines[i]
			e.PID, e.Comm = l.PID, l.Comm
			if l.TaskMemcg != d.kernelPath {
				// A child cgroup of the watched one; name its inode if it still exists.
				rel := strings.TrimPrefix(l.TaskMemcg, filepath.Join("/", d.mountRoot))
				if ino, err := Inode(filepath.Join(d.mountPoint, rel)); err == nil {
					e.MemcgInode = ino
					if d.v2 {
						e.CgroupID = ino
					}
				}
			}
		}
		evs[i] = e
	}
	return evs, nil
}

func readCounter(d *watchedDir) (uint64, error) {
	p := filepath.Join(d.path, d.counter)
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("%w: read %s: %w", ErrNotCgroup, p, err)
	}
	n, err := parseOOMKillCounter(b)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	return n, nil
}
