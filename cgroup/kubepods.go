//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"k8s.io/utils/cpuset"
)

// kubepods.go: the kubepods subtree of one node as a whole. Layout says
// where one pod's cgroups are; Kubepods adds what placing pods on CPUs
// needs on top of it: the QoS parents, listing a pod's child cgroups (with
// a cache the watcher keeps current), reading a cpuset, and the leveled
// writes of a pod's CPU placement, including the races with the runtime
// that creates and removes those cgroups meanwhile.

// KubepodsConfig says where the kubepods tree is.
type KubepodsConfig struct {
	// Root is where the hierarchies must be mounted (normally
	// /sys/fs/cgroup): a hierarchy mounted elsewhere (say an unconfined
	// copy) is a configuration error, not something to write through.
	Root string
	// Layout overrides detection (KubepodsPath, Driver, ContainerFormat).
	Layout LayoutConfig
	// Writer configures the writes (dry run, audit, memory margin).
	Writer WriterOptions
}

// Kubepods is one node's kubepods tree. It is safe for concurrent use.
type Kubepods struct {
	layout *Layout
	writer *Writer
	// known records the CPU placement files written and read, trusted
	// while Watch runs (known.go).
	known known

	mu   sync.Mutex
	kids map[string][]string // cpuset dir -> child cgroup paths
}

// OpenKubepods checks the mounts and the kubepods cgroup and returns the
// tree. Errors wrap ErrLayout and say which setting to change.
func OpenKubepods(m Mounts, cfg KubepodsConfig) (*Kubepods, error) {
	if err := mountsBelow(m, cfg.Root); err != nil {
		return nil, err
	}
	layout, err := NewLayout(m, cfg.Layout)
	if err != nil {
		return nil, err
	}
	d, err := layout.DirsAt(layout.KubepodsPath())
	if err != nil {
		return nil, err
	}
	if !isDir(d.CPUSet) {
		return nil, fmt.Errorf("%w: kubepods cgroup %s: no such directory (set the kubepods path)", ErrLayout, d.CPUSet)
	}
	if m.Mode == ModeUnified {
		if err := controllersEnabled(d.CPUSet, "cpu", "cpuset"); err != nil {
			return nil, err
		}
	}
	return &Kubepods{layout: layout, writer: NewWriter(cfg.Writer), kids: map[string][]string{}}, nil
}

// controllersEnabled checks that dir hands the named v2 controllers to its
// children (the QoS and Guaranteed pod cgroups): on v2 a cgroup has
// cpuset.cpus and cpu.max only when its parent enables them, and without
// them every write would fail on a missing file.
func controllersEnabled(dir string, controllers ...string) error {
	s, err := readFile(dir, "cgroup.subtree_control")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrLayout, err)
	}
	enabled := strings.Fields(s)
	for _, c := range controllers {
		if !slices.Contains(enabled, c) {
			return fmt.Errorf("%w: %s/cgroup.subtree_control is %q: the %s controller is not enabled for the pods below kubepods", ErrLayout, dir, s, c)
		}
	}
	return nil
}

// mountsBelow checks that the hierarchies written are mounted under root.
func mountsBelow(m Mounts, root string) error {
	if root == "" {
		return nil
	}
	check := func(name string, mnt Mount) error {
		if mnt.Point != root && !strings.HasPrefix(mnt.Point, root+"/") {
			return fmt.Errorf("%w: cgroup %s hierarchy is mounted at %s, outside the cgroup root %s", ErrLayout, name, mnt.Point, root)
		}
		return nil
	}
	if m.Mode == ModeUnified {
		return check("unified", m.Unified)
	}
	for _, c := range []string{"cpu", "cpuset"} {
		mnt, ok := m.V1[c]
		if !ok {
			return fmt.Errorf("%w: no cgroup v1 %s hierarchy mounted", ErrLayout, c)
		}
		if err := check(c, mnt); err != nil {
			return err
		}
	}
	return nil
}

// Layout returns the layout the tree resolves paths with.
func (k *Kubepods) Layout() *Layout { return k.layout }

// PodPath is the pod cgroup's path from each hierarchy root.
func (k *Kubepods) PodPath(uid string, qos QoS) (string, error) { return k.layout.PodPath(uid, qos) }

// ContainerPath is a container's cgroup path from its pod status ID
// ("containerd://<id>").
func (k *Kubepods) ContainerPath(uid string, qos QoS, containerID string) (string, error) {
	return k.layout.ContainerPath(uid, qos, containerID)
}

// QoSPaths are the parents of pod cgroups: kubepods and its QoS cgroups.
func (k *Kubepods) QoSPaths() []string {
	var out []string
	for _, q := range []QoS{QoSGuaranteed, QoSBurstable, QoSBestEffort} {
		if p, err := k.layout.QoSPath(q); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// cpusetDir is the directory of a cgroup path in the cpuset hierarchy (the
// one the watcher watches); "" when it cannot be resolved.
func (k *Kubepods) cpusetDir(p string) string {
	d, err := k.layout.DirsAt(p)
	if err != nil {
		return ""
	}
	return d.CPUSet
}

// Children lists the child cgroups of p (containers and the sandbox of a
// pod) afresh and caches the listing. A missing p gives an error wrapping
// ErrGone.
func (k *Kubepods) Children(p string) ([]string, error) {
	dir := k.cpusetDir(p)
	dirs, err := subdirs(dir)
	if err != nil {
		k.forgetDir(dir)
		return nil, err
	}
	out := make([]string, 0, len(dirs))
	for _, d := range dirs {
		out = append(out, path.Join(p, path.Base(d)))
	}
	k.mu.Lock()
	k.kids[dir] = out
	k.mu.Unlock()
	return slices.Clone(out), nil
}

// KnownChildren is Children from the cache when there is a listing, so a
// refresh of every shared pod does not list hundreds of directories. A
// listing gone stale between a mkdir and its inotify event is safe: the
// event makes the caller sync the pod again, listed afresh; meanwhile, on
// v1 the Writer refuses a narrowing with an unplanned child (ApplyPod then
// lists afresh), and on v2 the unwritten child inherits the pod's CPUs.
func (k *Kubepods) KnownChildren(p string) ([]string, error) {
	k.mu.Lock()
	kids, ok := k.kids[k.cpusetDir(p)]
	k.mu.Unlock()
	if ok {
		return slices.Clone(kids), nil
	}
	return k.Children(p)
}

// ForgetChildren drops the cached listing of p, or every listing for "".
func (k *Kubepods) ForgetChildren(p string) {
	if p == "" {
		k.mu.Lock()
		clear(k.kids)
		k.mu.Unlock()
		return
	}
	k.forgetDir(k.cpusetDir(p))
}

func (k *Kubepods) forgetDir(dir string) {
	k.mu.Lock()
	delete(k.kids, dir)
	k.mu.Unlock()
}

// Exists reports whether the cgroup p still exists, which is whether a
// process may still run in it: cgroup.procs cannot prove it empty (it lists
// only the processes of the reader's PID namespace), while the runtime
// removes a container's cgroup when it deletes the exited task.
func (k *Kubepods) Exists(p string) (bool, error) {
	dir := k.cpusetDir(p)
	if dir == "" {
		return false, fmt.Errorf("%w: cgroup path %q", ErrLayout, p)
	}
	return isDir(dir), nil
}

// ReadCPUs reads p's cpuset.cpus.
func (k *Kubepods) ReadCPUs(p string) (cpuset.CPUSet, error) {
	d, err := k.layout.DirsAt(p)
	if err != nil {
		return cpuset.New(), err
	}
	return readCPUSetFile(d.CPUSet, cpusFile)
}

// WidenCPUs makes p's cpuset a superset of cpus; the QoS parents hold pods
// of every pool, so they are only ever widened. An empty v2 cpuset asks for
// nothing (the cgroup has all of its parent's CPUs) and is left alone:
// writing the union would confine the pods nobody manages. A missing p is
// not an error. It returns the number of files written.
func (k *Kubepods) WidenCPUs(p string, cpus cpuset.CPUSet) (int, error) {
	d, err := k.layout.DirsAt(p)
	if err != nil {
		return 0, err
	}
	cur, err := readCPUSetWith(d.CPUSet, cpusFile, func(dir, file string) (string, error) { return k.known.read(dir, file, false) })
	if errors.Is(err, ErrGone) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if cur.IsEmpty() && d.Unified {
		return 0, nil
	}
	u := cur.Union(cpus)
	if u.Equals(cur) {
		return 0, nil
	}
	recs, err := k.writer.apply(Plan{Pod: Target{Name: p, Dirs: d, Set: Resources{CPUs: &u}}}, &k.known, false)
	return len(recs), err
}

// PodCPUs is the CPU placement of one pod: one cpuset on the pod and every
// child cgroup, and optionally CFS quotas.
type PodCPUs struct {
	UID        string
	Path       string   // the pod cgroup, from each hierarchy's root
	Containers []string // its child cgroups (containers and the sandbox)
	CPUs       cpuset.CPUSet
	// UnlimitedQuota removes the CFS quota of the pod and its children
	// (a pod on cores of its own gains nothing from throttling).
	UnlimitedQuota bool
	// Quotas, when set, are CFS quotas to put back (the kubelet's, after a
	// pod left its own cores).
	Quotas *PodQuotas
	// Verify reads every value before writing. Without it, the values
	// the tree recorded while its Watch runs stand for the files (see
	// ApplyPod).
	Verify bool
}

// PodQuotas are CFS quotas for a pod and its children; a child missing
// from Containers (the sandbox) keeps its quota.
type PodQuotas struct {
	Pod        Quota
	Containers map[string]Quota // by child cgroup path
}

// Written is one file a plan wrote, and the cgroup it belongs to.
type Written struct {
	Cgroup   string // path from each hierarchy's root
	File     string // the file written
	Old, New string // the value found (or recorded) before, and the one written
}

// ApplyPod writes one pod's placement in leveled order (see Writer.Apply)
// and returns what it wrote. A pod whose cgroup does not exist yet in the
// cpuset hierarchy is not an error: nothing is written. A pod that exists
// in some hierarchies and not yet in every one the plan needs gives
// ErrNotReady. A child that appeared or vanished between the listing and
// the write makes the Writer refuse and roll back; the pod is then listed
// afresh and written once more.
//
// Unless p.Verify is set, the cpusets and quotas this tree last wrote or
// read stand for the files while Watch has them watched: the writes
// follow without reading first, and v1's unplanned-children check lists
// nothing (the kernel refuses what it would have refused). A value someone
// else wrote since is dropped from the record by the watch before its
// handler sees the write, so the handler's own sync reads it; a write the
// kernel rejects on a wrong record is rolled back and the plan applied
// again reading every file (Writer.Apply's guarantees hold for that run).
func (k *Kubepods) ApplyPod(p PodCPUs) ([]Written, error) {
	pd, err := k.layout.DirsAt(p.Path)
	if err != nil {
		return nil, err
	}
	trust := !p.Verify && k.known.watched(pd.CPUSet)
	if !trust && !isDir(pd.CPUSet) {
		return nil, nil // not created yet: the watcher reports it when it is
	}
	if (p.UnlimitedQuota || p.Quotas != nil) && !isDir(pd.CPU) {
		return nil, fmt.Errorf("%w: pod %s: %s", ErrNotReady, p.UID, pd.CPU)
	}
	var written []Written
	for attempt := 0; ; attempt++ {
		plans, err := k.podPlans(p, pd)
		if err != nil {
			return written, err
		}
		for _, plan := range plans {
			var recs []Write
			recs, err = k.writer.apply(plan, &k.known, trust)
			for _, r := range recs {
				if !r.Rollback && !r.DryRun {
					written = append(written, Written{Cgroup: cgroupOf(plan, r.Path), File: r.Path, Old: r.Old, New: r.New})
				}
			}
			if err != nil {
				break
			}
		}
		if err == nil {
			return written, nil
		}
		if attempt == 0 && (errors.Is(err, ErrRefused) || errors.Is(err, ErrGone)) {
			if kids, lerr := k.Children(p.Path); lerr == nil {
				p.Containers = kids
				continue
			}
		}
		if errors.Is(err, ErrGone) && !isDir(pd.CPUSet) {
			return written, nil // the whole pod is gone: nothing to fix
		}
		return written, fmt.Errorf("pod %s: %w", p.UID, err)
	}
}

// childDirs are the directories of c, a child cgroup of the pod whose
// directories are pd and whose path ends with "/" in prefix: DirsAt(c)
// without resolving the mounts again. A c that is no direct child (or not
// clean) gives an error, and the caller resolves it with DirsAt.
func childDirs(pd Dirs, prefix, c string) (Dirs, error) {
	name, ok := strings.CutPrefix(c, prefix)
	if !ok || name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return Dirs{}, fmt.Errorf("%w: %s is not a child of %s", ErrLayout, c, prefix)
	}
	join := func(d string) string {
		if d == "" {
			return ""
		}
		return d + "/" + name
	}
	return Dirs{Unified: pd.Unified, CPU: join(pd.CPU), CPUAcct: join(pd.CPUAcct), CPUSet: join(pd.CPUSet), Memory: join(pd.Memory), PSI: join(pd.PSI)}, nil
}

// cgroupOf names the cgroup (by path from the hierarchy root) of a file a
// plan wrote.
func cgroupOf(plan Plan, file string) string {
	dir := path.Dir(file)
	for _, t := range append([]Target{plan.Pod}, plan.Containers...) {
		if dir == t.Dirs.CPUSet || dir == t.Dirs.CPU || dir == t.Dirs.Memory {
			return t.Name
		}
	}
	return dir
}

// podPlans turns a placement into Writer plans: one setting the cpuset on
// the pod and every child, with the quota where one is asked for. When a
// child has no cpu cgroup yet (runtimes create the hierarchies one by one),
// the Writer could not read its quota, so the quota goes in a second plan
// over the pod and the children that have one. Targets are named by their
// cgroup path, which ApplyPod reports back.
func (k *Kubepods) podPlans(p PodCPUs, pd Dirs) ([]Plan, error) {
	cpus := p.CPUs
	quotaOf := func(cg string) *Quota {
		switch {
		case p.UnlimitedQuota:
			return &Quota{QuotaUs: -1, PeriodUs: DefaultPeriodUs}
		case p.Quotas == nil:
			return nil
		case cg == p.Path:
			q := p.Quotas.Pod
			return &q
		}
		if q, ok := p.Quotas.Containers[cg]; ok {
			return &q
		}
		return nil
	}
	withQuota := p.UnlimitedQuota || p.Quotas != nil
	one := Plan{Pod: Target{Name: p.Path, Dirs: pd, Set: Resources{CPUs: &cpus, Quota: quotaOf(p.Path)}}}
	cpusOnly := Plan{Pod: Target{Name: p.Path, Dirs: pd, Set: Resources{CPUs: &cpus}}}
	quotaOnly := Plan{Pod: Target{Name: p.Path, Dirs: pd, Set: Resources{Quota: quotaOf(p.Path)}}}
	split := false
	prefix := p.Path + "/"
	for _, c := range p.Containers {
		cd, err := childDirs(pd, prefix, c)
		if err != nil {
			cd, err = k.layout.DirsAt(c)
		}
		if err != nil {
			return nil, err
		}
		q := quotaOf(c)
		one.Containers = append(one.Containers, Target{Name: c, Dirs: cd, Set: Resources{CPUs: &cpus, Quota: q}})
		cpusOnly.Containers = append(cpusOnly.Containers, Target{Name: c, Dirs: cd, Set: Resources{CPUs: &cpus}})
		if !withQuota {
			continue
		}
		if !isDir(cd.CPU) {
			split = true // a cpuset-only child, for now
			continue
		}
		quotaOnly.Containers = append(quotaOnly.Containers, Target{Name: c, Dirs: cd, Set: Resources{Quota: q}})
	}
	if split {
		return []Plan{cpusOnly, quotaOnly}, nil
	}
	return []Plan{one}, nil
}

// PodResources are the CPU and memory values of a pod and its containers,
// as the kubelet derives them from requests and limits (KubeletShares,
// KubeletQuota, byte limits). A nil field is left as it is.
type PodResources struct {
	UID        string
	Path       string
	Pod        Resources
	Containers map[string]Resources // by child cgroup path
}

// ApplyPodResources writes a pod's CPU and memory values in leveled order
// (a growing limit widens the pod before its containers, a shrinking one
// narrows the containers first; a memory limit never goes below usage ×
// (1 + margin)). It is how the agent changes requests and limits where the
// cluster has no pods/resize, and how an OOM-killed container gets memory
// at once. A pod not created yet in every hierarchy gives ErrNotReady.
func (k *Kubepods) ApplyPodResources(p PodResources) ([]Written, error) {
	pd, err := k.layout.DirsAt(p.Path)
	if err != nil {
		return nil, err
	}
	if !isDir(pd.CPU) || !isDir(pd.Memory) {
		return nil, fmt.Errorf("%w: pod %s: %s", ErrNotReady, p.UID, p.Path)
	}
	plan := Plan{Pod: Target{Name: p.Path, Dirs: pd, Set: p.Pod}}
	paths := make([]string, 0, len(p.Containers))
	for c := range p.Containers {
		paths = append(paths, c)
	}
	slices.Sort(paths)
	for _, c := range paths {
		cd, err := k.layout.DirsAt(c)
		if err != nil {
			return nil, err
		}
		plan.Containers = append(plan.Containers, Target{Name: c, Dirs: cd, Set: p.Containers[c]})
	}
	recs, err := k.writer.apply(plan, &k.known, false)
	var written []Written
	for _, r := range recs {
		if !r.Rollback && !r.DryRun {
			written = append(written, Written{Cgroup: cgroupOf(plan, r.Path), File: r.Path, Old: r.Old, New: r.New})
		}
	}
	if err != nil {
		return written, fmt.Errorf("pod %s: %w", p.UID, err)
	}
	return written, nil
}

// Current are the CPU and memory values a cgroup holds now.
type Current struct {
	Shares      uint64 // cpu.shares, or cpu.weight on v2
	Quota       Quota
	MemoryLimit int64 // -1 unlimited
}

// ReadMemoryLimit reads p's memory limit alone, -1 = unlimited: what an
// OOM raise adds to, without ReadCurrent's CPU reads.
func (k *Kubepods) ReadMemoryLimit(p string) (int64, error) {
	d, err := k.layout.DirsAt(p)
	if err != nil {
		return 0, err
	}
	return readMemoryLimit(d)
}

// ReadCurrent reads what p's cgroup holds now (to check that the kubelet
// applied a resize, or to find drift).
func (k *Kubepods) ReadCurrent(p string) (Current, error) {
	d, err := k.layout.DirsAt(p)
	if err != nil {
		return Current{}, err
	}
	var c Current
	file := "cpu.shares"
	if d.Unified {
		file = "cpu.weight"
	}
	s, err := readFile(d.CPU, file)
	if err != nil {
		return Current{}, err
	}
	if c.Shares, err = parseUint([]byte(s)); err != nil {
		return Current{}, wrapParse(path.Join(d.CPU, file), []byte(s), err)
	}
	if c.Quota, err = readQuota(d); err != nil {
		return Current{}, err
	}
	if c.MemoryLimit, err = readMemoryLimit(d); err != nil {
		return Current{}, err
	}
	return c, nil
}
