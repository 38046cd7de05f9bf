//go:build linux

package oomwatch

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/internal/loop"
)

// Loop names the watcher's reader goroutines in Config.Guard.
const Loop = "oom-watch"

// Backend selects how a Watcher sees kills.
type Backend int

const (
	// BackendAuto uses BPF when the probe succeeds and counters otherwise.
	BackendAuto Backend = iota
	// BackendBPF: tp_btf/mark_victim; New fails with ErrUnavailable
	// when it cannot load.
	BackendBPF
	// BackendCounters: oom_kill counters of the watched directories.
	BackendCounters
)

func (b Backend) String() string {
	switch b {
	case BackendAuto:
		return "auto"
	case BackendBPF:
		return "bpf"
	case BackendCounters:
		return "counters"
	}
	return fmt.Sprintf("Backend(%d)", int(b))
}

// Config configures a Watcher. The zero value watches with BackendAuto on
// the host's /proc and /dev/kmsg.
type Config struct {
	Backend Backend
	// ProcRoot is where procfs is mounted ("/proc" when empty); the cgroup
	// mounts are read from <ProcRoot>/self/mountinfo.
	ProcRoot string
	// Kmsg is the kernel log device the counters backend reads victims'
	// pids from ("/dev/kmsg" when empty, "-" for none).
	Kmsg string
	// Poll is the interval at which the counters backend re-reads every
	// counter, in case a notification was missed (DefaultPoll when zero;
	// at most FallbackPoll once inotify fails).
	Poll time.Duration
	// Logger gets the backend choice and non-fatal problems (none when nil).
	Logger logr.Logger
	// EventBuffer is the capacity of the Events channel (256 when zero).
	EventBuffer int
	// Guard, when set, runs each record, notification and poll of the
	// readers as an iteration of Loop: a panic costs that one (none
	// recovered when nil).
	Guard *loop.Guard

	// forcePidPath makes the BPF programs take the pre-6.8 path (pid
	// argument plus signal_generate) on a newer kernel; tests only.
	forcePidPath bool
}

// Watcher reports OOM kills on Events until Close.
type Watcher struct {
	cfg     Config
	log     logr.Logger
	mounts  cgroup.Mounts
	backend Backend
	reason  string
	events  chan Event
	done    chan struct{}
	wg      sync.WaitGroup
	close   sync.Once

	mu   sync.Mutex
	dirs map[string]*watchedDir // by cleaned directory path
	// byInode maps (hierarchy, inode) of watched directories to their path;
	// kernfs ids are per hierarchy, so the inode alone is ambiguous.
	byInode map[inodeKey]string

	bpf *bpfBackend
	ctr *counterBackend
}

type inodeKey struct {
	v2  bool
	ino uint64
}

// watchedDir is one directory given to Watch.
type watchedDir struct {
	path       string
	v2         bool
	ino        uint64
	kernelPath string // path from the hierarchy root, as the kernel prints it
	mountPoint string
	mountRoot  string
	counter    string // memory.events or memory.oom_control; "" when absent
	last       uint64 // last oom_kill count read
	efd        *os.File
	wd         int
}

// New probes the kernel, starts the chosen backend and returns the Watcher.
func New(cfg Config) (*Watcher, error) {
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.Kmsg == "" {
		cfg.Kmsg = "/dev/kmsg"
	}
	if cfg.Poll == 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Poll < 0 || cfg.EventBuffer < 0 {
		return nil, fmt.Errorf("oomwatch: negative Poll %v or EventBuffer %d", cfg.Poll, cfg.EventBuffer)
	}
	if cfg.EventBuffer == 0 {
		cfg.EventBuffer = 256
	}
	log := cfg.Logger
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	mounts, err := cgroup.ReadMounts(cfg.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("oomwatch: %w", err)
	}
	w := &Watcher{cfg: cfg, log: log, mounts: mounts, events: make(chan Event, cfg.EventBuffer),
		done: make(chan struct{}), dirs: map[string]*watchedDir{}, byInode: map[inodeKey]string{}}

	var bpfErr error
	if cfg.Backend == BackendAuto || cfg.Backend == BackendBPF {
		w.bpf, bpfErr = startBPF(w)
		if bpfErr == nil {
			w.backend, w.reason = BackendBPF, w.bpf.describe()
		} else if cfg.Backend == BackendBPF {
			return nil, bpfErr
		}
	}
	if w.bpf == nil {
		switch cfg.Backend {
		case BackendAuto, BackendCounters:
		default:
			return nil, fmt.Errorf("oomwatch: unknown backend %v", cfg.Backend)
		}
		if w.ctr, err = startCounters(w); err != nil {
			return nil, err
		}
		w.backend = BackendCounters
		if bpfErr != nil {
			w.reason = fmt.Sprintf("oom_kill counters of watched cgroups, because eBPF is unavailable: %v", bpfErr)
		} else {
			w.reason = "oom_kill counters of watched cgroups, as configured"
		}
		w.reason += "; pids from " + w.ctr.kmsgState()
	}
	log.Info("backend chosen", "backend", w.backend.String(), "reason", w.reason)
	return w, nil
}

// Backend returns the backend in use.
func (w *Watcher) Backend() Backend { return w.backend }

// Reason says why that backend was chosen, for the agent's log.
func (w *Watcher) Reason() string { return w.reason }

// Events delivers kills in the order seen. It is closed by Close.
func (w *Watcher) Events() <-chan Event { return w.events }

// Watch registers a memory cgroup directory (v1 memory hierarchy, or
// cgroup2): its kills get Dir set, and the counters backend watches its
// oom_kill counter. Watching a directory twice is a no-op.
func (w *Watcher) Watch(dir string) error {
	dir = filepath.Clean(dir)
	d, err := w.describeDir(dir)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.done:
		return ErrClosed
	default:
	}
	if _, ok := w.dirs[dir]; ok {
		return nil
	}
	if w.ctr != nil {
		if err := w.ctr.add(d); err != nil {
			return err
		}
	}
	w.dirs[dir] = d
	w.byInode[inodeKey{d.v2, d.ino}] = dir
	return nil
}

// Unwatch forgets dir. Unknown directories are ignored.
func (w *Watcher) Unwatch(dir string) {
	dir = filepath.Clean(dir)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unwatchLocked(dir)
}

func (w *Watcher) unwatchLocked(dir string) {
	d, ok := w.dirs[dir]
	if !ok {
		return
	}
	if w.ctr != nil {
		w.ctr.remove(d)
	}
	delete(w.dirs, dir)
	delete(w.byInode, inodeKey{d.v2, d.ino})
}

// Close stops the backend and closes Events.
func (w *Watcher) Close() error {
	var err error
	w.close.Do(func() {
		w.mu.Lock()
		close(w.done)
		w.mu.Unlock()
		if w.bpf != nil {
			err = w.bpf.close()
		}
		if w.ctr != nil {
			err = errors.Join(err, w.ctr.close())
		}
		w.wg.Wait()
		close(w.events)
	})
	return err
}

// emit delivers e unless the Watcher is closing.
// Watching is how many directories are watched.
func (w *Watcher) Watching() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.dirs)
}

// watched lists the watched directories.
func (w *Watcher) watched() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Collect(maps.Keys(w.dirs))
}

func (w *Watcher) emit(e Event) {
	select {
	case w.events <- e:
	case <-w.done:
	}
}

// Inode returns the inode number of a cgroup directory: the id the kernel
// gives that cgroup, which Event.MemcgInode and Event.CgroupID carry.
func Inode(dir string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, fmt.Errorf("%w: stat %s: %w", ErrNotCgroup, dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, fmt.Errorf("%w: %s is not a directory", ErrNotCgroup, dir)
	}
	return st.Ino, nil
}

// describeDir checks that dir is a cgroup directory and finds its hierarchy.
func (w *Watcher) describeDir(dir string) (*watchedDir, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return nil, fmt.Errorf("%w: statfs %s: %w", ErrNotCgroup, dir, err)
	}
	d := &watchedDir{path: dir, wd: -1}
	switch fs.Type {
	case unix.CGROUP2_SUPER_MAGIC:
		d.v2, d.mountPoint, d.mountRoot, d.counter = true, w.mounts.Unified.Point, w.mounts.Unified.Root, "memory.events"
	case unix.CGROUP_SUPER_MAGIC:
		m, ok := w.mounts.V1["memory"]
		if !ok {
			return nil, fmt.Errorf("%w: %s: no v1 memory hierarchy mounted", ErrNotCgroup, dir)
		}
		d.mountPoint, d.mountRoot, d.counter = m.Point, m.Root, "memory.oom_control"
	default:
		return nil, fmt.Errorf("%w: %s is on filesystem type %#x, not cgroupfs", ErrNotCgroup, dir, fs.Type)
	}
	rel, err := filepath.Rel(d.mountPoint, dir)
	if d.mountPoint == "" || err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("%w: %s is not below the memory hierarchy mounted at %q", ErrNotCgroup, dir, d.mountPoint)
	}
	d.kernelPath = filepath.Join("/", d.mountRoot, rel)
	if d.ino, err = Inode(dir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, d.counter)); err != nil {
		if w.ctr != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrNotCgroup, filepath.Join(dir, d.counter), err)
		}
		d.counter = "" // BPF needs no counter: a cgroup2 dir without the memory controller still matches by id
	}
	return d, nil
}

// match returns the watched directory with this id, preferring the
// memory cgroup.
func (w *Watcher) match(memcgIno, cgroupID uint64) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	memcgV2 := w.mounts.Mode == cgroup.ModeUnified
	if d, ok := w.byInode[inodeKey{memcgV2, memcgIno}]; ok && memcgIno != 0 {
		return d
	}
	if d, ok := w.byInode[inodeKey{true, cgroupID}]; ok && cgroupID != 0 {
		return d
	}
	return ""
}

// Monotonic reads CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns and of
// Event.Kernel and Event.Seen.
func Monotonic() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// wallAt converts a CLOCK_MONOTONIC time to wall-clock time.
func wallAt(mono time.Duration) time.Time {
	now, m := time.Now(), Monotonic()
	return now.Add(mono - m)
}
