//go:build linux

package cgroup

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/cgpilot/cgpilot/internal/loop"
)

// WatchLoop names the watch's loop in the *loop.Panic given to onErr.
const WatchLoop = "cgroup-watch"

// watch.go: inotify on the kubepods tree, so a caller learns at once that a
// pod or container cgroup appeared or a container's went away, instead of
// waiting for a periodic sweep.

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
)

func (k WatchKind) String() string {
	switch k {
	case PodCreated:
		return "PodCreated"
	case ContainerCreated:
		return "ContainerCreated"
	case ContainerRemoved:
		return "ContainerRemoved"
	}
	return "WatchKind(?)"
}

// WatchEvent is one change of the tree.
type WatchEvent struct {
	Kind   WatchKind
	PodUID string
	// HasContainers: a PodCreated whose directory already held child
	// cgroups when the watch on it was added (they get no event of their
	// own).
	HasContainers bool
	At            time.Time // when the event was read
}

// Watch watches the QoS cgroups (new pods) and every pod cgroup (new and
// removed containers) of the cpuset hierarchy until ctx ends, calling
// handle for each change and onErr when inotify reports a problem (an
// overflowed queue: events may have been missed, so a caller's periodic
// sweep is still needed, or a *loop.Panic when handling one event
// panicked: that event is lost, the watch goes on). Cached child listings
// are dropped before handle
// runs, so a caller that lists the pod in handle sees the change. The
// returned channel is closed once the watch has ended (after ctx), so a
// caller can wait for its goroutine.
func (k *Kubepods) Watch(ctx context.Context, handle func(WatchEvent), onErr func(error)) (<-chan struct{}, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	qos := map[string]bool{}
	for _, q := range k.QoSPaths() {
		dir := k.cpusetDir(q)
		qos[dir] = true
		if err := w.Add(dir); err != nil {
			if os.IsNotExist(err) {
				continue // e.g. no besteffort cgroup yet on this node
			}
			w.Close()
			return nil, err
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if _, ok := ParsePodDir(e.Name()); e.IsDir() && ok {
				_ = w.Add(filepath.Join(dir, e.Name()))
			}
		}
	}
	g := &loop.Guard{OnPanic: func(p *loop.Panic) { onErr(p) }}
	done := make(chan struct{})
	go func() {
		defer close(done)
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
				onErr(err)
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				_ = g.Do(WatchLoop, func() { k.dispatch(w, qos, ev, handle) })
			}
		}
	}()
	return done, nil
}

func (k *Kubepods) dispatch(w *fsnotify.Watcher, qos map[string]bool, ev fsnotify.Event, handle func(WatchEvent)) {
	at := time.Now()
	if !ev.Has(fsnotify.Create) && !ev.Has(fsnotify.Remove) && !ev.Has(fsnotify.Rename) {
		return // writes to cgroup files, ours or others'
	}
	parent, base := filepath.Dir(ev.Name), filepath.Base(ev.Name)
	k.forgetDir(parent)
	k.forgetDir(ev.Name)
	podUID, isPod := ParsePodDir(base)
	parentUID, inPod := ParsePodDir(filepath.Base(parent))
	inPod = inPod && qos[filepath.Dir(parent)]
	switch {
	case ev.Has(fsnotify.Remove) && inPod:
		handle(WatchEvent{Kind: ContainerRemoved, PodUID: parentUID, At: at})
	case !ev.Has(fsnotify.Create):
	case qos[parent] && isPod:
		_ = w.Add(ev.Name)
		// A listing cached before the watch was added may miss a
		// container, and a container made before it has no event.
		k.forgetDir(ev.Name)
		has := false
		if entries, err := os.ReadDir(ev.Name); err == nil {
			for _, e := range entries {
				has = has || e.IsDir()
			}
		}
		handle(WatchEvent{Kind: PodCreated, PodUID: podUID, HasContainers: has, At: at})
	case inPod:
		handle(WatchEvent{Kind: ContainerCreated, PodUID: parentUID, At: at})
	}
}
