//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	occgroups "github.com/opencontainers/cgroups"
	"k8s.io/utils/cpuset"
)

// v1Backend is the cgroup v1 / cgroupfs-driver backend: cpuset and cpu
// hierarchies mounted at <root>/cpuset and <root>/cpu, pods at
// <parent>/[burstable|besteffort/]pod<uid>. Every file goes through
// opencontainers/cgroups' confined ReadFile/WriteFile.
type v1Backend struct {
	root   string // /sys/fs/cgroup
	parent string // /kubepods
}

// newBackend picks the cgroup backend for this host.
func newBackend(cfg Config) (cgroupBackend, error) {
	return newV1Backend(cfg.CgroupRoot, cfg.CgroupParent)
}

func newV1Backend(root, parent string) (*v1Backend, error) {
	for _, h := range []string{"cpuset", "cpu"} {
		dir := filepath.Join(root, h, parent)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("cgroup v1 %s hierarchy: kubepods cgroup %s not found (set cgroupRoot/cgroupParent): %v", h, dir, err)
		}
	}
	return &v1Backend{root: root, parent: parent}, nil
}

func (b *v1Backend) PodPath(uid string, qos QoSClass) (string, error) {
	if !validUID(uid) {
		return "", fmt.Errorf("invalid pod UID %q", uid)
	}
	switch qos {
	case QoSGuaranteed:
		return path.Join(b.parent, "pod"+uid), nil
	case QoSBurstable, QoSBestEffort:
		return path.Join(b.parent, strings.ToLower(string(qos)), "pod"+uid), nil
	}
	return "", fmt.Errorf("unknown QoS class %q", qos)
}

func validUID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func (b *v1Backend) QoSPaths() []string {
	return []string{b.parent, path.Join(b.parent, "burstable"), path.Join(b.parent, "besteffort")}
}

func (b *v1Backend) CPUSetDir(p string) string { return filepath.Join(b.root, "cpuset", p) }

func (b *v1Backend) Children(p string) ([]string, error) {
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

func (b *v1Backend) ReadCPUs(p string) (cpuset.CPUSet, error) {
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

func (b *v1Backend) write(p string, set cpuset.CPUSet) error {
	if set.IsEmpty() {
		return fmt.Errorf("%w: %s/cpuset.cpus: refusing an empty cpuset", ErrCgroupWrite, b.CPUSetDir(p))
	}
	if err := occgroups.WriteFile(b.CPUSetDir(p), "cpuset.cpus", set.String()); err != nil {
		return fmt.Errorf("%w: %w", ErrCgroupWrite, err)
	}
	return nil
}

func (b *v1Backend) ApplyCPUs(levels [][]cpusWrite) (map[string]int, map[string]error) {
	written := map[string]int{}
	current := map[string]cpuset.CPUSet{}
	failed := map[string]error{}
	// Pass 1, top-down: widen to old ∪ new, so no child ever asks for a CPU
	// its parent lacks and no parent drops a CPU a child still uses.
	for _, level := range levels {
		for _, w := range level {
			cur, err := b.ReadCPUs(w.Path)
			if errors.Is(err, os.ErrNotExist) {
				continue // pod or container not created yet (or gone): the watcher catches up
			}
			if err != nil {
				failed[w.Path] = err
				continue
			}
			u := cur.Union(w.CPUs)
			if !u.Equals(cur) {
				if err := b.write(w.Path, u); err != nil {
					if !errors.Is(err, os.ErrNotExist) {
						failed[w.Path] = err
					}
					continue
				}
				written[w.Path]++
			}
			current[w.Path] = u
		}
	}
	// Pass 2, bottom-up: narrow to the wanted sets, children first.
	for i := len(levels) - 1; i >= 0; i-- {
		for _, w := range levels[i] {
			cur, ok := current[w.Path]
			if !ok || failed[w.Path] != nil || w.WidenOnly || cur.Equals(w.CPUs) {
				continue
			}
			if err := b.write(w.Path, w.CPUs); err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					failed[w.Path] = err
				}
				continue
			}
			written[w.Path]++
		}
	}
	return written, failed
}

func (b *v1Backend) SetUnlimitedQuota(p string) error {
	dir := filepath.Join(b.root, "cpu", p)
	if err := occgroups.WriteFile(dir, "cpu.cfs_quota_us", "-1"); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("%w: %w", ErrCgroupWrite, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if err := occgroups.WriteFile(filepath.Join(dir, e.Name()), "cpu.cfs_quota_us", "-1"); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%w: %w", ErrCgroupWrite, err))
		}
	}
	return errors.Join(errs...)
}
