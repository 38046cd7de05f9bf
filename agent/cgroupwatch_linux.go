//go:build linux

package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
)

// watchCgroups catches containers whose cgroup appears after the pod
// update: inotify on the QoS dirs (new pod dirs) and on every pod dir (new
// container dirs) of the cpuset hierarchy. Each creation queues the pod, so
// the regular reconcile writes the new cgroup; each removal of a container
// cgroup queues its pod too (a deleted pod releases its exclusive CPUs once
// its containers are gone). The periodic sweep is the
// backstop for anything inotify misses (queue overflow, a watch added late).
func (c *controller) watchCgroups(ctx context.Context, cg cgroupBackend) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	qos := map[string]bool{}
	for _, q := range cg.QoSPaths() {
		dir := cg.CPUSetDir(q)
		qos[dir] = true
		if err := w.Add(dir); err != nil {
			if os.IsNotExist(err) {
				continue // e.g. no besteffort dir yet on this layout
			}
			w.Close()
			return err
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if _, ok := podDirUID(e.Name()); e.IsDir() && ok {
				_ = w.Add(filepath.Join(dir, e.Name()))
			}
		}
	}
	go func() {
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				cg.ForgetChildren("")
				c.log.Error(err, "cgroup watch; the sweep covers missed events")
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				at := time.Now()
				parent, base := filepath.Dir(ev.Name), filepath.Base(ev.Name)
				if !ev.Has(fsnotify.Create) && !ev.Has(fsnotify.Remove) && !ev.Has(fsnotify.Rename) {
					continue // our own (and others') writes to cgroup files
				}
				// Before the pod is queued: its reconcile must list afresh.
				cg.ForgetChildren(parent)
				cg.ForgetChildren(ev.Name)
				podUID, isPod := podDirUID(base)
				parentUID, inPod := podDirUID(filepath.Base(parent))
				if ev.Has(fsnotify.Remove) && qos[filepath.Dir(parent)] && inPod {
					// A container's cgroup goes once its task is deleted:
					// a deleted pod may be done with its CPUs before the
					// kubelet says so.
					c.enqueueUID(parentUID, at, false)
					continue
				}
				if !ev.Has(fsnotify.Create) {
					continue
				}
				switch {
				case qos[parent] && isPod:
					_ = w.Add(ev.Name)
					cg.ForgetChildren(ev.Name) // a listing cached before the watch may miss a container
					// A container made before the watch was added has no
					// event of its own: count it as late from now.
					late := false
					if entries, err := os.ReadDir(ev.Name); err == nil {
						for _, e := range entries {
							late = late || e.IsDir()
						}
					}
					c.enqueueUID(podUID, at, late)
				case qos[filepath.Dir(parent)] && inPod:
					c.enqueueUID(parentUID, at, true)
				}
			}
		}
	}()
	return nil
}

// podDirUID returns the pod UID of a pod cgroup directory name, for the
// cgroupfs driver ("pod<uid>") and the systemd one
// ("kubepods-burstable-pod<uid_with_underscores>.slice").
func podDirUID(name string) (string, bool) {
	if uid, ok := strings.CutPrefix(name, "pod"); ok && uid != "" && !strings.Contains(uid, ".") {
		return uid, true
	}
	if !strings.HasSuffix(name, ".slice") {
		return "", false
	}
	i := strings.LastIndex(name, "-pod")
	if i < 0 {
		return "", false
	}
	uid := strings.TrimSuffix(name[i+len("-pod"):], ".slice")
	if uid == "" || strings.ContainsAny(uid, "-.") {
		return "", false
	}
	return strings.ReplaceAll(uid, "_", "-"), true
}

// enqueueUID queues the pod with this UID; late marks a new container cgroup
// (timed by the late-container histogram).
func (c *controller) enqueueUID(uid string, at time.Time, late bool) {
	objs, _ := c.indexer.ByIndex(uidIndex, uid)
	if len(objs) != 1 {
		return // pod not known yet: its informer event will queue it
	}
	p, ok := objs[0].(*corev1.Pod)
	if !ok {
		return
	}
	key := p.Namespace + "/" + p.Name
	if late {
		c.mu.Lock()
		if _, pending := c.late[key]; !pending {
			c.late[key] = at
		}
		c.mu.Unlock()
	}
	c.enqueue(key, at)
}
