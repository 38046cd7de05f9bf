//go:build linux

package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/cgpilot/cgpilot/internal/loop"
)

// WatchLoop names the watch's loop in the *loop.Panic given to onErr.
const WatchLoop = "cgroup-watch"

// watch.go: inotify on the kubepods tree, so a caller learns at once that a
// pod or container cgroup appeared, a container's went away, or someone
// wrote a CPU placement file (cpuset.cpus, the CFS quota) of a pod or
// container, instead of waiting for a periodic sweep. The kernel raises
// IN_MODIFY on a cgroup file for every write(2) to it, whoever the writer.

// WatchKind says what changed in the tree.
type WatchKind int

const (
	// PodCreated: a pod cgroup appeared under a QoS cgroup.
	PodCreated WatchKind = iota + 1
	// ContainerCreated: a child cgroup appeared under a pod cgroup.
	ContainerCreated
	// ContainerRemoved: a child cgroup of a pod went away (the runtime
	// deletes it once the container's task is gone).
	ContainerRemoved
	// FileWritten: someone (this process, the kubelet, the runtime, a
	// person) wrote one of WatchedFiles of a pod or container cgroup;
	// Cgroup, File and Value say which and what it holds now.
	FileWritten
)

func (k WatchKind) String() string {
	switch k {
	case PodCreated:
		return "PodCreated"
	case ContainerCreated:
		return "ContainerCreated"
	case ContainerRemoved:
		return "ContainerRemoved"
	case FileWritten:
		return "FileWritten"
	}
	return "WatchKind(?)"
}

// WatchedFiles are the files whose writes the watch reports: the CPU
// placement the pools set (the cpuset, and the CFS quota they lift for
// exclusive pods). Writes to any other file are dropped unread.
var WatchedFiles = map[string]bool{cpusFile: true, "cpu.cfs_quota_us": true, "cpu.max": true}

// WatchEvent is one change of the tree.
type WatchEvent struct {
	Kind   WatchKind
	PodUID string
	// HasContainers: a PodCreated whose directory already held child
	// cgroups when the watch on it was added (they get no event of their
	// own).
	HasContainers bool
	// Cgroup (the path from each hierarchy's root, as PodPath gives),
	// File (its base name) and Value (its content, trimmed, read when the
	// event was handled) of a FileWritten.
	Cgroup, File, Value string
	At                  time.Time // when the event was read
}

// ErrWatchLimit is given to onErr when the kernel refused a watch
// (fs.inotify.max_user_watches): the cgroups left unwatched are only
// covered by the caller's sweep.
var ErrWatchLimit = errors.New("inotify watch limit reached (raise fs.inotify.max_user_watches)")

// watchTree is the state of one Watch: the QoS directories of every
// watched hierarchy, by absolute directory.
type watchTree struct {
	w   *fsnotify.Watcher
	qos map[string]qosDir
	// limited: ErrWatchLimit was reported once already.
	limited bool
	onErr   func(error)
	// known is the tree's record of the CPU placement files: a directory
	// is trusted there only once its watch is in place.
	known *known
}

type qosDir struct {
	rel    string // the QoS cgroup's path from the hierarchy root
	cpuset bool   // in the cpuset hierarchy: creations and removals are reported from it
}

// Watch watches the QoS cgroups (new pods), every pod cgroup (new and
// removed containers) and every container cgroup of the cpuset hierarchy
// and, on v1, of the cpu hierarchy (FileWritten) until ctx ends, calling
// handle for each change and onErr when inotify reports a problem (an
// overflowed queue or ErrWatchLimit: events may have been missed, so a
// caller's periodic sweep is still needed, or a *loop.Panic when handling
// one event panicked: that event is lost, the watch goes on). Cached child
// listings are dropped before handle runs, so a caller that lists the pod
// in handle sees the change; so is a recorded value (known.go) that a
// reported write changed, so a caller that applies the pod in handle reads
// it. While the watch runs, the directories it watches are the ones whose
// recorded values ApplyPod may trust; one Watch at a time per Kubepods.
// The returned channel is closed once the watch has ended (after ctx), so
// a caller can wait for its goroutine.
//
// A caller's own writes come back as FileWritten too: compare Value with
// what is wanted before acting on one.
func (k *Kubepods) Watch(ctx context.Context, handle func(WatchEvent), onErr func(error)) (<-chan struct{}, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	t := &watchTree{w: w, qos: map[string]qosDir{}, onErr: onErr, known: &k.known}
	for _, q := range k.QoSPaths() {
		d, err := k.layout.DirsAt(q)
		if err != nil {
			continue
		}
		hier := []string{d.CPUSet}
		if d.CPU != d.CPUSet {
			hier = append(hier, d.CPU)
		}
		for i, dir := range hier {
			if err := w.Add(dir); err != nil {
				if os.IsNotExist(err) {
					continue // e.g. no besteffort cgroup yet on this node
				}
				w.Close()
				k.known.clear(true)
				return nil, err
			}
			t.known.watching(dir, true)
			t.qos[dir] = qosDir{rel: q, cpuset: i == 0}
		}
	}
	for dir := range t.qos {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if _, ok := ParsePodDir(e.Name()); e.IsDir() && ok {
				t.addPod(filepath.Join(dir, e.Name()))
			}
		}
	}
	g := &loop.Guard{OnPanic: func(p *loop.Panic) { onErr(p) }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer k.known.clear(true) // nothing is trusted without the watch
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				k.ForgetChildren("")
				k.known.clear(false)
				onErr(err)
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				_ = g.Do(WatchLoop, func() { k.dispatch(t, ev, handle) })
			}
		}
	}()
	return done, nil
}

// add watches dir; a refusal for the watch limit is reported once.
func (t *watchTree) add(dir string) {
	err := t.w.Add(dir)
	if err == nil {
		t.known.watching(dir, true)
		return
	}
	if os.IsNotExist(err) {
		return
	}
	if errors.Is(err, syscall.ENOSPC) {
		if !t.limited {
			t.limited = true
			t.onErr(fmt.Errorf("%w: %s and later cgroups unwatched", ErrWatchLimit, dir))
		}
		return
	}
	t.onErr(fmt.Errorf("watch %s: %w", dir, err))
}

// addPod watches a pod directory and the child cgroups it already has; it
// reports whether there were any.
func (t *watchTree) addPod(dir string) bool {
	t.add(dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	has := false
	for _, e := range entries {
		if e.IsDir() {
			has = true
			t.add(filepath.Join(dir, e.Name()))
		}
	}
	return has
}

// place classifies a directory of the tree: a pod's (container is "") or
// one of its children's, with the pod's UID and the cgroup's path.
func (t *watchTree) place(dir string) (q qosDir, uid, rel string, ok bool) {
	podDir := dir
	if _, isPod := ParsePodDir(filepath.Base(dir)); !isPod {
		podDir = filepath.Dir(dir)
	}
	qd, isQoS := t.qos[filepath.Dir(podDir)]
	uid, isPod := ParsePodDir(filepath.Base(podDir))
	if !isQoS || !isPod {
		return qosDir{}, "", "", false
	}
	return qd, uid, qd.rel + strings.TrimPrefix(dir, filepath.Dir(podDir)), true
}

func (k *Kubepods) dispatch(t *watchTree, ev fsnotify.Event, handle func(WatchEvent)) {
	at := time.Now()
	parent, base := filepath.Dir(ev.Name), filepath.Base(ev.Name)
	if ev.Has(fsnotify.Write) && !ev.Has(fsnotify.Create) && !ev.Has(fsnotify.Remove) {
		if !WatchedFiles[base] && knownIndex(base) < 0 {
			return // cpu.shares, memory limits, the kernel's own notifications
		}
		// Read through the record (the descriptor it holds, one pread),
		// which records what the file holds now: the record learns of the
		// write before anyone acts on it, and a later write has its own
		// event.
		v, err := t.known.read(parent, base, false)
		if err != nil {
			t.known.forget(parent)
			return // the cgroup went away meanwhile: its removal is reported
		}
		_, uid, rel, ok := t.place(parent)
		if !ok || !WatchedFiles[base] {
			return // a QoS cgroup's file, or cpu.cfs_period_us
		}
		handle(WatchEvent{Kind: FileWritten, PodUID: uid, Cgroup: rel, File: base, Value: v, At: at})
		return
	}
	if !ev.Has(fsnotify.Create) && !ev.Has(fsnotify.Remove) && !ev.Has(fsnotify.Rename) {
		return
	}
	k.forgetDir(parent)
	k.forgetDir(ev.Name)
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		t.known.watching(ev.Name, false) // its inotify watch went with it
	}
	podUID, isPod := ParsePodDir(base)
	parentUID, inPod := ParsePodDir(filepath.Base(parent))
	pq, podInQoS := t.qos[filepath.Dir(parent)]
	inPod = inPod && podInQoS
	q, underQoS := t.qos[parent]
	switch {
	case ev.Has(fsnotify.Remove) && inPod:
		if pq.cpuset {
			handle(WatchEvent{Kind: ContainerRemoved, PodUID: parentUID, At: at})
		}
	case !ev.Has(fsnotify.Create):
	case underQoS && isPod:
		// A listing cached before the watch was added may miss a
		// container, and a container made before it has no event.
		has := t.addPod(ev.Name)
		k.forgetDir(ev.Name)
		if q.cpuset {
			handle(WatchEvent{Kind: PodCreated, PodUID: podUID, HasContainers: has, At: at})
		}
		t.written(ev.Name, handle)
	case inPod:
		t.add(ev.Name)
		if pq.cpuset {
			handle(WatchEvent{Kind: ContainerCreated, PodUID: parentUID, At: at})
		}
		t.written(ev.Name, handle)
	}
}

// written reports the watched files of a cgroup that appeared while the
// watch ran, as they are once its own watch is in place: the runtime
// writes them right after the mkdir, possibly before that watch existed,
// and such a write has no event of its own. The caller's comparison
// (pools.Agrees in the agent) drops the values it wants.
func (t *watchTree) written(dir string, handle func(WatchEvent)) {
	_, uid, rel, ok := t.place(dir)
	if !ok {
		return
	}
	at := time.Now()
	for _, f := range []string{cpusFile, "cpu.cfs_quota_us", "cpu.max"} {
		// An empty cpuset is a new cgroup's own (v1), or inherits (v2):
		// no one wrote it yet, and a write from now on has its event.
		if v, err := readFile(dir, f); err == nil && v != "" {
			handle(WatchEvent{Kind: FileWritten, PodUID: uid, Cgroup: rel, File: f, Value: v, At: at})
		}
	}
}
