package state

import (
	"fmt"
	"sort"
	"time"

	"github.com/cgpilot/cgpilot/api/report"
)

// ContainerState is one container's checkpoint: what the store knows of
// it and its recommender state (recommend.Recommender.EncodeContainer:
// the merged histograms, hysteresis and OOM state).
type ContainerState struct {
	Entry Entry
	State []byte
}

// WorkloadState is the checkpoint of one workload's containers.
type WorkloadState struct {
	Workload   report.Workload
	Containers []ContainerState
}

// Dirty returns the workloads with changes not yet exported, sorted.
func (s *Store) Dirty() []report.Workload {
	set := map[report.Workload]struct{}{}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.entries {
			if e.dirty {
				set[k.Workload] = struct{}{}
			}
		}
		sh.mu.Unlock()
	}
	out := make([]report.Workload, 0, len(set))
	for w := range set {
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Export returns the checkpoint of w's containers (sorted by name) and
// marks them clean; a container without recommender state (its preset
// cannot merge, or nothing merged yet) has no State.
func (s *Store) Export(w report.Workload, now time.Time) WorkloadState {
	ws := WorkloadState{Workload: w}
	sh := s.workloadShard(w)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for k, e := range sh.entries {
		if k.Workload != w {
			continue
		}
		cs := ContainerState{Entry: *e}
		if r, err := s.recommender(e.Preset); err == nil {
			cs.State, _ = r.EncodeContainer(k.String(), now)
		}
		e.dirty = false
		ws.Containers = append(ws.Containers, cs)
	}
	sort.Slice(ws.Containers, func(i, j int) bool {
		return ws.Containers[i].Entry.Key.Container < ws.Containers[j].Entry.Key.Container
	})
	return ws
}

// MarkDirty marks w's containers for the next export (a failed write).
func (s *Store) MarkDirty(w report.Workload) {
	sh := s.workloadShard(w)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for k, e := range sh.entries {
		if k.Workload == w {
			e.dirty = true
		}
	}
}

// Restore replaces what the store holds of ws's containers with the
// checkpoint (at start, or when this replica takes over), all or nothing
// per container: a container whose state does not decode keeps its entry
// without history, and the error names it. LastSeen becomes now, so
// restored containers are not expired before their nodes report again.
func (s *Store) Restore(ws WorkloadState, now time.Time) error {
	sh := s.workloadShard(ws.Workload)
	var errs []error
	for _, cs := range ws.Containers {
		e := cs.Entry
		if e.Key.Workload != ws.Workload {
			errs = append(errs, fmt.Errorf("container %s is not of workload %s", e.Key, ws.Workload))
			continue
		}
		if e.Preset == "" {
			e.Preset = s.cfg.DefaultPreset
		}
		if len(cs.State) > 0 {
			r, err := s.recommender(e.Preset)
			if err == nil {
				var id string
				if id, err = r.DecodeContainer(e.Key.String(), cs.State); err == nil && id != e.Key.String() {
					r.Forget(id)
					err = fmt.Errorf("state of %q stored for %q", id, e.Key)
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("container %s: %w", e.Key, err))
				e.Samples, e.Rec = 0, nil
			}
		}
		e.LastSeen, e.dirty = now, false
		if e.Rec != nil {
			e.computedAt = e.Rec.Updated
		}
		sh.mu.Lock()
		sh.entries[e.Key] = &e
		sh.mu.Unlock()
	}
	if len(errs) > 0 {
		return fmt.Errorf("restore %s: %v", ws.Workload, errs)
	}
	return nil
}

// Expire forgets every container no report has mentioned since cutoff
// (its pods are gone) and returns the workloads left with no container,
// sorted, whose checkpoints should go too.
func (s *Store) Expire(cutoff time.Time) []report.Workload {
	gone := map[report.Workload]bool{}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.entries {
			if e.LastSeen.Before(cutoff) {
				delete(sh.entries, k)
				if r, err := s.recommender(e.Preset); err == nil {
					r.Forget(k.String())
				}
				if _, seen := gone[k.Workload]; !seen {
					gone[k.Workload] = true
				}
			} else {
				gone[k.Workload] = false
			}
		}
		sh.mu.Unlock()
	}
	var out []report.Workload
	for w, empty := range gone {
		if empty {
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}
