package pools

import (
	"maps"
	"sort"
	"sync"

	"k8s.io/utils/cpuset"
)

// Assignment is the exclusive CPU set of one pod.
type Assignment struct {
	UID       string
	Namespace string
	Name      string
	CPUs      cpuset.CPUSet
	// ReleaseIsolation: the pod currently runs on the shared pool as well
	// as its own CPUs, while its cores stay reserved for it.
	ReleaseIsolation bool
}

// Reader is the read side of the pool state.
type Reader interface {
	// All is every CPU the pools manage (online CPUs of the node).
	All() cpuset.CPUSet
	Reserved() cpuset.CPUSet
	// KubeletTaken is held by the kubelet's static CPU manager.
	KubeletTaken() cpuset.CPUSet
	Assignment(uid string) (Assignment, bool)
	// Assignments returns a copy, sorted by UID.
	Assignments() []Assignment
	// Exclusive is the union of all cgpilot exclusive sets.
	Exclusive() cpuset.CPUSet
	// SharedPool = all − reserved − exclusive − kubelet static.
	SharedPool() cpuset.CPUSet
}

// state is the full state the policy receives: Reader plus the writes.
type state interface {
	Reader
	setAssignment(a Assignment) error
	deleteAssignment(uid string) error
	setKubeletTaken(c cpuset.CPUSet)
	snapshot() map[string]Assignment
}

// memState holds the state in memory. Safe for concurrent use.
type memState struct {
	mu       sync.RWMutex
	all      cpuset.CPUSet
	reserved cpuset.CPUSet
	kubelet  cpuset.CPUSet
	assigned map[string]Assignment
}

func newMemState(all, reserved cpuset.CPUSet) *memState {
	return &memState{all: all, reserved: reserved, kubelet: cpuset.New(), assigned: map[string]Assignment{}}
}

func (s *memState) All() cpuset.CPUSet      { return s.all }
func (s *memState) Reserved() cpuset.CPUSet { return s.reserved }

func (s *memState) KubeletTaken() cpuset.CPUSet {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.kubelet
}

func (s *memState) Assignment(uid string) (Assignment, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	a, ok := s.assigned[uid]
	return a, ok
}

func (s *memState) Assignments() []Assignment {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Assignment, 0, len(s.assigned))
	for _, a := range s.assigned {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out
}

func (s *memState) Exclusive() cpuset.CPUSet {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.exclusiveLocked()
}

func (s *memState) exclusiveLocked() cpuset.CPUSet {
	u := cpuset.New()
	for _, a := range s.assigned {
		u = u.Union(a.CPUs)
	}
	return u
}

func (s *memState) SharedPool() cpuset.CPUSet {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.all.Difference(s.reserved).Difference(s.exclusiveLocked()).Difference(s.kubelet)
}

func (s *memState) setAssignment(a Assignment) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.assigned[a.UID] = a
	return nil
}

func (s *memState) deleteAssignment(uid string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.assigned, uid)
	return nil
}

func (s *memState) setKubeletTaken(c cpuset.CPUSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kubelet = c
}

func (s *memState) snapshot() map[string]Assignment {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.assigned)
}

// checkpointState writes a checkpoint on every change of ownership (which
// CPUs are whose), under one mutex, before the change reaches a cgroup, so
// the file never lags the memory by more than the change being made. When
// the write fails the change is rolled back and the error returned: memory
// never holds an allocation a restart would forget.
//
// A change of ReleaseIsolation alone owns nothing: it is written by flush,
// which the agent calls from another worker once the cgroups are written,
// so that an fsync is on neither the annotation's path to the cgroup nor
// the pod's next change (BenchmarkAnnotationToCgroup). A restart before it
// restores the older flag, and the pod's first reconcile sets it from its
// annotation. flush writes a snapshot without holding mu, so the next such
// change is not held behind its fsync either; fileMu keeps the writes of
// the file in the order of their snapshots, so the file never goes back
// to an older state.
type checkpointState struct {
	*memState
	// fileMu serialises the writes of the file; it is taken before mu.
	fileMu sync.Mutex
	mu     sync.Mutex
	file   string
	// dirty: memory holds a ReleaseIsolation the file does not have yet;
	// deferred counts those changes, so a flush knows whether one came
	// after its snapshot.
	dirty    bool
	deferred uint64
	// write writes the file (writeCheckpoint; tests).
	write func(path string, assigned map[string]Assignment) error
}

// sameOwner says whether a and b differ at most in ReleaseIsolation.
func sameOwner(a, b Assignment) bool {
	return a.UID == b.UID && a.Namespace == b.Namespace && a.Name == b.Name && a.CPUs.Equals(b.CPUs)
}

func (s *checkpointState) setAssignment(a Assignment) error {
	if s.deferIsolation(a) {
		return nil
	}
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.memState.Assignment(a.UID)
	_ = s.memState.setAssignment(a)
	if err := s.writeLocked(); err != nil {
		if had {
			_ = s.memState.setAssignment(old)
		} else {
			_ = s.memState.deleteAssignment(a.UID)
		}
		return err
	}
	return nil
}

// deferIsolation records a when it changes the pod's assignment in
// ReleaseIsolation alone, for flush, and says whether it did.
func (s *checkpointState) deferIsolation(a Assignment) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.memState.Assignment(a.UID)
	if !had || !sameOwner(old, a) || s.file == "" {
		return false
	}
	_ = s.memState.setAssignment(a)
	s.dirty = true
	s.deferred++
	return true
}

func (s *checkpointState) deleteAssignment(uid string) error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.memState.Assignment(uid)
	if !had {
		return nil
	}
	_ = s.memState.deleteAssignment(uid)
	if err := s.writeLocked(); err != nil {
		_ = s.memState.setAssignment(old)
		return err
	}
	return nil
}

// replace sets the whole state at once (restore) and writes it.
func (s *checkpointState) replace(keep map[string]Assignment) error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.memState.mu.Lock()
	s.memState.assigned = maps.Clone(keep)
	s.memState.mu.Unlock()
	return s.writeLocked()
}

// unsaved says whether memory holds a change flush has to write.
func (s *checkpointState) unsaved() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dirty
}

// flush writes what setAssignment left for after the cgroups; a failure
// leaves it to the next flush. Only the snapshot is taken under mu: a
// change made during the write stays unsaved, for the next flush.
func (s *checkpointState) flush() error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return nil
	}
	file, snap, upTo := s.file, s.memState.snapshot(), s.deferred
	s.mu.Unlock()
	if err := s.writeFile(file, snap); err != nil {
		return err
	}
	s.mu.Lock()
	s.dirty = s.deferred != upTo
	s.mu.Unlock()
	return nil
}

// writeLocked writes the whole state; fileMu and mu are held.
func (s *checkpointState) writeLocked() error {
	if err := s.writeFile(s.file, s.memState.snapshot()); err != nil {
		return err
	}
	s.dirty = false
	return nil
}

func (s *checkpointState) writeFile(path string, assigned map[string]Assignment) error {
	if s.write != nil {
		return s.write(path, assigned)
	}
	return writeCheckpoint(path, assigned)
}
