//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	occgroups "github.com/opencontainers/cgroups"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/cgroup"
)

// cgroupPkg adapts cgroup.Layout and cgroup.Writer to cgroupBackend: it
// only translates paths and plans, all writes go through cgroup.Writer.
type cgroupPkg struct {
	layout *cgroup.Layout
	writer *cgroup.Writer
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
	return &cgroupPkg{layout: layout, writer: cgroup.NewWriter(cgroup.WriterOptions{})}, nil
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
	k := b.layout.KubepodsPath()
	if b.layout.Driver() == cgroup.DriverSystemd {
		base := strings.TrimSuffix(path.Base(k), ".slice")
		return []string{k, path.Join(k, base+"-burstable.slice"), path.Join(k, base+"-besteffort.slice")}
	}
	return []string{k, path.Join(k, "burstable"), path.Join(k, "besteffort")}
}

func (b *cgroupPkg) CPUSetDir(p string) string { return filepathOf(b.layout, p) }

func (b *cgroupPkg) Children(p string) ([]string, error) {
	entries, err := os.ReadDir(b.CPUSetDir(p))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, path.Join(p, e.Name()))
		}
	}
	return out, nil
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
	cpus := p.CPUs
	set := cgroup.Resources{CPUs: &cpus}
	if p.UnlimitedQuota {
		set.Quota = &cgroup.Quota{QuotaUs: -1, PeriodUs: defaultPeriodUs}
	}
	quotaOf := func(path string) (*cgroup.Quota, bool) {
		if p.RestoreQuota == nil {
			return nil, false
		}
		q, ok := p.RestoreQuota.Containers[path]
		if path == p.Path {
			q, ok = p.RestoreQuota.Pod, true
		}
		if !ok {
			return nil, false
		}
		return &cgroup.Quota{QuotaUs: q, PeriodUs: defaultPeriodUs}, true
	}
	podSet := set
	if q, ok := quotaOf(p.Path); ok {
		podSet.Quota = q
	}
	plan := cgroup.Plan{Pod: cgroup.Target{Name: "pod " + p.UID, Dirs: pd, Set: podSet}}
	for _, c := range p.Containers {
		cd, err := b.layout.DirsAt(c)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCgroupWrite, err)
		}
		if _, err := os.Stat(cd.CPU); errors.Is(err, os.ErrNotExist) {
			// cpuset-only child (or one that just exited): set its cpuset only.
			plan.Containers = append(plan.Containers, cgroup.Target{Name: path.Base(c), Dirs: cd, Set: cgroup.Resources{CPUs: &cpus}})
			continue
		}
		cset := set
		if q, ok := quotaOf(c); ok {
			cset.Quota = q
		}
		plan.Containers = append(plan.Containers, cgroup.Target{Name: path.Base(c), Dirs: cd, Set: cset})
	}
	recs, err := b.writer.Apply(plan)
	var written []string
	for _, r := range recs {
		if !r.Rollback && !r.DryRun {
			written = append(written, r.Path)
		}
	}
	if err != nil {
		if errors.Is(err, cgroup.ErrGone) {
			return written, nil // a container exited mid-write: its cgroup is gone, nothing to fix
		}
		return written, fmt.Errorf("%w: pod %s: %w", ErrCgroupWrite, p.UID, err)
	}
	return written, nil
}
