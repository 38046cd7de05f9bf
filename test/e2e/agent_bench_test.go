//go:build linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	local "github.com/cgpilot/cgpilot/api/local"
)

func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p)
	return float64(s[i].Microseconds()) / 1000
}

// fileWatch waits for cgroup files to hold a value. It wakes on the
// inotify event of each write to a watched file (cgroupfs files have them,
// as any file written through write(2)) instead of spinning: a reader
// spinning every 50 µs took one of this machine's two cores from the
// agent it measured, and from the API server. The watch is set up before
// a benchmark's clock starts, so its cost is not on the measured path. A
// 5 ms poll backs it up; it decides only if an event were missed.
//
// A goroutine of its own takes each event as it comes and notes its time,
// as a watch floor's informer notes a change in its own goroutine: a
// benchmark calls wait only once its patch has returned, and the API
// server sends the watch event before that response (in 19 of 33 changes
// of one traced run the agent's write came first), so a time taken in
// wait was the patch's return, not the write's.
type fileWatch struct {
	b       *testing.B
	w       *fsnotify.Watcher
	changed chan struct{} // an event came (1-buffered: wakes a wait)

	mu     sync.Mutex
	events map[string][]time.Time // file -> when its events came, since drain
	err    error                  // the watch's error, for the next wait
}

func watchFiles(b *testing.B, files ...string) *fileWatch {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		b.Fatal(err)
	}
	fw := &fileWatch{b: b, w: w, changed: make(chan struct{}, 1), events: map[string][]time.Time{}}
	done := make(chan struct{})
	go fw.record(done)
	b.Cleanup(func() { w.Close(); <-done })
	for _, f := range files {
		fw.add(f)
	}
	return fw
}

// record notes each event's time until the watcher is closed.
func (fw *fileWatch) record(done chan struct{}) {
	defer close(done)
	for {
		select {
		case ev, ok := <-fw.w.Events:
			if !ok {
				return
			}
			at := time.Now()
			fw.mu.Lock()
			f := filepath.Clean(ev.Name)
			fw.events[f] = append(fw.events[f], at)
			fw.mu.Unlock()
		case err, ok := <-fw.w.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				continue // an overflow: the poll still sees the file
			}
			fw.mu.Lock()
			fw.err = err
			fw.mu.Unlock()
		}
		select {
		case fw.changed <- struct{}{}:
		default:
		}
	}
}

// add watches one more file.
func (fw *fileWatch) add(file string) {
	if err := fw.w.Add(file); err != nil {
		fw.b.Fatal(err)
	}
}

// lastEvent is when file's latest event since drain came, and the
// watch's error if it has one.
func (fw *fileWatch) lastEvent(file string) (time.Time, error) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	evs := fw.events[filepath.Clean(file)]
	if len(evs) == 0 {
		return time.Time{}, fw.err
	}
	return evs[len(evs)-1], fw.err
}

// eventGrace bounds how long wait waits for the event of a write it has
// already read: the recorder may not have run yet.
const eventGrace = 100 * time.Millisecond

// wait returns when it saw file (one of the watched) hold want (trimmed):
// the time the event of the write that put it there came (the latest
// event of file since drain when a read saw the value; a watch floor's is
// the time its handler saw the change), or the time of the read when no
// event of file's came within eventGrace of it (the value was there
// before drain, or the event was lost).
func (fw *fileWatch) wait(file, want string, limit time.Duration) time.Time {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for {
		raw, err := os.ReadFile(file)
		if err == nil && strings.TrimSpace(string(raw)) == want {
			read := time.Now()
			for {
				at, werr := fw.lastEvent(file)
				if werr != nil {
					fw.b.Fatalf("%s: watch: %v", file, werr)
				}
				if !at.IsZero() {
					return at
				}
				if time.Since(read) > eventGrace {
					return read
				}
				select {
				case <-fw.changed:
				case <-time.After(5 * time.Millisecond):
				}
			}
		}
		if _, werr := fw.lastEvent(file); werr != nil {
			fw.b.Fatalf("%s: watch: %v", file, werr)
		}
		select {
		case <-fw.changed:
		case <-poll.C:
		case <-deadline.C:
			fw.b.Fatalf("%s: %q not reached in %v (last %q, %v)", file, want, limit, raw, err)
		}
	}
}

// drain forgets the events of earlier writes, before a clock starts.
func (fw *fileWatch) drain() {
	fw.mu.Lock()
	clear(fw.events)
	fw.mu.Unlock()
	select {
	case <-fw.changed:
	default:
	}
}

// waitFile is a fileWatch of one file, for a wait whose set-up is not on
// a measured path.
func waitFile(b *testing.B, file, want string, limit time.Duration) time.Time {
	fw := watchFiles(b, file)
	defer fw.w.Close()
	return fw.wait(file, want, limit)
}

// watchFloor is a plain informer of the test's own: the time a pod change
// takes to reach any watcher is the floor no agent can beat.
type arrival struct {
	tag string
	at  time.Time
}

func watchFloor(b *testing.B, bd *bed) chan arrival {
	ch := make(chan arrival, 1024)
	f := informers.NewSharedInformerFactoryWithOptions(bd.cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", testNode).String()
	}))
	inf := f.Core().V1().Pods().Informer()
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			select {
			case ch <- arrival{p.Name + "@" + p.Annotations[local.AnnotationReleaseIsolation], time.Now()}:
			default:
			}
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return ch
}

// BenchmarkAnnotationToCgroup: a pod annotation change (release-isolation
// toggled on an exclusive pod) on the real API server, until the agent has
// written the container's cpuset.cpus. Baseline in the same run: the same
// change reaching a plain informer (the watch floor).
func BenchmarkAnnotationToCgroup(b *testing.B) {
	bd := newBed(b)
	bd.createPod(b, "web", "Burstable", nil, "app")
	bd.startAgent(b)
	_, rel, _ := bd.createPod(b, "db", "Guaranteed", map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "1"}, "postgres")
	var excl string
	eventually(b, "allocated", func() (bool, string) {
		_, ann := bd.status(b, "db")
		excl = ann[local.AnnotationAllocatedCPUs]
		return excl != "" && bd.k.CPUSet(rel+"/postgres") == excl, excl
	})
	floor := watchFloor(b, bd)
	file := filepath.Join(bd.k.SB.Path("cpuset", rel+"/postgres"), "cpuset.cpus")
	fw := watchFiles(b, file)
	all := mustSet(b, bd.cfg.CPUs).String()
	var lat, watch []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		release := i%2 == 0
		want := excl
		if release {
			want = all
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%t"}}}`, local.AnnotationReleaseIsolation, release)
		tag := fmt.Sprintf("db@%t", release)
		fw.drain()
		t0 := time.Now()
		if _, err := bd.cs.CoreV1().Pods("default").Patch(context.Background(), "db", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		done := fw.wait(file, want, 10*time.Second)
		lat = append(lat, done.Sub(t0))
		for seen := false; !seen; {
			select {
			case got := <-floor:
				if got.tag == tag {
					watch = append(watch, got.at.Sub(t0))
					seen = true
				}
			case <-time.After(10 * time.Second):
				b.Fatal("watch floor: event not seen")
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(percentile(lat, 0.5), "p50-ms")
	b.ReportMetric(percentile(lat, 0.99), "p99-ms")
	b.ReportMetric(percentile(watch, 0.5), "watch-p50-ms")
	b.ReportMetric(percentile(watch, 0.99), "watch-p99-ms")
	if w := percentile(watch, 0.5); w > 0 {
		b.ReportMetric(percentile(lat, 0.5)/w, "p50/watch")
	}
}

// BenchmarkSharedPoolRefresh200E2E: the same refresh end to end on the real
// API server: the exclusive pod's cpu-pool annotation is switched, and the
// clock stops when the last of 200 shared containers holds the new pool.
func BenchmarkSharedPoolRefresh200E2E(b *testing.B) {
	bd := newBed(b)
	var rels []string
	for i := 0; i < 200; i++ {
		p, err := bd.cs.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%03d", i), Namespace: "default"},
			Spec:       corev1.PodSpec{NodeName: testNode, Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		_, ctrs := bd.k.SB.MkdirPod("cgroupfs", "BestEffort", string(p.UID), "app")
		rels = append(rels, filepath.Join(bd.k.SB.Path("cpuset", ctrs[0]), "cpuset.cpus"))
	}
	bd.createPod(b, "db", "Guaranteed", nil, "postgres")
	bd.startAgent(b)
	all := mustSet(b, bd.cfg.CPUs)
	fw := watchFiles(b, rels...)
	for _, f := range rels {
		fw.wait(f, all.String(), 30*time.Second)
	}
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pool, want := "exclusive", ""
		if i%2 == 1 {
			pool, want = "shared", all.String()
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:"1"}}}`, local.AnnotationCPUPool, pool, local.AnnotationCPUs)
		if pool == "shared" {
			patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:null}}}`, local.AnnotationCPUPool, pool, local.AnnotationCPUs)
		}
		fw.drain()
		t0 := time.Now()
		if _, err := bd.cs.CoreV1().Pods("default").Patch(context.Background(), "db", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		if want == "" {
			// The shared pool is whatever the agent did not give db.
			eventually(b, "allocation", func() (bool, string) {
				_, ann := bd.status(b, "db")
				want = ann[local.AnnotationAllocatedCPUs]
				return want != "", ""
			})
			want = all.Difference(mustSet(b, want)).String()
		}
		var last time.Time // the latest of the 200 writes
		for _, f := range rels {
			if at := fw.wait(f, want, 30*time.Second); at.After(last) {
				last = at
			}
		}
		lat = append(lat, last.Sub(t0))
	}
	b.StopTimer()
	b.ReportMetric(percentile(lat, 0.5), "p50-ms")
	b.ReportMetric(percentile(lat, 0.99), "p99-ms")
}

// BenchmarkLateContainer: the window between a container cgroup appearing
// (mkdir, empty cpuset as v1 creates it) under a shared pod and the agent
// having written its cpuset. Baseline in the same run: the same mkdir
// reaching a test-owned inotify watcher (the kernel's delivery floor).
func BenchmarkLateContainer(b *testing.B) {
	bd := newBed(b)
	_, rel, _ := bd.createPod(b, "web", "Burstable", nil, "app")
	bd.startAgent(b)
	all := mustSet(b, bd.cfg.CPUs).String()
	waitFile(b, filepath.Join(bd.k.SB.Path("cpuset", rel+"/app"), "cpuset.cpus"), all, 30*time.Second)
	podDir := bd.k.SB.Path("cpuset", rel)
	fw := watchFiles(b) // each new container's cpuset.cpus is added once it exists
	w, err := fsnotify.NewWatcher()
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(podDir); err != nil {
		b.Fatal(err)
	}
	var window, floor []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dir := filepath.Join(podDir, fmt.Sprintf("late-%d", i))
		t0 := time.Now()
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		select {
		case <-w.Events:
			floor = append(floor, time.Since(t0))
		case <-time.After(5 * time.Second):
			b.Fatal("inotify floor: no event")
		}
		file := filepath.Join(dir, "cpuset.cpus")
		fw.add(file)
		done := fw.wait(file, all, 15*time.Second)
		window = append(window, done.Sub(t0))
		b.StopTimer()
		if err := os.Remove(dir); err != nil {
			b.Fatal(err)
		}
		for len(w.Events) > 0 {
			<-w.Events
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(percentile(window, 0.5), "window-p50-ms")
	b.ReportMetric(percentile(window, 0.99), "window-p99-ms")
	b.ReportMetric(percentile(floor, 0.5), "inotify-p50-ms")
}
