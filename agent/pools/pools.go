package pools

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"k8s.io/utils/cpuset"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/internal/cpulist"
	"github.com/cgpilot/cgpilot/topology"
)

// Options configure a Manager.
type Options struct {
	// Topology is the machine the allocator picks cores on; nil means a
	// flat machine of All (discovery failed: cores by id, no locality).
	Topology *topology.Topology
	// All are the CPUs the pools manage; Reserved (a subset) are never
	// given to pods.
	All, Reserved cpuset.CPUSet
	// CapRatio is the largest fraction of All − Reserved that exclusive
	// CPUs may take; 0 allows none.
	CapRatio float64
	// OvercommitRatio turns the sellable rule on when > 0 (see
	// topology.Limits).
	OvercommitRatio float64
	// Checkpoint is the allocation checkpoint file; "" keeps the state in
	// memory only (tests).
	Checkpoint string
	// Cgroups is the node's kubepods tree.
	Cgroups Cgroups
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// Manager runs the exclusive and shared CPU pools: it asks the policy for
// exclusive sets, keeps the state, and turns the result into leveled
// cgroup writes. One mutex serialises decisions and writes, so two pods
// never race for the same CPU.
type Manager struct {
	mu     sync.Mutex
	state  *checkpointState
	policy policy
	cg     Cgroups
	// applied is the last target written per pod UID: a difference found
	// in the cgroup while the target is unchanged is drift.
	applied map[string]cpuset.CPUSet
	// sharedApplied is the shared pool last pushed to every shared pod.
	sharedApplied *cpuset.CPUSet
	// seen are, per pod UID, the cgroups the pools have set (or found
	// right) before, with when they first did and whether they have
	// settled (one map a pod, not two: a thousand pods' maps were 0.9
	// MiB of the agent's heap).
	//
	// A settled cgroup is one no one but us is expected to write any
	// more. Only a rewrite of a settled cgroup is drift: the kubelet and
	// the runtime write a new pod's and container's cpuset and quota right
	// after mkdir, possibly just after the watcher let us write them
	// first. A cgroup settles when the kubelet reports a container of the
	// pod running (container cgroups: that very container), else after a
	// window from when we first saw it: settleAfter for the pod's own
	// cgroup and for pods whose status reports no container at all, and
	// settleReported for a container cgroup of a pod whose status does
	// report containers (runc writes a container's resources only after
	// its rootfs is set up, which takes well over settleAfter on a loaded
	// or emulated node, and the kubelet reports it running soon after).
	seen           map[string]map[string]seenCgroup
	settleAfter    time.Duration
	settleReported time.Duration
	now            func() time.Time
	// unlimited are the pods whose CFS quota the pools removed; their
	// quota is restored when they leave the exclusive pool.
	unlimited map[string]bool
	// finished are pods released because they can no longer run (deleted
	// with every container exited): they never get CPUs again.
	finished map[string]bool
}

// DefaultSettleAfter bounds the runtime's setup of a new cgroup (mkdir to
// its resources written: milliseconds in runc, seconds on a loaded node)
// where nothing reports the container running.
const DefaultSettleAfter = 5 * time.Second

// DefaultSettleReported bounds the same for a container the kubelet
// reports but not (yet) as running: its running state settles it
// earlier, this only covers one that never runs.
const DefaultSettleReported = 2 * time.Minute

// New returns a Manager with an empty state; call Restore before the
// first Sync.
func New(o Options) (*Manager, error) {
	if !o.Reserved.IsSubsetOf(o.All) {
		return nil, fmt.Errorf("reserved cpus %s not within the managed cpus %s", o.Reserved, o.All)
	}
	if o.All.IsEmpty() {
		return nil, errors.New("no cpus to manage")
	}
	topo := o.Topology
	if topo == nil {
		var err error
		if topo, err = topology.Flat(o.All); err != nil {
			return nil, err
		}
	}
	if !o.All.IsSubsetOf(topo.Online()) {
		return nil, fmt.Errorf("managed cpus %s not within the machine's online cpus %s", o.All, topo.Online())
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &Manager{
		state:  &checkpointState{memState: newMemState(o.All, o.Reserved), file: o.Checkpoint},
		policy: policy{topo: topo, outside: topo.Online().Difference(o.All), capRatio: o.CapRatio, overcommit: o.OvercommitRatio},
		cg:     o.Cgroups, applied: map[string]cpuset.CPUSet{}, seen: map[string]map[string]seenCgroup{},
		settleAfter: DefaultSettleAfter, settleReported: DefaultSettleReported, now: now, finished: map[string]bool{}, unlimited: map[string]bool{},
	}, nil
}

// State returns the read side of the pool state.
func (m *Manager) State() Reader { return m.state }

// Flush writes what Sync left out of the checkpoint (Result.Unsaved: a
// change of release-isolation alone, which owns no CPU); a failure is
// left to the next Flush.
func (m *Manager) Flush() error { return m.state.flush() }

// Cap is the largest number of CPUs exclusive pods may hold now (the cap
// and, when on, the sellable rule) given every pod of the node.
func (m *Manager) Cap(all []Pod) int {
	return m.policy.limits(m.state, m.sharedSizes(all)).Max
}

// SetKubeletTaken records the CPUs the kubelet's static CPU manager holds
// and reports whether they changed (every pod must then be synced again).
func (m *Manager) SetKubeletTaken(set cpuset.CPUSet) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state.KubeletTaken().Equals(set) {
		return false
	}
	m.state.setKubeletTaken(set)
	return true
}

// Target is the cpuset a managed pod's cgroups must have, and whether the
// pod is exclusive (its own cores, no CFS quota).
func (m *Manager) Target(p Pod) (cpuset.CPUSet, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.target(p)
}

func (m *Manager) target(p Pod) (cpuset.CPUSet, bool) {
	a, ok := m.state.Assignment(p.UID)
	if !ok {
		return m.state.SharedPool(), false
	}
	if a.ReleaseIsolation {
		// The shared pool and its own cores: never another pod's.
		return m.state.SharedPool().Union(a.CPUs), true
	}
	return a.CPUs, true
}

// sharedSizes are the shared pods' CPU demands in millicores, for the
// sellable rule.
func (m *Manager) sharedSizes(all []Pod) []int64 {
	if m.policy.overcommit <= 0 {
		return nil
	}
	sizes := []int64{}
	for _, p := range all {
		if p.Untouched || (p.ReqErr == nil && p.Req.Pool == local.PoolExclusive) {
			continue
		}
		sizes = append(sizes, p.DemandMilli)
	}
	return sizes
}

// Sync decides the pod's pool and applies it. all lists every pod of the
// node (for the shared-pool refresh and the sellable rule). It is
// idempotent.
func (m *Manager) Sync(p Pod, all func() []Pod) Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	var res Result
	before := m.state.SharedPool()
	prev, had := m.state.Assignment(p.UID)

	release := func(why string) {
		if !had {
			return
		}
		if err := m.policy.Release(m.state, p.UID); err != nil {
			res.fail(p.UID, err)
			return
		}
		res.Released = true
		res.Events = append(res.Events, Event{Reason: local.EventReleased, Message: fmt.Sprintf("released exclusive cpus %s: %s", prev.CPUs, why)})
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
		res.Status = &local.Status{Pool: p.Req.Pool, State: local.StateRefused, Reason: res.Refusal, Error: p.ReqErr.Error(), ObservedGeneration: p.Generation}
		res.Events = append(res.Events, Event{Warning: true, Reason: local.EventCPUPoolRefused, Message: p.ReqErr.Error() + "; nothing changed"})
	case p.Req.Pool == local.PoolExclusive:
		var shared []int64
		if m.policy.overcommit > 0 && all != nil {
			shared = m.sharedSizes(all())
		}
		m.syncExclusive(p, prev, had, shared, &res)
	default:
		release("pod moved to the shared pool")
		res.Status = &local.Status{Pool: local.PoolShared, State: local.StateShared, ObservedGeneration: p.Generation}
	}
	if res.Failed != nil {
		return res
	}

	after := m.state.SharedPool()
	res.SharedPool = after
	res.SharedChanged = !before.Equals(after) || m.sharedApplied == nil || !m.sharedApplied.Equals(after)
	pods := []Pod{p}
	if res.SharedChanged && all != nil {
		pods = all()
	}
	res.Written = m.apply(pods, p.UID, false, &res)
	res.Unsaved = m.state.unsaved()
	if res.SharedChanged && len(res.Failed) == 0 {
		m.sharedApplied = &after
	}
	if a, ok := m.state.Assignment(p.UID); ok && res.Status != nil && res.Status.Pool == local.PoolExclusive && res.Status.State != local.StateRefused {
		res.AllocatedCPUs = a.CPUs.String()
	}
	if err, ok := res.Failed[p.UID]; ok && res.Status != nil {
		res.Status.State, res.Status.Reason, res.Status.Error = local.StateFailed, local.ReasonCgroupWrite, err.Error()
		res.Events = append(res.Events, Event{Warning: true, Reason: local.EventCgroupWriteFailed, Message: err.Error()})
	}
	return res
}

func (m *Manager) syncExclusive(p Pod, prev Assignment, had bool, shared []int64, res *Result) {
	n := p.DemandCPUs
	if p.Req.CPUs != nil {
		n = *p.Req.CPUs
	}
	if p.Req.CPUSet != nil {
		n = p.Req.CPUSet.Size()
	}
	refuse := func(err error) {
		res.Refusal = Reason(err)
		st := local.Status{Pool: local.PoolExclusive, State: local.StateRefused, Reason: res.Refusal, Error: err.Error(), ObservedGeneration: p.Generation}
		msg := err.Error() + "; nothing changed"
		if had {
			st.CPUs = prev.CPUs.String()
			msg = err.Error() + "; keeps cpus " + prev.CPUs.String()
		}
		res.Status = &st
		res.Events = append(res.Events, Event{Warning: true, Reason: local.EventCPUPoolRefused, Message: msg})
	}
	if n == 0 {
		refuse(ErrNoCPUDemand)
		return
	}
	got, err := m.policy.Allocate(m.state, exclusiveRequest{
		UID: p.UID, Namespace: p.Namespace, Name: p.Name, CPUs: n, CPUSet: p.Req.CPUSet,
		Policy: p.Req.CPUPolicy, NUMA: p.Req.NUMA, IO: p.Req.IOQueues, ReleaseIsolation: p.Req.ReleaseIsolation,
	}, shared)
	if err != nil {
		if errors.Is(err, ErrRefused) {
			refuse(err)
			return
		}
		res.fail(p.UID, err)
		res.Status = &local.Status{Pool: local.PoolExclusive, State: local.StateFailed, Reason: Reason(err), Error: err.Error(), ObservedGeneration: p.Generation}
		return
	}
	st := local.StateAllocated
	if p.Req.ReleaseIsolation {
		st = local.StateReleased
	}
	res.Status = &local.Status{Pool: local.PoolExclusive, CPUs: got.String(), State: st, ObservedGeneration: p.Generation}
	switch {
	case !had:
		res.Events = append(res.Events, Event{Reason: local.EventCPUsAllocated, Message: fmt.Sprintf("exclusive cpus %s", got)})
	case !prev.CPUs.Equals(got):
		res.Events = append(res.Events, Event{Reason: local.EventCPUsResized, Message: fmt.Sprintf("exclusive cpus %s -> %s", prev.CPUs, got)})
	}
	if had && prev.ReleaseIsolation != p.Req.ReleaseIsolation {
		msg := "isolation restored: back on exclusive cpus " + got.String()
		if p.Req.ReleaseIsolation {
			msg = "isolation released: running on the shared pool and its own cpus, keeps " + got.String()
		}
		res.Events = append(res.Events, Event{Reason: local.EventIsolationChanged, Message: msg})
	}
}

// exited says whether a deleted pod can no longer run on its CPUs: every
// container the kubelet reported is terminated, never started, or (when
// the kubelet's status lags) has a cgroup we had seen that the runtime has
// now removed. A container reported running whose cgroup we never saw
// counts as running: an unknown path proves nothing.
func (m *Manager) exited(p Pod) (string, bool) {
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
		if _, seen := m.seen[p.UID][path]; !seen {
			if c.Running {
				return "", false
			}
			continue // waiting with the ID of an earlier, exited attempt
		}
		if alive, err := m.cg.Exists(path); err != nil || alive {
			return "", false
		}
	}
	return "pod deleted and all its containers exited", true
}

// StillRunning says whether a container of p that was not reported
// terminated still has a cgroup we had seen (a pod gone from the API after
// a force delete keeps running until the kubelet kills it).
func (m *Manager) StillRunning(p Pod) bool {
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
		if _, seen := m.seen[p.UID][path]; !seen {
			continue
		}
		if alive, err := m.cg.Exists(path); err != nil || alive {
			return true
		}
	}
	return false
}

// Forget releases a deleted pod's CPUs and refreshes the shared pool. On a
// failed release (the checkpoint could not be written) the pod keeps its
// CPUs and its bookkeeping, and the caller retries.
func (m *Manager) Forget(uid string, all func() []Pod) Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	var res Result
	a, had := m.state.Assignment(uid)
	if had {
		if err := m.policy.Release(m.state, uid); err != nil {
			res.fail(uid, err)
			return res
		}
	}
	delete(m.applied, uid)
	delete(m.unlimited, uid)
	delete(m.finished, uid)
	delete(m.seen, uid)
	if !had {
		return res
	}
	res.Released = true
	res.Events = append(res.Events, Event{Reason: local.EventReleased, Message: fmt.Sprintf("pod deleted: released exclusive cpus %s", a.CPUs)})
	after := m.state.SharedPool()
	res.SharedChanged, res.SharedPool = true, after
	res.Written = m.apply(all(), "", false, &res)
	if len(res.Failed) == 0 {
		m.sharedApplied = &after
	}
	return res
}

// sweepChunk bounds how many pods Sweep handles per hold of the lock: a
// reconcile waits behind at most this many pods' reads, not a node's.
const sweepChunk = 16

// Sweep re-applies the targets of pods, each listed afresh: the safety net
// for cgroup events the watch missed (an overflowed inotify queue, a watch
// refused for the limit) and for drift it could not see. The caller
// spreads the node's pods over time; Sweep takes the lock per chunk of
// sweepChunk pods, so its cost per pod is one listing and the reads of
// that pod's files, and reconciles go on between chunks.
func (m *Manager) Sweep(pods []Pod) Result {
	var res Result
	for i := 0; i < len(pods); i += sweepChunk {
		m.mu.Lock()
		res.SharedPool = m.state.SharedPool()
		res.Written += m.apply(pods[i:min(i+sweepChunk, len(pods))], "", true, &res)
		m.mu.Unlock()
	}
	if len(pods) == 0 {
		res.SharedPool = m.State().SharedPool()
	}
	return res
}

// Agrees says whether value, just read from file (one of
// cgroup.WatchedFiles) of one of p's cgroups, is what the pools want
// there. The cgroup watch asks it on every write it sees, the pools' own
// included: only false (someone else changed the pod's CPU placement)
// is worth a sync of p.
func (m *Manager) Agrees(p Pod, file, value string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p.Untouched || m.finished[p.UID] {
		return true // not ours to keep
	}
	want, excl := m.target(p)
	switch file {
	case "cpuset.cpus":
		got, err := cpulist.Parse(value)
		return err == nil && got.Equals(want)
	case "cpu.cfs_quota_us", "cpu.max":
		unlimited := cgroup.QuotaUnlimited(value)
		switch {
		case excl:
			return unlimited
		case m.unlimited[p.UID]:
			return false // the kubelet's quota is still to be put back
		}
		return true // a shared pod's quota is the kubelet's
	}
	return true
}

// apply writes the targets of pods (untouched ones skipped): first the QoS
// parents are widened to cover every target, then each pod and its
// containers in leveled order. One pod's failure does not stop the others.
func (m *Manager) apply(pods []Pod, trigger string, fresh bool, res *Result) int {
	var plans []cgroup.PodCPUs
	reports := map[string]containerReport{} // by pod UID
	union := cpuset.New()
	for _, p := range pods {
		if p.Untouched || m.finished[p.UID] {
			continue
		}
		want, excl := m.target(p)
		pp, err := m.cg.PodPath(p.UID, p.QoS)
		if err != nil {
			res.fail(p.UID, fmt.Errorf("%w: pod %s: %w", ErrCgroupWrite, p.Key, err))
			continue
		}
		// The pod being synced (and every pod a sweep checks) is listed
		// afresh; the others of a pool-wide refresh come from the watcher's
		// cache (see Kubepods.KnownChildren).
		list := m.cg.KnownChildren
		if fresh || p.UID == trigger {
			list = m.cg.Children
		}
		children, _ := list(pp) // missing pod cgroup: not created yet
		// The same two read their cgroups' values before writing; the
		// others trust what the cgroup tree recorded of its own writes
		// and reads, which its watch keeps current (see
		// cgroup.Kubepods.ApplyPod).
		plan := cgroup.PodCPUs{UID: p.UID, Path: pp, Containers: children, CPUs: want, UnlimitedQuota: excl, Verify: fresh || p.UID == trigger}
		if !excl && m.unlimited[p.UID] {
			plan.Quotas = m.kubeletQuotas(p)
		}
		plans = append(plans, plan)
		union = union.Union(want)
		rep := containerReport{reported: len(p.Containers) > 0 || len(p.Running) > 0}
		for id := range p.Running {
			if cp, err := m.cg.ContainerPath(p.UID, p.QoS, id); err == nil {
				if rep.running == nil {
					rep.running = map[string]bool{}
				}
				rep.running[cp] = true
			}
		}
		reports[p.UID] = rep
	}
	total := 0
	if !union.IsEmpty() {
		for _, q := range m.cg.QoSPaths() {
			n, err := m.cg.WidenCPUs(q, union)
			total += n
			if err != nil && trigger != "" {
				res.fail(trigger, fmt.Errorf("%w: %w", ErrCgroupWrite, err)) // reported on the pod that caused the batch
			}
		}
	}
	sort.Slice(plans, func(i, j int) bool { return plans[i].Path < plans[j].Path })
	for _, pl := range plans {
		written, err := m.cg.ApplyPod(pl)
		total += len(written)
		switch {
		case errors.Is(err, cgroup.ErrNotReady):
			res.pending(pl.UID)
			err = nil
			continue
		case err != nil:
			res.fail(pl.UID, fmt.Errorf("%w: %w", ErrCgroupWrite, err))
		}
		m.noteWrites(pl, written, reports[pl.UID], err == nil, res)
	}
	return total
}

// containerReport is what the kubelet's pod status says of a pod's
// container cgroups.
type containerReport struct {
	running  map[string]bool // cgroups of the containers reported running
	reported bool            // the status lists containers at all
}

// noteWrites counts drift (a settled cgroup rewritten although the pod's
// target did not change: a value we wrote, changed behind our back) and,
// after a successful apply, records what the pod's cgroups now hold.
func (m *Manager) noteWrites(pl cgroup.PodCPUs, written []cgroup.Written, rep containerReport, ok bool, res *Result) {
	prev, had := m.applied[pl.UID]
	unchanged := had && prev.Equals(pl.CPUs)
	now := m.now()
	for _, w := range written {
		if unchanged && m.isSettled(pl, w.Cgroup, rep, now) {
			res.Drift++
			if res.DriftUIDs == nil {
				res.DriftUIDs = map[string]int{}
			}
			res.DriftUIDs[pl.UID]++
			res.DriftWrites = append(res.DriftWrites, w)
		}
	}
	if !ok {
		return
	}
	if pl.UnlimitedQuota {
		m.unlimited[pl.UID] = true
	} else if pl.Quotas != nil {
		delete(m.unlimited, pl.UID)
	}
	m.applied[pl.UID] = pl.CPUs
	seen := m.seen[pl.UID]
	if seen == nil {
		seen = map[string]seenCgroup{}
		m.seen[pl.UID] = seen
	}
	// Only cgroups that exist now are kept: a restarted container's old
	// cgroup leaves the maps with its listing, so they do not grow with
	// restarts.
	current := map[string]bool{pl.Path: true}
	for _, c := range pl.Containers {
		current[c] = true
	}
	for c := range seen {
		if !current[c] {
			delete(seen, c)
		}
	}
	for i, c := range append([]string{pl.Path}, pl.Containers...) {
		sc, ok := seen[c]
		if !ok {
			sc.first = now
		}
		if rep.running[c] || (i == 0 && len(rep.running) > 0) {
			sc.settled = true
		}
		seen[c] = sc
	}
}

// seenCgroup is a cgroup the pools have set or found right: when they
// first did, and whether it has settled (see Manager.seen).
type seenCgroup struct {
	first   time.Time
	settled bool
}

// isSettled tells whether a write to cgroup c of the pod is drift rather
// than the runtime's setup (see Manager.seen).
func (m *Manager) isSettled(pl cgroup.PodCPUs, c string, rep containerReport, now time.Time) bool {
	sc, seen := m.seen[pl.UID][c]
	switch {
	case !seen:
		return false
	case sc.settled:
		return true
	}
	window := m.settleAfter
	if c != pl.Path && rep.reported {
		window = m.settleReported
	}
	return now.Sub(sc.first) >= window
}

// kubeletQuotas are the quotas the kubelet sets from the pod's limits:
// each container's limit (cgroup.KubeletQuota), the pod the sum when every
// container has a limit, else unlimited.
func (m *Manager) kubeletQuotas(p Pod) *cgroup.PodQuotas {
	q := &cgroup.PodQuotas{Containers: map[string]cgroup.Quota{}}
	var sum int64
	limited := len(p.CPULimitsMilli) > 0
	for id, milli := range p.CPULimitsMilli {
		path, err := m.cg.ContainerPath(p.UID, p.QoS, id)
		if err != nil {
			continue
		}
		q.Containers[path] = cgroup.KubeletQuota(milli)
		if milli <= 0 {
			limited = false
		}
		if milli > 0 {
			sum = min(sum, math.MaxInt64-milli) + milli // saturating
		}
	}
	if limited {
		q.Pod = cgroup.KubeletQuota(sum)
	} else {
		q.Pod = cgroup.KubeletQuota(0)
	}
	return q
}

func joinErr(a, b error) error { return errors.Join(a, b) }
