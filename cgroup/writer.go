//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/utils/cpuset"
)

// Resources are the values a plan sets on one cgroup. A nil field is left
// as it is.
type Resources struct {
	CPUs *cpuset.CPUSet // cpuset.cpus
	Mems *cpuset.CPUSet // cpuset.mems
	// Shares in v1 units [2, 262144]; on v2 written as cpu.weight with the
	// Writer's WeightFormula (a container) or the kubelet's (a pod).
	Shares *uint64
	Quota  *Quota // cpu.cfs_quota_us + cpu.cfs_period_us, or cpu.max
	// MemoryLimit in bytes, -1 = unlimited (memory.limit_in_bytes /
	// memory.max); any other negative value is refused (on v1 the kernel
	// would read it as unlimited).
	MemoryLimit *int64
	// MemoryHigh in bytes, -1 = max; v2 only; other negatives are refused.
	MemoryHigh *int64
}

// Target is one cgroup of a plan.
type Target struct {
	Name string // for messages, e.g. "pod <uid>" or a container name
	Dirs Dirs
	Set  Resources
}

// Plan is a change to one pod cgroup and its container cgroups, applied as
// one unit. Containers must be children of Pod.
type Plan struct {
	Pod        Target
	Containers []Target
}

// Write is the audit record of one file write.
type Write struct {
	Time     time.Time
	Path     string
	Old, New string
	DryRun   bool // recorded, not written
	Rollback bool // undoing an earlier write after a failure
}

// WriterOptions configure a Writer; the zero value is usable.
type WriterOptions struct {
	// DryRun records the writes Apply would do without doing them.
	DryRun bool
	// MemoryMargin is the fraction of current usage a lowered memory limit
	// must keep as head room; 0 (or a value that is no fraction: negative,
	// NaN, infinite) means DefaultMemoryMargin.
	MemoryMargin float64
	// Weight converts shares to cpu.weight on v2 in containers' cgroups
	// (the node runtime's formula); pods' cgroups always get the kubelet's,
	// WeightLinear.
	Weight WeightFormula
	// Now stamps audit records; nil means time.Now.
	Now func() time.Time
	// Audit, if set, receives every record as it happens.
	Audit func(Write)
}

// Writer applies plans in the leveled order described on Apply. It keeps
// no state between calls except the drift counter, so it is safe for
// concurrent use on different pods.
type Writer struct {
	opts  WriterOptions
	drift atomic.Uint64
}

// NewWriter returns a Writer with options o.
func NewWriter(o WriterOptions) *Writer {
	if !(o.MemoryMargin > 0) || math.IsInf(o.MemoryMargin, 1) {
		o.MemoryMargin = DefaultMemoryMargin // a NaN margin would turn the usage check off
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Writer{opts: o}
}

// Drift returns how many values Reassert found rewritten by someone else
// and set back, since the Writer was created.
func (w *Writer) Drift() uint64 { return w.drift.Load() }

// Apply validates p, reads the current values and writes only what
// differs, in this order:
//
//  1. Checks, before any write: no empty cpuset; shares within [2, 262144];
//     quota ≥ 1 ms and period within [1 ms, 1 s]; every container's new
//     cpuset within the pod's new cpuset; on v1 no container quota above
//     the pod's (in CPUs); a lowered memory limit (or memory.high) not below
//     usage × (1 + margin); memory.high only on v2; on v1 no child cgroup
//     left out of the plan (the sandbox container) outside the pod's new
//     cpuset or above its new quota. A failed check returns a *Refusal
//     (ErrRefused) and writes nothing.
//  2. Top-down (pod, then containers): cpuset.cpus and cpuset.mems widen to
//     the union of old and new, so no level ever asks for CPUs its parent
//     lacks (v1 EACCES).
//  3. Bottom-up (containers, then pod): everything that narrows. cpusets
//     shrink to the new set (a parent never drops a CPU a child still has:
//     v1 EBUSY); quotas that shrink; memory limits that shrink, memory.high
//     before memory.max so reclaim starts before the hard limit moves.
//  4. Top-down: everything that widens: quotas that grow (a child never
//     exceeds its parent: v1 EINVAL), memory limits that grow (memory.max
//     before memory.high), then shares/weight, which have no order.
//
// If the kernel rejects a write, Apply undoes the writes it made, in
// reverse order (which passes only through states the kernel already
// accepted), and returns the write error joined with any rollback error.
// The returned records include the rollback writes.
func (w *Writer) Apply(p Plan) ([]Write, error) { return w.apply(p, nil, false) }

// apply is Apply with a record of the CPU placement files (known.go): the
// values read and written are recorded in k, and with trust the recorded
// ones are used instead of reading their files, and v1's unplanned-children
// check is left to the kernel. A trusted run that fails in any way (a
// refusal, a read, a write the kernel rejects) is rolled back like any
// other, to the recorded values (the files' own unless someone wrote one
// since; that write's event reports it to the watch's handler), its
// records are dropped, and the plan is applied again reading every value,
// with every check: that run succeeds or is rolled back to what it read.
func (w *Writer) apply(p Plan, k *known, trust bool) ([]Write, error) {
	a := &applier{w: w, known: k, trust: trust && k != nil}
	err := a.run(p)
	return a.records, err
}

// Reassert re-reads the desired values of p and writes back those that
// differ (someone else, such as the kubelet or the runtime, rewrote them).
// It returns the number of files found drifted; the Writer's Drift counter
// grows by the same number.
func (w *Writer) Reassert(p Plan) (int, []Write, error) {
	recs, err := w.Apply(p)
	seen := map[string]bool{}
	for _, r := range recs {
		if !r.Rollback {
			seen[r.Path] = true
		}
	}
	if err == nil && !w.opts.DryRun {
		w.drift.Add(uint64(len(seen)))
	}
	return len(seen), recs, err
}

// node is one target with the current values of what it sets.
type node struct {
	t           Target
	hasChildren bool
	pod         bool // the pod's own cgroup, which the kubelet writes
	cpus, mems  cpuset.CPUSet
	quota       Quota
	shares      string
	memLimit    int64 // -1 unlimited
	memHigh     int64
	memUsage    uint64
	// memsw is v1's memory.memsw.limit_in_bytes (-1 unlimited) where the
	// kernel accounts swap (hasMemsw): a runtime that allows no swap sets
	// it equal to the limit, and the kernel refuses a limit above it.
	memsw    int64
	hasMemsw bool
}

type applier struct {
	w       *Writer
	records []Write
	undo    []undoStep
	// known records the CPU placement files (nil: none, every value is
	// read); trust uses the records instead of reading.
	known *known
	trust bool
}

type undoStep struct{ dir, file, old string }

func (a *applier) run(p Plan) error {
	nodes := make([]*node, 0, 1+len(p.Containers))
	// A pod always has child cgroups (at least the sandbox), planned or not.
	nodes = append(nodes, &node{t: p.Pod, hasChildren: true, pod: true})
	for _, c := range p.Containers {
		nodes = append(nodes, &node{t: c})
	}
	if err := a.checkStatic(nodes); err != nil {
		return err
	}
	if err := a.readCurrent(nodes); err != nil {
		return a.distrust(p, nodes, err)
	}
	if err := a.checkRelations(nodes); err != nil {
		return a.distrust(p, nodes, err)
	}
	err := a.passes(nodes)
	if err == nil || a.w.opts.DryRun {
		return err
	}
	return a.distrust(p, nodes, errors.Join(err, a.rollback()))
}

// distrust handles the failure err of a run: a trusted run (whose writes
// were rolled back already) drops the records of the plan's cgroups and
// runs again reading every value; any other run returns err.
func (a *applier) distrust(p Plan, nodes []*node, err error) error {
	if !a.trust {
		return err
	}
	for _, n := range nodes {
		a.known.forget(n.t.Dirs.CPUSet, n.t.Dirs.CPU)
	}
	a.trust, a.undo = false, nil
	return a.run(p)
}

func (a *applier) passes(nodes []*node) error {
	topDown := nodes
	bottomUp := make([]*node, len(nodes))
	for i, n := range nodes {
		bottomUp[len(nodes)-1-i] = n
	}
	// 2: widen cpusets to the union, top-down.
	for _, n := range topDown {
		if err := a.cpuset(n, true); err != nil {
			return err
		}
	}
	// 3: narrow, bottom-up.
	for _, n := range bottomUp {
		if err := a.cpuset(n, false); err != nil {
			return err
		}
		if err := a.quota(n, true); err != nil {
			return err
		}
		if err := a.memory(n, true); err != nil {
			return err
		}
	}
	// 4: widen, top-down.
	for _, n := range topDown {
		if err := a.quota(n, false); err != nil {
			return err
		}
		if err := a.memory(n, false); err != nil {
			return err
		}
		if err := a.shares(n); err != nil {
			return err
		}
	}
	return nil
}

func (a *applier) write(dir, file, old, new string) error {
	rec := Write{Time: a.w.opts.Now(), Path: dir + "/" + file, Old: old, New: new, DryRun: a.w.opts.DryRun}
	if !rec.DryRun {
		if err := a.known.write(dir, file, new); err != nil {
			return err
		}
		a.undo = append(a.undo, undoStep{dir, file, old})
	}
	a.record(rec)
	return nil
}

func (a *applier) record(r Write) {
	a.records = append(a.records, r)
	if a.w.opts.Audit != nil {
		a.w.opts.Audit(r)
	}
}

func (a *applier) rollback() error {
	var errs []error
	for i := len(a.undo) - 1; i >= 0; i-- {
		u := a.undo[i]
		err := a.known.write(u.dir, u.file, u.old)
		if err != nil {
			errs = append(errs, fmt.Errorf("rollback: %w", err))
			continue
		}
		a.record(Write{Time: a.w.opts.Now(), Path: filepath.Join(u.dir, u.file), New: u.old, Rollback: true})
	}
	return errors.Join(errs...)
}

func (a *applier) checkStatic(nodes []*node) error {
	for _, n := range nodes {
		s, d := n.t.Set, n.t.Dirs
		if s.CPUs != nil {
			if err := checkCPUSet(filepath.Join(d.CPUSet, cpusFile), *s.CPUs); err != nil {
				return err
			}
		}
		if s.Mems != nil {
			if err := checkCPUSet(filepath.Join(d.CPUSet, memsFile), *s.Mems); err != nil {
				return err
			}
		}
		if s.Shares != nil {
			if err := checkShares(filepath.Join(d.CPU, "cpu.shares"), *s.Shares); err != nil {
				return err
			}
		}
		if s.Quota != nil {
			if err := checkQuota(filepath.Join(d.CPU, "cpu.cfs_quota_us"), *s.Quota); err != nil {
				return err
			}
		}
		if s.MemoryHigh != nil && !d.Unified {
			return &Refusal{Path: filepath.Join(d.Memory, "memory.high"), Value: strconv.FormatInt(*s.MemoryHigh, 10), Reason: "memory.high exists only on cgroup v2"}
		}
		for _, m := range []struct {
			v    *int64
			file string
		}{{s.MemoryLimit, limitFile(d.Unified)}, {s.MemoryHigh, "memory.high"}} {
			if m.v != nil && *m.v < -1 {
				return &Refusal{Path: filepath.Join(d.Memory, m.file), Value: strconv.FormatInt(*m.v, 10),
					Reason: "negative: the only negative value is -1, unlimited (this one came from a negative or overflowed amount)"}
			}
		}
	}
	return nil
}

func anySet(nodes []*node, f func(Resources) bool) bool {
	for _, n := range nodes {
		if f(n.t.Set) {
			return true
		}
	}
	return false
}

// readCurrent reads what the passes compare against. The cpusets and quotas
// of every node are read when any node sets them, because the relations
// between levels depend on the values the plan leaves alone too. A trusted
// run takes them from the record where it has them.
func (a *applier) readCurrent(nodes []*node) error {
	read := func(dir, file string) (string, error) { return a.known.read(dir, file, a.trust) }
	needCPUs := anySet(nodes, func(r Resources) bool { return r.CPUs != nil })
	needMems := anySet(nodes, func(r Resources) bool { return r.Mems != nil })
	needQuota := anySet(nodes, func(r Resources) bool { return r.Quota != nil })
	var err error
	for _, n := range nodes {
		d, s := n.t.Dirs, n.t.Set
		if needCPUs {
			if n.cpus, err = readCPUSetWith(d.CPUSet, cpusFile, read); err != nil {
				return err
			}
		}
		if needMems {
			if n.mems, err = readCPUSetFile(d.CPUSet, memsFile); err != nil {
				return err
			}
		}
		if needQuota {
			if n.quota, err = readQuotaWith(d, read); err != nil {
				return err
			}
		}
		if s.Shares != nil {
			file, _ := sharesFile(d.Unified, *s.Shares, a.weight(n))
			if n.shares, err = readFile(d.CPU, file); err != nil {
				return err
			}
		}
		if s.MemoryLimit != nil || s.MemoryHigh != nil {
			if n.memLimit, err = readMemoryLimit(d); err != nil {
				return err
			}
			if n.memUsage, err = readMemoryUsage(d); err != nil {
				return err
			}
			if n.memsw, n.hasMemsw, err = readMemsw(d); err != nil {
				return err
			}
		}
		if s.MemoryHigh != nil {
			if n.memHigh, err = readMemoryHigh(d); err != nil {
				return err
			}
		}
	}
	return nil
}

// memLess compares limits where -1 means unlimited.
func memLess(a, b int64) bool {
	if a < 0 {
		return false
	}
	return b < 0 || a < b
}

func (a *applier) checkRelations(nodes []*node) error {
	pod := nodes[0]
	podCPUs, podMems, podQuota := pod.cpus, pod.mems, pod.quota
	if s := pod.t.Set; s.CPUs != nil {
		podCPUs = *s.CPUs
	}
	if s := pod.t.Set; s.Mems != nil {
		podMems = *s.Mems
	}
	if s := pod.t.Set; s.Quota != nil {
		podQuota = *s.Quota
	}
	for _, n := range nodes[1:] {
		s, d := n.t.Set, n.t.Dirs
		if anySet(nodes, func(r Resources) bool { return r.CPUs != nil }) {
			cpus := n.cpus
			if s.CPUs != nil {
				cpus = *s.CPUs
			}
			if !cpus.IsSubsetOf(podCPUs) {
				return &Refusal{Path: filepath.Join(d.CPUSet, cpusFile), Value: cpus.String(),
					Reason: fmt.Sprintf("%s would use CPUs outside its pod's cpuset %s", n.t.Name, podCPUs)}
			}
		}
		if anySet(nodes, func(r Resources) bool { return r.Mems != nil }) {
			mems := n.mems
			if s.Mems != nil {
				mems = *s.Mems
			}
			if !mems.IsSubsetOf(podMems) {
				return &Refusal{Path: filepath.Join(d.CPUSet, memsFile), Value: mems.String(),
					Reason: fmt.Sprintf("%s would use memory nodes outside its pod's %s", n.t.Name, podMems)}
			}
		}
		if !d.Unified && anySet(nodes, func(r Resources) bool { return r.Quota != nil }) {
			q := n.quota
			if s.Quota != nil {
				q = *s.Quota
			}
			if !q.Unlimited() && q.CPUs() > podQuota.CPUs() {
				return &Refusal{Path: filepath.Join(d.CPU, "cpu.cfs_quota_us"), Value: q.String(),
					Reason: fmt.Sprintf("%s quota %.3f CPUs exceeds its pod's %.3f (v1 rejects it)", n.t.Name, q.CPUs(), podQuota.CPUs())}
			}
		}
	}
	if err := a.checkUnplannedChildren(nodes, podCPUs, podQuota); err != nil {
		return err
	}
	margin := a.w.opts.MemoryMargin
	for _, n := range nodes {
		s, d := n.t.Set, n.t.Dirs
		floor := float64(n.memUsage) * (1 + margin)
		for _, c := range []struct {
			v    *int64
			cur  int64
			file string
		}{{s.MemoryLimit, n.memLimit, limitFile(d.Unified)}, {s.MemoryHigh, n.memHigh, "memory.high"}} {
			if c.v == nil || *c.v < 0 || !memLess(*c.v, c.cur) {
				continue
			}
			if float64(*c.v) < floor {
				return &Refusal{Path: filepath.Join(d.Memory, c.file), Value: strconv.FormatInt(*c.v, 10),
					Reason: fmt.Sprintf("below usage %d × (1 + %.2f) = %.0f bytes", n.memUsage, margin, math.Ceil(floor))}
			}
		}
		if l := s.MemoryLimit; l != nil && n.hasMemsw && !memswTracks(n) && memLess(n.memsw, pageRound(*l)) {
			return &Refusal{Path: filepath.Join(d.Memory, limitFile(false)), Value: strconv.FormatInt(*l, 10),
				Reason: fmt.Sprintf("above %s %d, which does not follow the limit (v1 rejects it)", memswFile, n.memsw)}
		}
	}
	return nil
}

// memswTracks: the memory+swap limit is set and equals the memory limit,
// as a runtime sets it to allow no swap; the writer then moves it with the
// limit, keeping the cgroup without swap. An unlimited memsw (what the
// kubelet leaves on pod cgroups) is never touched.
func memswTracks(n *node) bool { return n.hasMemsw && n.memsw >= 0 && n.memsw == n.memLimit }

func limitFile(unified bool) string {
	_, limit, _, _ := memoryFiles(unified)
	return limit
}

// cpuset widens (to the union of old and new) or narrows (to new).
func (a *applier) cpuset(n *node, widen bool) error {
	dir := n.t.Dirs.CPUSet
	for _, c := range []struct {
		want *cpuset.CPUSet
		cur  *cpuset.CPUSet
		file string
	}{{n.t.Set.Mems, &n.mems, memsFile}, {n.t.Set.CPUs, &n.cpus, cpusFile}} {
		if c.want == nil {
			continue
		}
		next := *c.want
		if widen {
			next = c.cur.Union(*c.want)
		}
		if next.Equals(*c.cur) {
			continue
		}
		if err := a.write(dir, c.file, c.cur.String(), next.String()); err != nil {
			return err
		}
		*c.cur = next
	}
	return nil
}

// quota writes n's quota in the narrowing pass if it shrinks (in CPUs; an
// equal ratio with other numbers counts as shrinking) and in the widening
// pass if it grows.
func (a *applier) quota(n *node, narrowing bool) error {
	want := n.t.Set.Quota
	if want != nil && want.Unlimited() {
		want = &Quota{QuotaUs: -1, PeriodUs: want.PeriodUs}
	}
	if want == nil || *want == n.quota {
		return nil
	}
	if (want.CPUs() <= n.quota.CPUs()) != narrowing {
		return nil
	}
	d := n.t.Dirs
	for _, st := range setQuotaSteps(d.Unified, n.quota, *want, n.hasChildren) {
		old, err := a.currentQuotaFile(d, n.quota, st.file)
		if err != nil {
			return err
		}
		if err := a.write(d.CPU, st.file, old, st.value); err != nil {
			return err
		}
	}
	n.quota = *want
	return nil
}

// currentQuotaFile formats the old value of one quota file for the audit
// record and rollback.
func (a *applier) currentQuotaFile(d Dirs, q Quota, file string) (string, error) {
	switch file {
	case "cpu.max":
		return cpuMaxValue(q), nil
	case "cpu.cfs_quota_us":
		return v1QuotaValue(q), nil
	case "cpu.cfs_period_us":
		return strconv.FormatUint(q.PeriodUs, 10), nil
	}
	return "", fmt.Errorf("%w: unknown quota file %s", ErrWrite, file)
}

// memory writes limit and high. It belongs to the narrowing pass when the
// limit (or, without a limit, high) shrinks: then memory.high goes first, so
// reclaim starts before the hard limit; when growing, memory.max goes first.
func (a *applier) memory(n *node, narrowing bool) error {
	s, d := n.t.Set, n.t.Dirs
	limit, high := s.MemoryLimit, s.MemoryHigh
	changed := func(want *int64, cur int64) bool { return want != nil && pageRound(*want) != cur }
	limitChanged, highChanged := changed(limit, n.memLimit), changed(high, n.memHigh)
	if !limitChanged && !highChanged {
		return nil
	}
	var shrinking bool
	if limitChanged {
		shrinking = memLess(*limit, n.memLimit)
	} else {
		shrinking = memLess(*high, n.memHigh)
	}
	if shrinking != narrowing {
		return nil
	}
	type step struct {
		file string
		want int64
		cur  *int64
	}
	var steps []step
	if highChanged {
		steps = append(steps, step{"memory.high", *high, &n.memHigh})
	}
	if limitChanged {
		lim := []step{{limitFile(d.Unified), *limit, &n.memLimit}}
		// v1 keeps limit <= memsw: memsw grows first and shrinks last.
		if !d.Unified && memswTracks(n) {
			sw := step{memswFile, *limit, &n.memsw}
			if shrinking {
				lim = append(lim, sw)
			} else {
				lim = append([]step{sw}, lim...)
			}
		}
		if shrinking {
			steps = append(steps, lim...)
		} else {
			steps = append(lim, steps...)
		}
	}
	for _, st := range steps {
		if err := a.write(d.Memory, st.file, memoryValue(d.Unified, *st.cur), memoryValue(d.Unified, st.want)); err != nil {
			return err
		}
		*st.cur = pageRound(st.want)
	}
	return nil
}

func (a *applier) shares(n *node) error {
	s, d := n.t.Set, n.t.Dirs
	if s.Shares == nil {
		return nil
	}
	file, value := sharesFile(d.Unified, *s.Shares, a.weight(n))
	if value == n.shares {
		return nil
	}
	if err := a.write(d.CPU, file, n.shares, value); err != nil {
		return err
	}
	n.shares = value
	return nil
}

// weight is the shares→cpu.weight conversion of n's level. Containers'
// cgroups are the runtime's (WriterOptions.Weight); the pod's cgroup is the
// kubelet's, and the kubelet converts linearly whatever the runtime does
// (getCPUWeight in pkg/kubelet/cm, Kubernetes 1.36.3; seen in the cgroup v2
// node tier: a 100m pod gets weight 4 from the kubelet, its container 17
// from runc 1.5.2). Writing the runtime's value there would disagree with
// every write of the kubelet's.
func (a *applier) weight(n *node) WeightFormula {
	if n.pod {
		return WeightLinear
	}
	return a.w.opts.Weight
}

// checkUnplannedChildren refuses a v1 pod-level narrowing that a child
// cgroup missing from the plan (the sandbox "pause" container, a container
// the caller forgot) would make the kernel reject half-way: v1 requires
// every child's cpuset within the parent's and its quota not above it.
func (a *applier) checkUnplannedChildren(nodes []*node, podCPUs cpuset.CPUSet, podQuota Quota) error {
	pod := nodes[0]
	d := pod.t.Dirs
	if d.Unified || (pod.t.Set.CPUs == nil && pod.t.Set.Quota == nil) {
		return nil
	}
	if a.trust {
		// A trusted run does not list: an unplanned child outside the
		// narrowed pod makes the kernel reject the pod's write, the run
		// is rolled back and the plan applied again with this check.
		return nil
	}
	// v1 keeps every child within its parent (a write that would break it
	// fails), so a pod cgroup that is not narrowed cannot leave an
	// unplanned child outside: the listing is skipped when it widens or
	// keeps its cpuset and quota, as a refresh of the shared pool does for
	// every shared pod when a pod's exclusive cores come back.
	narrowsCPUs := pod.t.Set.CPUs != nil && !pod.cpus.IsSubsetOf(podCPUs)
	narrowsQuota := pod.t.Set.Quota != nil && !podQuota.Unlimited() && (pod.quota.Unlimited() || podQuota.CPUs() < pod.quota.CPUs())
	if !narrowsCPUs && !narrowsQuota {
		return nil
	}
	planned := map[string]bool{}
	for _, n := range nodes[1:] {
		planned[n.t.Dirs.CPUSet] = true
		planned[n.t.Dirs.CPU] = true
	}
	if narrowsCPUs {
		kids, err := subdirs(d.CPUSet)
		if err != nil {
			return err
		}
		for _, k := range kids {
			if planned[k] {
				continue
			}
			cpus, err := readCPUSetFile(k, cpusFile)
			if err != nil {
				return err
			}
			if !cpus.IsSubsetOf(podCPUs) {
				return &Refusal{Path: filepath.Join(d.CPUSet, cpusFile), Value: podCPUs.String(),
					Reason: fmt.Sprintf("child cgroup %s (not in the plan) uses CPUs %s; add it to the plan", k, cpus)}
			}
		}
	}
	if narrowsQuota {
		kids, err := subdirs(d.CPU)
		if err != nil {
			return err
		}
		for _, k := range kids {
			if planned[k] {
				continue
			}
			q, err := readQuota(Dirs{CPU: k})
			if err != nil {
				return err
			}
			if !q.Unlimited() && q.CPUs() > podQuota.CPUs() {
				return &Refusal{Path: filepath.Join(d.CPU, "cpu.cfs_quota_us"), Value: podQuota.String(),
					Reason: fmt.Sprintf("child cgroup %s (not in the plan) has quota %s above it; add it to the plan", k, q)}
			}
		}
	}
	return nil
}
