package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/cpuset"
)

// podInfo is what the pool manager needs of a pod, extracted by reconcile
// so that pools.go knows no Kubernetes types.
type podInfo struct {
	Key        string // namespace/name
	UID        string
	Namespace  string
	Name       string
	Generation int64
	QoS        QoSClass
	Req        PodRequest
	ReqErr     error // annotation parse error (the pod is refused)
	// DemandCPUs is the CPU limit (else request) of the app containers,
	// rounded up to whole CPUs; 0 when the pod sets neither.
	DemandCPUs int
	// Untouched: ignored namespace, cpu-pool none, kubelet static
	// assignment, or a terminal phase. The agent writes nothing for it.
	Untouched     bool
	KubeletStatic bool
	// CPULimitsMilli are the containers' CPU limits by pod-status container
	// ID (0 = no limit), to restore the kubelet's quotas when the pod
	// leaves the exclusive pool.
	CPULimitsMilli map[string]int64
	// Running are the pod-status IDs of the containers the kubelet reports
	// running: their runtime has finished setting up their cgroups.
	Running map[string]bool
	// Terminal is the pod's phase when Succeeded or Failed, else "".
	Terminal string
	// Deleting: the pod has a deletionTimestamp.
	Deleting bool
	// Containers are the kubelet-reported states of every container
	// (init, app, ephemeral); AllReported is false while some container of
	// the spec has no status yet.
	Containers  []containerState
	AllReported bool
}

// containerState is one pod-status container entry.
type containerState struct {
	ID         string // "containerd://<id>", "" before it was created
	Running    bool
	Terminated bool
}

// podEvent is a Kubernetes Event the reconciler emits for a pod.
type podEvent struct {
	Warning bool
	Reason  string
	Message string
}

// syncResult is what applying one pod's change did.
type syncResult struct {
	Status        *Status // nil: write no status (untouched pods)
	AllocatedCPUs string  // "" when not exclusive
	Events        []podEvent
	SharedChanged bool
	SharedPool    cpuset.CPUSet
	Written       int
	Drift         int              // cgroups found off their applied value and rewritten
	DriftUIDs     map[string]int   // the same, by pod UID
	DriftPaths    []string         // the files rewritten as drift
	Failed        map[string]error // write failures by pod UID (this pod or others)
	Refusal       string           // reason, when refused
}

// Pools runs the exclusive and shared CPU pools: it asks the policy for
// exclusive sets, keeps the state, and turns the result into leveled
// cgroup writes. One mutex serialises decisions and writes, so two pods
// never race for the same CPU.
type Pools struct {
	mu     sync.Mutex
	state  PoolState
	policy policy
	cg     cgroupBackend
	// applied is the last target written per pod UID: a difference found
	// in the cgroup while the target is unchanged is drift.
	applied map[string]cpuset.CPUSet
	// sharedApplied is the shared pool last pushed to every shared pod.
	sharedApplied *cpuset.CPUSet
	// seen are the cpuset dirs the agent has set (or found right) before,
	// with when it first did.
	seen map[string]time.Time
	// settled are the seen dirs no one but us is expected to write any
	// more. Only a rewrite of a settled dir is drift: the kubelet and the
	// runtime write a new pod's and container's cpuset right after mkdir,
	// possibly just after the watcher let us write it first. A dir
	// settles when the kubelet reports a container of the pod running
	// (container dirs: that very container), or settleAfter after we first
	// saw it (the sandbox, and nodes whose pod status says nothing).
	settled     map[string]bool
	settleAfter time.Duration
	now         func() time.Time
	// unlimited are the pods whose CFS quota the agent removed; their
	// quota is restored when they leave the exclusive pool.
	unlimited map[string]bool
	// finished are pods released because they can no longer run (deleted
	// with every container exited): they never get CPUs again.
	finished map[string]bool
	// topologySource says where the allocator's topology came from.
	topologySource string
}

// defaultSettleAfter bounds the runtime's setup of a new cgroup (mkdir to
// its resources written: milliseconds in runc, seconds on a loaded node).
const defaultSettleAfter = 5 * time.Second

func newPools(s PoolState, p policy, cg cgroupBackend) *Pools {
	return &Pools{state: s, policy: p, cg: cg, applied: map[string]cpuset.CPUSet{}, seen: map[string]time.Time{}, settled: map[string]bool{}, settleAfter: defaultSettleAfter, now: time.Now, finished: map[string]bool{}, unlimited: map[string]bool{}}
}

// State returns the read side of the pool state.
func (m *Pools) State() PoolReader { return m.state }

// target is the cpuset a managed pod's cgroups must have, and whether the
// pod is exclusive (its own cores, no CFS quota).
func (m *Pools) target(p podInfo) (cpuset.CPUSet, bool) {
	a, ok := m.state.Assignment(p.UID)
	if !ok {
		return m.state.SharedPool(), false
	}
	if a.ReleaseIsolation {
		return m.state.All().Difference(m.state.Reserved()).Difference(m.state.KubeletTaken()), true
	}
	return a.CPUs, true
}

// Sync decides the pod's pool and applies it. all lists every pod of the
// node (for the shared-pool refresh). It is idempotent.
func (m *Pools) Sync(p podInfo, all func() []podInfo) syncResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	var res syncResult
	before := m.state.SharedPool()
	prev, had := m.state.Assignment(p.UID)

	release := func(why string) {
		if !had {
			return
		}
		if err := m.policy.Release(m.state, p.UID); err != nil {
			res.Failed = map[string]error{p.UID: err}
			return
		}
		res.Events = append(res.Events, podEvent{Reason: "Released", Message: fmt.Sprintf("released exclusive cpus %s: %s", prev.CPUs, why)})
	}

	why := "pod is no longer managed"
	if p.Terminal != "" {
		why = "pod phase " + p.Terminal
	}
	if !p.Untouched && had {
		if w, done := m.exited(p); done {
			p.Untouched, why = true, w
			m.finished[p.UID] = true
		}
	}
	if m.finished[p.UID] {
		p.Untouched = true
	}
	switch {
	case p.Untouched:
		release(why)
	case p.ReqErr != nil:
		res.Refusal = Reason(p.ReqErr)
		res.Status = &Status{Pool: p.Req.Pool, State: StateRefused, Reason: res.Refusal, Error: p.ReqErr.Error(), ObservedGeneration: p.Generation}
		res.Events = append(res.Events, podEvent{Warning: true, Reason: "CPUPoolRefused", Message: p.ReqErr.Error() + "; nothing changed"})
	case p.Req.Pool == PoolExclusive:
		m.syncExclusive(p, prev, had, &res)
	default:
		release("pod moved to the shared pool")
		res.Status = &Status{Pool: PoolShared, State: StateShared, ObservedGeneration: p.Generation}
	}
	if res.Failed != nil {
		return res
	}

	after := m.state.SharedPool()
	res.SharedPool = after
	res.SharedChanged = !before.Equals(after) || m.sharedApplied == nil || !m.sharedApplied.Equals(after)
	pods := []podInfo{p}
	if res.SharedChanged && all != nil {
		pods = all()
	}
	w := m.apply(pods, p.UID, &res)
	res.Written = w
	if res.SharedChanged && len(res.Failed) == 0 {
		m.sharedApplied = &after
	}
	if a, ok := m.state.Assignment(p.UID); ok && res.Status != nil && res.Status.Pool == PoolExclusive && res.Status.State != StateRefused {
		res.AllocatedCPUs = a.CPUs.String()
	}
	if err, ok := res.Failed[p.UID]; ok && res.Status != nil {
		res.Status.State, res.Status.Reason, res.Status.Error = StateFailed, "CgroupWriteFailed", err.Error()
		res.Events = append(res.Events, podEvent{Warning: true, Reason: "CgroupWriteFailed", Message: err.Error()})
	}
	return res
}

func (m *Pools) syncExclusive(p podInfo, prev Assignment, had bool, res *syncResult) {
	n := p.DemandCPUs
	if p.Req.CPUs != nil {
		n = *p.Req.CPUs
	}
	if p.Req.CPUSet != nil {
		n = p.Req.CPUSet.Size()
	}
	refuse := func(err error) {
		res.Refusal = Reason(err)
		st := Status{Pool: PoolExclusive, State: StateRefused, Reason: res.Refusal, Error: err.Error(), ObservedGeneration: p.Generation}
		msg := err.Error() + "; nothing changed"
		if had {
			st.CPUs = prev.CPUs.String()
			msg = err.Error() + "; keeps cpus " + prev.CPUs.String()
		}
		res.Status = &st
		res.Events = append(res.Events, podEvent{Warning: true, Reason: "CPUPoolRefused", Message: msg})
	}
	if n == 0 {
		refuse(ErrNoCPUDemand)
		return
	}
	got, err := m.policy.Allocate(m.state, exclusiveRequest{
		UID: p.UID, Namespace: p.Namespace, Name: p.Name, CPUs: n, CPUSet: p.Req.CPUSet,
		Opts:             AllocOptions{Policy: p.Req.CPUPolicy, NUMA: p.Req.NUMA, IOQueues: p.Req.IOQueues},
		ReleaseIsolation: p.Req.ReleaseIsolation,
	})
	if err != nil {
		if errors.Is(err, ErrRefused) {
			refuse(err)
			return
		}
		res.Failed = map[string]error{p.UID: err}
		res.Status = &Status{Pool: PoolExclusive, State: StateFailed, Reason: Reason(err), Error: err.Error(), ObservedGeneration: p.Generation}
		return
	}
	state := StateAllocated
	if p.Req.ReleaseIsolation {
		state = StateReleased
	}
	res.Status = &Status{Pool: PoolExclusive, CPUs: got.String(), State: state, ObservedGeneration: p.Generation}
	switch {
	case !had:
		res.Events = append(res.Events, podEvent{Reason: "CPUsAllocated", Message: fmt.Sprintf("exclusive cpus %s", got)})
	case !prev.CPUs.Equals(got):
		res.Events = append(res.Events, podEvent{Reason: "CPUsResized", Message: fmt.Sprintf("exclusive cpus %s -> %s", prev.CPUs, got)})
	}
	if had && prev.ReleaseIsolation != p.Req.ReleaseIsolation {
		msg := "isolation restored: back on exclusive cpus " + got.String()
		if p.Req.ReleaseIsolation {
			msg = "isolation released: running on all non-reserved cpus, keeps " + got.String()
		}
		res.Events = append(res.Events, podEvent{Reason: "IsolationChanged", Message: msg})
	}
}

// exited says whether a deleted pod can no longer run on its CPUs: every
// container the kubelet reported is terminated, never started, or (when
// the kubelet's status lags) has a cgroup we had seen that the runtime has
// now removed. A container reported running whose cgroup we never saw
// counts as running: an unknown path proves nothing.
func (m *Pools) exited(p podInfo) (string, bool) {
	if p.Terminal != "" || !p.Deleting || !p.AllReported {
		return "", false
	}
	for _, c := range p.Containers {
		if c.Terminated || c.ID == "" {
			continue
		}
		path, err := m.cg.ContainerPath(p.UID, p.QoS, c.ID)
		if err != nil {
			return "", false
		}
		if _, seen := m.seen[m.cg.CPUSetDir(path)]; !seen {
			if c.Running {
				return "", false
			}
			continue // waiting with the ID of an earlier, exited attempt
		}
		if alive, err := m.cg.MayRun(path); err != nil || alive {
			return "", false
		}
	}
	return "pod deleted and all its containers exited", true
}

// stillRunning says whether a container of p that was not reported
// terminated still has a cgroup we had seen (a pod gone from the API after
// a force delete keeps running until the kubelet kills it).
func (m *Pools) stillRunning(p podInfo) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, had := m.state.Assignment(p.UID); !had {
		return false // nothing to hold back
	}
	for _, c := range p.Containers {
		if c.Terminated || c.ID == "" {
			continue
		}
		path, err := m.cg.ContainerPath(p.UID, p.QoS, c.ID)
		if err != nil {
			continue
		}
		if _, seen := m.seen[m.cg.CPUSetDir(path)]; !seen {
			continue
		}
		if alive, err := m.cg.MayRun(path); err != nil || alive {
			return true
		}
	}
	return false
}

// Forget releases a deleted pod's CPUs and refreshes the shared pool.
func (m *Pools) Forget(uid string, all func() []podInfo) syncResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	var res syncResult
	a, had := m.state.Assignment(uid)
	delete(m.applied, uid)
	delete(m.unlimited, uid)
	delete(m.finished, uid)
	for p := range m.seen {
		if strings.Contains(p, "pod"+uid) || strings.Contains(p, "pod"+strings.ReplaceAll(uid, "-", "_")) {
			delete(m.seen, p)
			delete(m.settled, p)
		}
	}
	if !had {
		return res
	}
	if err := m.policy.Release(m.state, uid); err != nil {
		res.Failed = map[string]error{uid: err}
		return res
	}
	res.Events = append(res.Events, podEvent{Reason: "Released", Message: fmt.Sprintf("pod deleted: released exclusive cpus %s", a.CPUs)})
	after := m.state.SharedPool()
	res.SharedChanged, res.SharedPool = true, after
	res.Written = m.apply(all(), "", &res)
	if len(res.Failed) == 0 {
		m.sharedApplied = &after
	}
	return res
}

// Sweep re-applies every pod's target: the backstop for missed cgroup
// creations and for drift (a rewrite while the target is unchanged).
func (m *Pools) Sweep(all []podInfo) syncResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	var res syncResult
	res.SharedPool = m.state.SharedPool()
	m.cg.ForgetChildren("") // the backstop lists afresh: inotify may have missed something
	res.Written = m.apply(all, "", &res)
	return res
}

// apply writes the targets of pods (untouched ones skipped): first the QoS
// parents are widened to cover every target, then each pod and its
// containers in leveled order. One pod's failure does not stop the others.
func (m *Pools) apply(pods []podInfo, trigger string, res *syncResult) int {
	fail := func(uid string, err error) {
		if res.Failed == nil {
			res.Failed = map[string]error{}
		}
		res.Failed[uid] = errors.Join(res.Failed[uid], err)
	}
	var plans []podCgroupPlan
	running := map[string]map[string]bool{} // pod UID -> cpuset dirs of running containers
	union := cpuset.New()
	for _, p := range pods {
		if p.Untouched || m.finished[p.UID] {
			continue
		}
		want, excl := m.target(p)
		pp, err := m.cg.PodPath(p.UID, p.QoS)
		if err != nil {
			fail(p.UID, fmt.Errorf("%w: pod %s: %v", ErrCgroupWrite, p.Key, err))
			continue
		}
		// The pod being synced is listed afresh; the others of a pool-wide
		// refresh come from the watcher's cache. A stale cache is caught on
		// v1 (the writer refuses an unplanned child), not on v2, where an
		// unwritten child simply inherits the pod's CPUs until its own
		// inotify event syncs it.
		list := m.cg.KnownChildren
		if p.UID == trigger {
			list = m.cg.Children
		}
		children, _ := list(pp) // missing pod dir: not created yet
		plan := podCgroupPlan{UID: p.UID, Path: pp, Containers: children, CPUs: want, UnlimitedQuota: excl}
		if !excl && m.unlimited[p.UID] {
			plan.RestoreQuota = m.kubeletQuota(p)
		}
		plans = append(plans, plan)
		union = union.Union(want)
		for id := range p.Running {
			if cp, err := m.cg.ContainerPath(p.UID, p.QoS, id); err == nil {
				if running[p.UID] == nil {
					running[p.UID] = map[string]bool{}
				}
				running[p.UID][m.cg.CPUSetDir(cp)] = true
			}
		}
	}
	total := 0
	if !union.IsEmpty() {
		for _, q := range m.cg.QoSPaths() {
			n, err := m.cg.WidenCPUs(q, union)
			total += n
			if err != nil && trigger != "" {
				fail(trigger, err) // reported on the pod that caused the batch
			}
		}
	}
	sort.Slice(plans, func(i, j int) bool { return plans[i].Path < plans[j].Path })
	for _, pl := range plans {
		written, err := m.cg.ApplyPod(pl)
		total += len(written)
		if err != nil {
			fail(pl.UID, err)
		}
		// Drift: a settled cgroup rewritten although the pod's target did
		// not change (a value we wrote, changed behind our back).
		prev, had := m.applied[pl.UID]
		unchanged := had && prev.Equals(pl.CPUs)
		now := m.now()
		for _, w := range written {
			dir := w
			if strings.HasPrefix(filepath.Base(w), "cpu") {
				dir = filepath.Dir(w)
			}
			first, seen := m.seen[dir]
			if unchanged && (m.settled[dir] || (seen && now.Sub(first) >= m.settleAfter)) {
				res.Drift++
				if res.DriftUIDs == nil {
					res.DriftUIDs = map[string]int{}
				}
				res.DriftUIDs[pl.UID]++
				res.DriftPaths = append(res.DriftPaths, w)
			}
		}
		if err == nil {
			if pl.UnlimitedQuota {
				m.unlimited[pl.UID] = true
			} else if pl.RestoreQuota != nil {
				delete(m.unlimited, pl.UID)
			}
			m.applied[pl.UID] = pl.CPUs
			podRunning := len(running[pl.UID]) > 0
			for i, c := range append([]string{pl.Path}, pl.Containers...) {
				d := m.cg.CPUSetDir(c)
				if _, ok := m.seen[d]; !ok {
					m.seen[d] = now
				}
				if running[pl.UID][d] || (i == 0 && podRunning) {
					m.settled[d] = true
				}
			}
		}
	}
	return total
}

// kubeletQuota is the quota the kubelet sets from the pod's limits: each
// container limit × period, the pod the sum when every container has a
// limit, else unlimited.
func (m *Pools) kubeletQuota(p podInfo) *quotaSpec {
	q := &quotaSpec{Pod: 0, Containers: map[string]int64{}}
	for id, milli := range p.CPULimitsMilli {
		path, err := m.cg.ContainerPath(p.UID, p.QoS, id)
		if err != nil {
			continue
		}
		if milli <= 0 {
			q.Containers[path], q.Pod = -1, -1
			continue
		}
		q.Containers[path] = milli * 100 // period 100000 µs: quota = millicores × 100
		if q.Pod >= 0 {
			q.Pod += milli * 100
		}
	}
	if len(p.CPULimitsMilli) == 0 {
		q.Pod = -1
	}
	return q
}
