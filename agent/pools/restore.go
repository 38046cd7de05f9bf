package pools

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"k8s.io/utils/cpuset"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/internal/atomicfile"
	"github.com/cgpilot/cgpilot/internal/cpulist"
)

// Claim is what a pod's own annotations say it held: offered to Restore
// when there is no good checkpoint. Users can write annotations too, so a
// claim is believed only where the agent's two annotations agree with each
// other and with the pod's demand, and the allocator accepts the set under
// today's rules.
type Claim struct {
	AllocatedCPUs string // cgpilot.io/allocated-cpus
	Status        string // cgpilot.io/status
}

// RestoreReport says what Restore did, for the log and Events.
type RestoreReport struct {
	// Source is "checkpoint", or "pods" when the state was rebuilt from
	// the pods' annotations and cgroups.
	Source string
	Kept   []Assignment
	// Dropped says, per pod UID, why a candidate was not kept.
	Dropped map[string]string
	// Corrupt is the checkpoint's problem when it was moved aside (to
	// Aside); nil otherwise.
	Corrupt error
	Aside   string
	// Cleaned are stale temporary and old quarantined files removed.
	Cleaned []string
}

// quarantineKeep is how many bad checkpoints are kept for a post-mortem.
const quarantineKeep = 3

// Restore rebuilds the state after a start. The checkpoint, which only the
// agent writes, comes first. Without one (absent, or corrupt and moved
// aside), pods are taken oldest first, each with the set its annotations
// claim (see Claim) or, for a pod without annotations, the one its cgroup
// holds when that is a strict part of the free CPUs and matches its
// demand; every set must pass the allocator's rules (the cap included)
// given what older pods got. A CPU is never given to two pods. A checkpoint
// written by a newer agent that this one cannot read is an error, and the
// file is left as it is: the caller stops.
func (m *Manager) Restore(live []Pod, claims map[string]Claim, now time.Time) (RestoreReport, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rep := RestoreReport{Dropped: map[string]string{}}
	path := m.state.file
	var saved map[string]Assignment
	if path != "" {
		rep.Cleaned, _ = atomicfile.Clean(path, quarantineKeep)
		var err error
		saved, err = ReadCheckpoint(path)
		switch {
		case err == nil:
			rep.Source = "checkpoint"
		case errors.Is(err, ErrCheckpointNotFound):
		case errors.Is(err, ErrCheckpointVersion):
			return rep, err
		default:
			rep.Corrupt = err
			if aside, qerr := atomicfile.Quarantine(path, now); qerr == nil {
				rep.Aside = aside
			}
			saved = nil
		}
	}
	byUID := map[string]Pod{}
	for _, p := range live {
		byUID[p.UID] = p
	}
	scratch := newMemState(m.state.All(), m.state.Reserved())
	scratch.setKubeletTaken(m.state.KubeletTaken())
	shared := m.sharedSizes(live)
	keep := func(a Assignment, source string) {
		p, ok := byUID[a.UID]
		switch {
		case !ok:
			rep.Dropped[a.UID] = source + ": pod is gone"
			return
		case p.Untouched:
			rep.Dropped[a.UID] = source + ": pod is not managed"
			return
		}
		set := a.CPUs
		_, err := m.policy.Allocate(scratch, exclusiveRequest{UID: a.UID, Namespace: p.Namespace, Name: p.Name, CPUs: set.Size(), CPUSet: &set,
			Policy: p.Req.CPUPolicy, NUMA: p.Req.NUMA, IO: p.Req.IOQueues, ReleaseIsolation: a.ReleaseIsolation}, shared)
		if err != nil {
			rep.Dropped[a.UID] = fmt.Sprintf("%s: cpus %s: %v (allocated afresh)", source, set, err)
		}
	}
	if saved != nil {
		// Checkpoint entries are the agent's own: kept as they were
		// (oldest pod first, so a conflict after a config change keeps
		// the older one), checked only against what changed since.
		var list []Assignment
		for _, a := range saved {
			list = append(list, a)
		}
		sortByAge(list, byUID)
		for _, a := range list {
			if p, ok := byUID[a.UID]; ok && !p.Untouched && !a.CPUs.IsSubsetOf(m.state.All().Difference(m.state.Reserved()).Difference(m.state.KubeletTaken())) {
				rep.Dropped[a.UID] = fmt.Sprintf("checkpoint: cpus %s are no longer allocatable (allocated afresh)", a.CPUs)
				continue
			}
			keepChecked(scratch, a, byUID, &rep)
		}
	} else {
		rep.Source = "pods"
		pods := make([]Pod, 0, len(live))
		for _, p := range live {
			if !p.Untouched && p.ReqErr == nil && p.Req.Pool == local.PoolExclusive {
				pods = append(pods, p)
			}
		}
		sort.Slice(pods, func(i, j int) bool { return older(pods[i], pods[j]) })
		for _, p := range pods {
			set, source, ok := m.claimed(p, claims[p.UID], scratch, &rep)
			if !ok {
				continue
			}
			keep(Assignment{UID: p.UID, Namespace: p.Namespace, Name: p.Name, CPUs: set, ReleaseIsolation: p.Req.ReleaseIsolation && source == "annotation"}, source)
		}
	}
	rep.Kept = scratch.Assignments()
	if err := m.state.replace(scratch.snapshot()); err != nil {
		return rep, err
	}
	return rep, nil
}

// keepChecked keeps a checkpoint entry unless it overlaps what an older
// entry kept (it cannot, from a verified file, but the rule is never
// skipped).
func keepChecked(scratch *memState, a Assignment, byUID map[string]Pod, rep *RestoreReport) {
	p, ok := byUID[a.UID]
	switch {
	case !ok:
		rep.Dropped[a.UID] = "checkpoint: pod is gone"
	case p.Untouched:
		rep.Dropped[a.UID] = "checkpoint: pod is not managed"
	case !a.CPUs.Intersection(scratch.Exclusive()).IsEmpty():
		rep.Dropped[a.UID] = fmt.Sprintf("checkpoint: cpus %s overlap an older pod's (allocated afresh)", a.CPUs)
	default:
		a.Namespace, a.Name = p.Namespace, p.Name
		_ = scratch.setAssignment(a)
	}
}

// claimed is the set a pod without a checkpoint entry may get back, and
// where the claim came from.
func (m *Manager) claimed(p Pod, c Claim, scratch *memState, rep *RestoreReport) (cpuset.CPUSet, string, bool) {
	want := p.DemandCPUs
	if p.Req.CPUs != nil {
		want = *p.Req.CPUs
	}
	if p.Req.CPUSet != nil {
		want = p.Req.CPUSet.Size()
	}
	if c.AllocatedCPUs != "" {
		set, err := cpulist.Parse(c.AllocatedCPUs)
		st, serr := local.ParseStatus(c.Status)
		switch {
		case err != nil || set.IsEmpty():
			rep.Dropped[p.UID] = fmt.Sprintf("annotation %s=%.40q does not parse", local.AnnotationAllocatedCPUs, c.AllocatedCPUs)
		case serr != nil || (st.State != local.StateAllocated && st.State != local.StateReleased) || st.CPUs != set.String():
			rep.Dropped[p.UID] = fmt.Sprintf("annotation %s=%s is not confirmed by %s", local.AnnotationAllocatedCPUs, set, local.AnnotationStatus)
		case set.Size() != want:
			rep.Dropped[p.UID] = fmt.Sprintf("annotation %s=%s does not match the pod's demand of %d cpus", local.AnnotationAllocatedCPUs, set, want)
		case p.Req.CPUSet != nil && !p.Req.CPUSet.Equals(set):
			rep.Dropped[p.UID] = fmt.Sprintf("annotation %s=%s is not the pod's requested cpuset %s", local.AnnotationAllocatedCPUs, set, p.Req.CPUSet)
		default:
			return set, "annotation", true
		}
		return cpuset.New(), "", false
	}
	if p.Req.ReleaseIsolation || m.cg == nil {
		return cpuset.New(), "", false
	}
	pp, err := m.cg.PodPath(p.UID, p.QoS)
	if err != nil {
		return cpuset.New(), "", false
	}
	set, err := m.cg.ReadCPUs(pp)
	free := scratch.SharedPool()
	if err != nil || set.IsEmpty() || !set.IsSubsetOf(free) || set.Equals(free) || set.Size() != want {
		return cpuset.New(), "", false
	}
	return set, "cgroup", true
}

func older(a, b Pod) bool {
	if !a.Created.Equal(b.Created) {
		return a.Created.Before(b.Created)
	}
	return a.UID < b.UID
}

func sortByAge(list []Assignment, byUID map[string]Pod) {
	sort.Slice(list, func(i, j int) bool {
		pi, pj := byUID[list[i].UID], byUID[list[j].UID]
		pi.UID, pj.UID = list[i].UID, list[j].UID
		return older(pi, pj)
	})
}
