//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	occgroups "github.com/opencontainers/cgroups"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/cgroup"
)

// cgroupPkg adapts cgroup.Layout and cgroup.Writer to cgroupBackend: it
// only translates paths and plans, all writes go through cgroup.Writer.
type cgroupPkg struct {
	layout *cgroup.Layout
	writer *cgroup.Writer

	mu   sync.Mutex
	kids map[string][]string // cpuset dir -> child cgroup paths (KnownChildren)
}

// newBackend resolves the node's cgroup layout below cfg.CgroupRoot.
func newBackend(cfg Config) (cgroupBackend, error) {
	mounts, err := cgroup.ReadMounts(cfg.ProcRoot)
	if err != nil {
		return nil, err
	}
	if err := mountsBelow(mounts, cfg.CgroupRoot); err != nil {
		return nil, err
	}
	layout, err := cgroup.NewLayout(mounts, cgroup.LayoutConfig{KubepodsPath: cfg.CgroupParent})
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepathOf(layout, cfg.CgroupParent)); err != nil {
		return nil, fmt.Errorf("%w: kubepods cgroup %s: %v (set cgroupRoot/cgroupParent)", ErrInvalidConfig, cfg.CgroupParent, err)
	}
	if mounts.Mode == cgroup.ModeUnified {
		if err := v2ControllersEnabled(filepathOf(layout, cfg.CgroupParent)); err != nil {
			return nil, err
		}
	}
	return &cgroupPkg{layout: layout, writer: cgroup.NewWriter(cgroup.WriterOptions{}), kids: map[string][]string{}}, nil
}

// v2ControllersEnabled checks that kubepods hands the cpu and cpuset
// controllers to its children (the QoS and Guaranteed pod cgroups): on v2
// a cgroup has cpuset.cpus and cpu.max only when its parent enables them,
// and without them every write would fail on a missing file.
func v2ControllersEnabled(kubepods string) error {
	file := path.Join(kubepods, "cgroup.subtree_control")
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	enabled := strings.Fields(string(b))
	for _, c := range []string{"cpu", "cpuset"} {
		if !slices.Contains(enabled, c) {
			return fmt.Errorf("%w: %s is %q: the %s controller is not enabled for the pods below kubepods", ErrInvalidConfig, file, strings.TrimSpace(string(b)), c)
		}
	}
	return nil
}

// mountsBelow checks that the hierarchies the agent writes are mounted
// under root: a cgroupfs mounted elsewhere (say an unconfined copy) is a
// configuration error, not something to write through.
func mountsBelow(m cgroup.Mounts, root string) error {
	check := func(name string, mnt cgroup.Mount) error {
		if mnt.Point != root && !strings.HasPrefix(mnt.Point, root+"/") {
			return fmt.Errorf("%w: cgroup %s hierarchy is mounted at %s, outside cgroupRoot %s", ErrInvalidConfig, name, mnt.Point, root)
		}
		return nil
	}
	if m.Mode == cgroup.ModeUnified {
		return check("unified", m.Unified)
	}
	for _, c := range []string{"cpu", "cpuset"} {
		mnt, ok := m.V1[c]
		if !ok {
			return fmt.Errorf("%w: no cgroup v1 %s hierarchy mounted", ErrInvalidConfig, c)
		}
		if err := check(c, mnt); err != nil {
			return err
		}
	}
	return nil
}

func filepathOf(l *cgroup.Layout, rel string) string {
	d, err := l.DirsAt(rel)
	if err != nil {
		return ""
	}
	return d.CPUSet
}

func (b *cgroupPkg) PodPath(uid string, qos QoSClass) (string, error) {
	return b.layout.PodPath(uid, cgroup.QoS(qos))
}

func (b *cgroupPkg) ContainerPath(uid string, qos QoSClass, containerID string) (string, error) {
	return b.layout.ContainerPath(uid, cgroup.QoS(qos), containerID)
}

func (b *cgroupPkg) QoSPaths() []string {
	var out []string
	for _, q := range []cgroup.QoS{cgroup.QoSGuaranteed, cgroup.QoSBurstable, cgroup.QoSBestEffort} {
		if p, err := b.layout.QoSPath(q); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func (b *cgroupPkg) CPUSetDir(p string) string { return filepathOf(b.layout, p) }

func (b *cgroupPkg) Children(p string) ([]string, error) {
	dir := b.CPUSetDir(p)
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.ForgetChildren(dir)
		return nil, err
	}
	out := []string{}
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, path.Join(p, e.Name()))
		}
	}
	b.mu.Lock()
	b.kids[dir] = out
	b.mu.Unlock()
	return slices.Clone(out), nil
}

// KnownChildren serves a listing from the cache. A listing gone stale
// between a mkdir and its inotify event is safe: the event queues the pod
// again, which is then listed afresh; meanwhile, on v1 the writer refuses a
// narrowing with an unplanned child (ApplyPod then lists afresh), and on v2
// the unwritten child inherits the pod's CPUs.
func (b *cgroupPkg) KnownChildren(p string) ([]string, error) {
	b.mu.Lock()
	kids, ok := b.kids[b.CPUSetDir(p)]
	b.mu.Unlock()
	if ok {
		return slices.Clone(kids), nil
	}
	return b.Children(p)
}

func (b *cgroupPkg) ForgetChildren(dir string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if dir == "" {
		clear(b.kids)
		return
	}
	delete(b.kids, dir)
}

func (b *cgroupPkg) MayRun(p string) (bool, error) {
	_, err := os.Stat(b.CPUSetDir(p))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// ReadCPUs reads cpuset.cpus through opencontainers/cgroups' confined
// reader (the cgroup package exports no single-file cpuset reader yet).
func (b *cgroupPkg) ReadCPUs(p string) (cpuset.CPUSet, error) {
	dir := b.CPUSetDir(p)
	s, err := occgroups.ReadFile(dir, "cpuset.cpus")
	if err != nil {
		return cpuset.New(), err
	}
	set, err := ParseCPUList(strings.TrimSpace(s))
	if err != nil {
		return cpuset.New(), fmt.Errorf("%s/cpuset.cpus: %w", dir, err)
	}
	return set, nil
}

func (b *cgroupPkg) WidenCPUs(p string, cpus cpuset.CPUSet) (int, error) {
	cur, err := b.ReadCPUs(p)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrCgroupWrite, err)
	}
	if cur.IsEmpty() && b.layout.Mounts().Mode == cgroup.ModeUnified {
		// An empty v2 cpuset.cpus asks for nothing: the cgroup has all of
		// its parent's CPUs. Writing the union would narrow it to the
		// targets, confining the pods the agent leaves alone.
		return 0, nil
	}
	u := cur.Union(cpus)
	if u.Equals(cur) {
		return 0, nil
	}
	d, err := b.layout.DirsAt(p)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrCgroupWrite, err)
	}
	recs, err := b.writer.Apply(cgroup.Plan{Pod: cgroup.Target{Name: p, Dirs: d, Set: cgroup.Resources{CPUs: &u}}})
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrCgroupWrite, err)
	}
	return len(recs), nil
}

// defaultPeriodUs is the CFS period the kubelet uses; quota -1 ignores it
// but the writer validates a period with every quota.
const defaultPeriodUs = 100000

func (b *cgroupPkg) ApplyPod(p podCgroupPlan) ([]string, error) {
	pd, err := b.layout.DirsAt(p.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCgroupWrite, err)
	}
	if _, err := os.Stat(pd.CPUSet); errors.Is(err, os.ErrNotExist) {
		return nil, nil // the pod cgroup is not created yet: the watcher queues the pod when it is
	}
	var written []string
	for attempt := 0; ; attempt++ {
		plans, err := b.plans(p, pd)
		if err != nil {
			return written, err
		}
		for _, plan := range plans {
			var recs []cgroup.Write
			recs, err = b.writer.Apply(plan)
			for _, r := range recs {
				if !r.Rollback && !r.DryRun {
					written = append(written, r.Path)
				}
			}
			if err != nil {
				break
			}
		}
		if err == nil {
			return written, nil
		}
		// A container that started or exited between listing and writing
		// (the writer refuses an unplanned child, or finds a cgroup gone,
		// and rolls back): list again and retry once.
		if attempt == 0 && (errors.Is(err, cgroup.ErrRefused) || errors.Is(err, cgroup.ErrGone)) {
			if kids, lerr := b.Children(p.Path); lerr == nil {
				p.Containers = kids
				continue
			}
		}
		if errors.Is(err, cgroup.ErrGone) {
			if _, serr := os.Stat(pd.CPUSet); errors.Is(serr, os.ErrNotExist) {
				return written, nil // the whole pod is gone: nothing to fix
			}
		}
		return written, fmt.Errorf("%w: pod %s: %w", ErrCgroupWrite, p.UID, err)
	}
}

// plans turns a pod plan into cgroup.Plans: one setting the cpuset on the
// pod and every child and the quota where one is asked for. When a child
// has no cpu cgroup (yet: runtimes create the hierarchies one by one), the
// writer could not read its quota, so the quota goes in a second plan over
// the pod and the children that have one.
func (b *cgroupPkg) plans(p podCgroupPlan, pd cgroup.Dirs) ([]cgroup.Plan, error) {
	cpus := p.CPUs
	quotaOf := func(path string) *cgroup.Quota {
		switch {
		case p.UnlimitedQuota:
			return &cgroup.Quota{QuotaUs: -1, PeriodUs: defaultPeriodUs}
		case p.RestoreQuota == nil:
			return nil
		case path == p.Path:
			return &cgroup.Quota{QuotaUs: p.RestoreQuota.Pod, PeriodUs: defaultPeriodUs}
		}
		if q, ok := p.RestoreQuota.Containers[path]; ok {
			return &cgroup.Quota{QuotaUs: q, PeriodUs: defaultPeriodUs}
		}
		return nil
	}
	withQuota := p.UnlimitedQuota || p.RestoreQuota != nil
	one := cgroup.Plan{Pod: cgroup.Target{Name: "pod " + p.UID, Dirs: pd, Set: cgroup.Resources{CPUs: &cpus, Quota: quotaOf(p.Path)}}}
	cpusOnly := cgroup.Plan{Pod: cgroup.Target{Name: "pod " + p.UID, Dirs: pd, Set: cgroup.Resources{CPUs: &cpus}}}
	quotaOnly := cgroup.Plan{Pod: cgroup.Target{Name: "pod " + p.UID, Dirs: pd, Set: cgroup.Resources{Quota: quotaOf(p.Path)}}}
	split := false
	for _, c := range p.Containers {
		cd, err := b.layout.DirsAt(c)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCgroupWrite, err)
		}
		name := path.Base(c)
		q := quotaOf(c)
		one.Containers = append(one.Containers, cgroup.Target{Name: name, Dirs: cd, Set: cgroup.Resources{CPUs: &cpus, Quota: q}})
		cpusOnly.Containers = append(cpusOnly.Containers, cgroup.Target{Name: name, Dirs: cd, Set: cgroup.Resources{CPUs: &cpus}})
		if !withQuota {
			continue
		}
		if _, err := os.Stat(cd.CPU); errors.Is(err, os.ErrNotExist) {
			split = true // a cpuset-only child
			continue
		}
		quotaOnly.Containers = append(quotaOnly.Containers, cgroup.Target{Name: name, Dirs: cd, Set: cgroup.Resources{Quota: q}})
	}
	if split {
		return []cgroup.Plan{cpusOnly, quotaOnly}, nil
	}
	return []cgroup.Plan{one}, nil
}
