package kube

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/internal/loop"
)

// Pods is what the API server says runs where: for every pod bound to a
// node, the workloads it may be reported under, so that the aggregator
// trusts a node's report of a workload only if a pod of that workload is
// (or was, within Retention) bound to that node.
//
// A pod counts for its controller (or itself, bare), and for the workload
// an agent names from it when the API server is away: a ReplicaSet's
// Deployment by the pod-template-hash rule, a Job's CronJob by the
// "<cronjob>-<minutes>" name the CronJob controller gives its Jobs
// (report.WorkloadOf's fallbacks). A workload of another controller (a
// ReplicaSet of an Argo Rollout, say) is found, when a report names it, by
// reading the owner of the node's ReplicaSets and Jobs (Parent, cached).
//
// Why not an informer: a SharedInformer keeps a *corev1.Pod per pod
// (1,192 bytes of struct before any string, even trimmed by a transform):
// 600 MB for the 500,000 pods of the aggregator's load-generator scale.
// This keeps ~100 bytes a pod in its own store behind client-go's
// Reflector (which lists, watches, re-lists and backs off); list pages
// are turned into slim objects as they arrive (BenchmarkPodsMemory
// measures the store; see the README).
type Pods struct {
	// Retention is how long a deleted pod still counts for its node
	// (default 1 h): the last windows of a pod deleted mid-window, and
	// reports an agent buffered while the aggregator was away.
	Retention time.Duration
	// Parent returns the controller of a namespace's ReplicaSet or Job
	// (nil, true: none; false: not known now). Nil: no lookups.
	Parent func(ctx context.Context, namespace, kind, name string) (*report.Owner, bool)
	Now    func() time.Time

	lw     cache.ListerWatcher
	synced atomic.Bool

	mu        sync.RWMutex
	pods      map[string]podEntry // by podKey
	workloads []workloadEntry     // by index; 0 is unused
	wlIndex   map[report.Workload]uint32
	free      []uint32
	nodes     map[string]*nodeEntry
}

type podEntry struct {
	node            *nodeEntry
	direct, derived uint32 // workload indexes; derived 0: none
}

type workloadEntry struct {
	w    report.Workload
	refs int32
	// labels of the latest pod of the workload seen (policy matching).
	labels map[string]string
	// parent of a ReplicaSet or Job (0: none or not looked up), looked up
	// at parentAt.
	parent   uint32
	parentAt time.Time
}

type nodeEntry struct {
	name string
	// live pods per workload they count for
	live map[uint32]int32
	// gone: deleted pods, oldest first
	gone []tomb
}

type tomb struct {
	pod             string // namespace/name
	direct, derived uint32
	at              time.Time
}

// NewPods returns a cache of cs's pods (not yet running: Run).
func NewPods(cs kubernetes.Interface) *Pods {
	return newPods(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := cs.CoreV1().Pods("").List(ctx, o)
			if err != nil {
				return nil, err
			}
			return slimList(l), nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := cs.CoreV1().Pods("").Watch(ctx, o)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				if p, ok := e.Object.(*corev1.Pod); ok {
					sp := slim(p)
					if e.Type == watch.Bookmark {
						// The end of a watch-list's initial events is an
						// annotation of the bookmark.
						sp.Annotations = p.Annotations
					}
					e.Object = sp
				}
				return e, true
			}), nil
		},
	})
}

func newPods(lw cache.ListerWatcher) *Pods {
	return &Pods{lw: lw, pods: map[string]podEntry{}, workloads: make([]workloadEntry, 1),
		wlIndex: map[report.Workload]uint32{}, nodes: map[string]*nodeEntry{}}
}

// Run lists and watches the pods until ctx ends; Synced says when the
// first list is in.
func (p *Pods) Run(ctx context.Context) {
	r := cache.NewReflectorWithOptions(p.lw, &slimPod{}, &podStore{p}, cache.ReflectorOptions{Name: "cgpilot-aggregator pods"})
	go p.sweep(ctx)
	r.RunWithContext(ctx)
}

// Synced reports whether the first list has been read.
func (p *Pods) Synced() bool { return p.synced.Load() }

// WaitForSync waits until Synced or ctx ends.
func (p *Pods) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), p.Synced) {
		return fmt.Errorf("kube: the pod cache did not sync: %w", ctx.Err())
	}
	return nil
}

func (p *Pods) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Pods) retention() time.Duration {
	if p.Retention > 0 {
		return p.Retention
	}
	return time.Hour
}

// sweep drops expired tombstones every minute (a node whose pods are
// never deleted again keeps none for long).
func (p *Pods) sweep(ctx context.Context) {
	loop.Every(ctx, time.Minute, func() {
		p.mu.Lock()
		cut := p.now().Add(-p.retention())
		for name, n := range p.nodes {
			p.pruneLocked(n, cut)
			if len(n.live) == 0 && len(n.gone) == 0 {
				delete(p.nodes, name)
			}
		}
		p.mu.Unlock()
	})
}

func (p *Pods) pruneLocked(n *nodeEntry, cut time.Time) {
	i := 0
	for i < len(n.gone) && n.gone[i].at.Before(cut) {
		p.releaseLocked(n.gone[i].direct)
		p.releaseLocked(n.gone[i].derived)
		i++
	}
	if i > 0 {
		n.gone = append(n.gone[:0:0], n.gone[i:]...)
	}
}

// workloadLocked returns w's index, taking a reference (created if new).
func (p *Pods) workloadLocked(w report.Workload, labels map[string]string) uint32 {
	i, ok := p.wlIndex[w]
	if !ok {
		if n := len(p.free); n > 0 {
			i, p.free = p.free[n-1], p.free[:n-1]
			p.workloads[i] = workloadEntry{w: w}
		} else {
			i = uint32(len(p.workloads))
			p.workloads = append(p.workloads, workloadEntry{w: w})
		}
		p.wlIndex[w] = i
	}
	e := &p.workloads[i]
	e.refs++
	if labels != nil {
		e.labels = labels
	}
	return i
}

func (p *Pods) releaseLocked(i uint32) {
	if i == 0 {
		return
	}
	e := &p.workloads[i]
	if e.refs--; e.refs > 0 {
		return
	}
	parent := e.parent
	delete(p.wlIndex, e.w)
	*e = workloadEntry{}
	p.free = append(p.free, i)
	p.releaseLocked(parent)
}

// candidates are the workloads a pod counts for: its controller (or
// itself) and the one the workload rule's fallbacks name.
func candidates(sp *slimPod) (direct, derived report.Workload, hasDerived bool) {
	var owner *report.Owner
	if sp.ownerKind != "" {
		owner = &report.Owner{Kind: sp.ownerKind, Name: sp.ownerName}
	}
	direct = report.WorkloadOf(sp.Namespace, sp.Name, owner, nil, func(string, string) (*report.Owner, bool) { return nil, true })
	switch sp.ownerKind {
	case report.KindReplicaSet:
		if d := report.WorkloadOf(sp.Namespace, sp.Name, owner, sp.Labels, nil); d != direct {
			return direct, d, true
		}
	case report.KindJob:
		// The CronJob controller names its Jobs <cronjob>-<scheduled minutes>.
		if i := strings.LastIndexByte(sp.ownerName, '-'); i > 0 && i < len(sp.ownerName)-1 && digits(sp.ownerName[i+1:]) {
			return direct, report.Workload{Namespace: sp.Namespace, Kind: report.KindCronJob, Name: sp.ownerName[:i]}, true
		}
	}
	return direct, report.Workload{}, false
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// podKey is the key of a pod in Pods: "namespace/name".
func podKey(namespace, name string) string { return namespace + "/" + name }

func (p *Pods) addLocked(sp *slimPod) {
	key := podKey(sp.Namespace, sp.Name)
	if old, ok := p.pods[key]; ok {
		if old.node.name == sp.node {
			// Bound pods keep their node and owner: only the labels of
			// their workload may have changed.
			p.workloads[old.direct].labels = sp.Labels
			if old.derived != 0 {
				p.workloads[old.derived].labels = sp.Labels
			}
			return
		}
		p.removeLocked(key, old, false)
	}
	if sp.node == "" {
		return // not bound yet: it runs nowhere
	}
	n := p.nodes[sp.node]
	if n == nil {
		n = &nodeEntry{name: sp.node, live: map[uint32]int32{}}
		p.nodes[sp.node] = n
	}
	direct, derived, ok := candidates(sp)
	e := podEntry{node: n, direct: p.workloadLocked(direct, sp.Labels)}
	n.live[e.direct]++
	if ok {
		e.derived = p.workloadLocked(derived, sp.Labels)
		n.live[e.derived]++
	}
	p.pods[key] = e
}

// removeLocked forgets a pod; a deleted one (not a re-list's stale
// entry) leaves a tombstone that still counts for Retention.
func (p *Pods) removeLocked(key string, e podEntry, deleted bool) {
	delete(p.pods, key)
	n := e.node
	for _, i := range []uint32{e.direct, e.derived} {
		if i == 0 {
			continue
		}
		if n.live[i]--; n.live[i] <= 0 {
			delete(n.live, i)
		}
	}
	if deleted {
		n.gone = append(n.gone, tomb{pod: key, direct: e.direct, derived: e.derived, at: p.now()})
		if len(n.gone) > 4096 { // churn beyond any node's pods in an hour
			p.pruneLocked(n, n.gone[len(n.gone)-4096].at)
		}
		return
	}
	p.releaseLocked(e.direct)
	p.releaseLocked(e.derived)
}

// Bound returns how many pods counting for w are bound to node, or were
// and were deleted at or after from (within Retention). Workloads named
// only through a ReplicaSet's or Job's owner are looked up with Parent.
func (p *Pods) Bound(ctx context.Context, node string, w report.Workload, from time.Time) int {
	p.mu.RLock()
	n := p.nodes[node]
	if n == nil {
		p.mu.RUnlock()
		return 0
	}
	i, known := p.wlIndex[w]
	count := 0
	if known {
		count = int(n.live[i]) + countGone(n, from, func(t tomb) bool { return t.direct == i || t.derived == i })
	}
	p.mu.RUnlock()
	if count > 0 || p.Parent == nil {
		return count
	}
	return p.boundByParent(ctx, n, w, from)
}

func countGone(n *nodeEntry, from time.Time, match func(tomb) bool) int {
	c := 0
	for j := len(n.gone) - 1; j >= 0 && !n.gone[j].at.Before(from); j-- {
		if match(n.gone[j]) {
			c++
		}
	}
	return c
}

// parentTTL bounds how long a looked-up owner is trusted (as the agent's
// owner cache).
const parentTTL = 30 * time.Minute

// boundByParent counts the node's pods of ReplicaSets and Jobs in w's
// namespace whose own controller is w.
func (p *Pods) boundByParent(ctx context.Context, n *nodeEntry, w report.Workload, from time.Time) int {
	type owner struct {
		i uint32
		w report.Workload
	}
	var todo []owner
	p.mu.RLock()
	now := p.now()
	for i := range n.live {
		e := p.workloads[i]
		if e.w.Namespace == w.Namespace && (e.w.Kind == report.KindReplicaSet || e.w.Kind == report.KindJob) &&
			(e.parentAt.IsZero() || now.Sub(e.parentAt) > parentTTL) {
			todo = append(todo, owner{i, e.w})
		}
	}
	p.mu.RUnlock()
	// At most a few lookups per call: the node's own ReplicaSets and Jobs,
	// each cached.
	if len(todo) > 16 {
		todo = todo[:16]
	}
	for _, o := range todo {
		parent, ok := p.Parent(ctx, o.w.Namespace, o.w.Kind, o.w.Name)
		if !ok {
			continue
		}
		p.mu.Lock()
		if e := &p.workloads[o.i]; e.w == o.w {
			e.parentAt = now
			if e.parent != 0 {
				p.releaseLocked(e.parent)
				e = &p.workloads[o.i]
				e.parent = 0
			}
			if parent != nil && parent.Kind != "" && parent.Name != "" {
				pi := p.workloadLocked(report.Workload{Namespace: o.w.Namespace, Kind: parent.Kind, Name: parent.Name}, nil)
				p.workloads[o.i].parent = pi
			}
		}
		p.mu.Unlock()
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	target, ok := p.wlIndex[w]
	if !ok {
		return 0
	}
	isChild := func(i uint32) bool { return i != 0 && p.workloads[i].parent == target }
	count := 0
	for i, c := range n.live {
		if isChild(i) {
			count += int(c)
		}
	}
	return count + countGone(n, from, func(t tomb) bool { return isChild(t.direct) })
}

// PodOn reports whether pod namespace/name is (or was, deleted at or
// after from) bound to node and counts for w.
func (p *Pods) PodOn(ctx context.Context, node, namespace, name string, w report.Workload, from time.Time) bool {
	key := podKey(namespace, name)
	p.mu.RLock()
	e, live := p.pods[key]
	var direct, derived uint32
	found := false
	if live && e.node.name == node {
		direct, derived, found = e.direct, e.derived, true
	} else if n := p.nodes[node]; n != nil {
		for j := len(n.gone) - 1; j >= 0 && !n.gone[j].at.Before(from); j-- {
			if n.gone[j].pod == key {
				direct, derived, found = n.gone[j].direct, n.gone[j].derived, true
				break
			}
		}
	}
	if !found {
		p.mu.RUnlock()
		return false
	}
	match := p.workloads[direct].w == w || (derived != 0 && p.workloads[derived].w == w) ||
		(p.workloads[direct].parent != 0 && p.workloads[p.workloads[direct].parent].w == w)
	p.mu.RUnlock()
	if match || p.Parent == nil {
		return match
	}
	// A workload named through the pod's owner: look it up (cached).
	return p.Bound(ctx, node, w, from) > 0 && p.podParentIs(key, w)
}

func (p *Pods) podParentIs(key string, w report.Workload) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	e, ok := p.pods[key]
	if !ok {
		return true // deleted meanwhile: Bound found it among the tombstones
	}
	par := p.workloads[e.direct].parent
	return par != 0 && p.workloads[par].w == w
}

// Labels returns the labels of the latest pod seen of w (nil if none).
func (p *Pods) Labels(w report.Workload) map[string]string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if i, ok := p.wlIndex[w]; ok {
		return p.workloads[i].labels
	}
	return nil
}

// OnNode returns the live pods bound to node per workload they count for
// (a pod of a ReplicaSet counts for it and for its Deployment).
func (p *Pods) OnNode(node string) map[report.Workload]int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	n := p.nodes[node]
	if n == nil {
		return nil
	}
	out := make(map[report.Workload]int, len(n.live))
	for i, c := range n.live {
		out[p.workloads[i].w] = int(c)
	}
	return out
}

// Stats are the cache's sizes.
type PodStats struct{ Pods, Workloads, Nodes, Tombstones int }

// Stats returns the cache's sizes.
func (p *Pods) Stats() PodStats {
	p.mu.RLock()
	defer p.mu.RUnlock()
	s := PodStats{Pods: len(p.pods), Workloads: len(p.wlIndex), Nodes: len(p.nodes)}
	for _, n := range p.nodes {
		s.Tombstones += len(n.gone)
	}
	return s
}

// podStore is the Reflector's store: it turns slim pods into entries.
type podStore struct{ p *Pods }

func asSlim(obj any) (*slimPod, bool) {
	switch o := obj.(type) {
	case *slimPod:
		return o, true
	case cache.DeletedFinalStateUnknown:
		return asSlim(o.Obj)
	}
	return nil, false
}

func (s *podStore) Add(obj any) error {
	if sp, ok := asSlim(obj); ok {
		s.p.mu.Lock()
		s.p.addLocked(sp)
		s.p.mu.Unlock()
	}
	return nil
}

func (s *podStore) Update(obj any) error { return s.Add(obj) }

func (s *podStore) Delete(obj any) error {
	if sp, ok := asSlim(obj); ok {
		key := podKey(sp.Namespace, sp.Name)
		s.p.mu.Lock()
		if e, ok := s.p.pods[key]; ok {
			s.p.removeLocked(key, e, true)
		}
		s.p.mu.Unlock()
	}
	return nil
}

// Replace is a (re-)list: pods not in it were deleted meanwhile.
func (s *podStore) Replace(list []any, _ string) error {
	p := s.p
	p.mu.Lock()
	seen := make(map[string]struct{}, len(list))
	for _, obj := range list {
		if sp, ok := asSlim(obj); ok {
			seen[podKey(sp.Namespace, sp.Name)] = struct{}{}
			p.addLocked(sp)
		}
	}
	for key, e := range p.pods {
		if _, ok := seen[key]; !ok {
			p.removeLocked(key, e, true)
		}
	}
	p.mu.Unlock()
	p.synced.Store(true)
	return nil
}

func (s *podStore) Resync() error { return nil }

// slimPod is what the cache reads of a pod: its names, node, controller
// and labels. List pages and watch events are converted as they arrive,
// so a full Pod lives only until its page is converted.
type slimPod struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	node                 string
	ownerKind, ownerName string
}

func (s *slimPod) DeepCopyObject() runtime.Object { c := *s; return &c }

type slimPodList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []slimPod
}

func (l *slimPodList) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = append([]slimPod(nil), l.Items...)
	return &c
}

var podGVK = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}

func slim(p *corev1.Pod) *slimPod {
	s := &slimPod{node: p.Spec.NodeName}
	s.SetGroupVersionKind(podGVK)
	s.Name, s.Namespace, s.UID, s.ResourceVersion, s.Labels = p.Name, p.Namespace, p.UID, p.ResourceVersion, p.Labels
	if c := metav1.GetControllerOfNoCopy(p); c != nil {
		s.ownerKind, s.ownerName = c.Kind, c.Name
	}
	return s
}

func slimList(l *corev1.PodList) *slimPodList {
	out := &slimPodList{ListMeta: l.ListMeta, Items: make([]slimPod, len(l.Items))}
	for i := range l.Items {
		out.Items[i] = *slim(&l.Items[i])
	}
	return out
}
