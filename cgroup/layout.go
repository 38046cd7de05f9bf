//go:build linux

package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Mode is how the host mounts cgroups.
type Mode int

const (
	ModeUnknown Mode = iota
	// ModeV1: only cgroup v1 hierarchies.
	ModeV1
	// ModeHybrid: controllers on v1, plus a cgroup2 tree (usually without
	// controllers) that still has PSI and core cpu.stat files.
	ModeHybrid
	// ModeUnified: one cgroup2 hierarchy holds every controller.
	ModeUnified
)

func (m Mode) String() string {
	switch m {
	case ModeV1:
		return "v1"
	case ModeHybrid:
		return "hybrid"
	case ModeUnified:
		return "v2"
	}
	return "unknown"
}

// Mount is where one hierarchy is mounted. Root is the hierarchy path shown
// at Point (the fourth mountinfo field), "/" for a host mount.
type Mount struct {
	Point string
	Root  string
}

// Mounts are the cgroup mounts that matter to this package. V1 maps a v1
// controller name (cpu, cpuacct, cpuset, memory) to its hierarchy; co-mounted
// controllers (cpu,cpuacct) share one Mount. Unified is the cgroup2 mount
// (Point "" when there is none).
type Mounts struct {
	Mode    Mode
	V1      map[string]Mount
	Unified Mount
}

// v1Controllers are the v1 controllers this package reads or writes.
var v1Controllers = []string{"cpu", "cpuacct", "cpuset", "memory"}

// ReadMounts reads <procRoot>/self/mountinfo (procRoot is normally /proc).
func ReadMounts(procRoot string) (Mounts, error) {
	p := filepath.Join(procRoot, "self", "mountinfo")
	f, err := os.Open(p)
	if err != nil {
		return Mounts{}, fmt.Errorf("%w: read %s: %w", ErrLayout, p, err)
	}
	defer f.Close()
	m, err := ParseMountinfo(f)
	if err != nil {
		return Mounts{}, fmt.Errorf("%s: %w", p, err)
	}
	m.Unified = hostRoot(m.Unified)
	return m, nil
}

// hostRoot resolves the root of a cgroup2 mount made outside this
// process's cgroup namespace. On cgroup v2, containerd gives a container
// its own cgroup namespace (runc's default there), so the agent's hostPath
// mount of the host's /sys/fs/cgroup shows in mountinfo with a root
// relative to the container's own cgroup, "/../../../.." for a container
// four levels down (kubepods/burstable/pod<uid>/<id>), and no kubepods
// path would lie below it. Only the hierarchy's root cgroup lacks
// cgroup.type, so a mount point without it is the root: "/". Any other
// mount keeps its root (and paths outside it stay an error).
func hostRoot(mnt Mount) Mount {
	if mnt.Point == "" || (mnt.Root != "/.." && !strings.HasPrefix(mnt.Root, "/../")) {
		return mnt
	}
	if _, err := os.Stat(filepath.Join(mnt.Point, "cgroup.type")); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(mnt.Point, "cgroup.controllers")); err == nil {
			mnt.Root = "/"
		}
	}
	return mnt
}

// ParseMountinfo finds the cgroup mounts in mountinfo(5) text and decides
// the mode: v1 controllers and a cgroup2 mount make a hybrid host, cgroup2
// alone a unified one. A v1 hierarchy without any of the controllers above
// (name=systemd) does not count.
func ParseMountinfo(r io.Reader) (Mounts, error) {
	m := Mounts{V1: map[string]Mount{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		pf := strings.Fields(pre)
		qf := strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			return Mounts{}, fmt.Errorf("%w: malformed mountinfo line %q", ErrLayout, line)
		}
		mnt := Mount{Point: unescapeMount(pf[4]), Root: unescapeMount(pf[3])}
		switch qf[0] {
		case "cgroup2":
			if m.Unified.Point == "" {
				m.Unified = mnt
			}
		case "cgroup":
			for _, opt := range strings.Split(qf[2], ",") {
				for _, c := range v1Controllers {
					if opt == c {
						if _, dup := m.V1[c]; !dup {
							m.V1[c] = mnt
						}
					}
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Mounts{}, fmt.Errorf("%w: mountinfo: %w", ErrLayout, err)
	}
	switch {
	case len(m.V1) > 0 && m.Unified.Point != "":
		m.Mode = ModeHybrid
	case len(m.V1) > 0:
		m.Mode = ModeV1
	case m.Unified.Point != "":
		m.Mode = ModeUnified
	default:
		return Mounts{}, fmt.Errorf("%w: no cgroup mounts in mountinfo", ErrLayout)
	}
	return m, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			o := s[i+1 : i+4]
			if len(o) == 3 && o[0] >= '0' && o[0] <= '3' && o[1] >= '0' && o[1] <= '7' && o[2] >= '0' && o[2] <= '7' {
				b.WriteByte((o[0]-'0')<<6 | (o[1]-'0')<<3 | (o[2] - '0'))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Driver is the kubelet's cgroup driver.
type Driver string

const (
	// DriverCgroupfs: kubepods/burstable/pod<uid>/<container>.
	DriverCgroupfs Driver = "cgroupfs"
	// DriverSystemd: kubepods.slice/kubepods-burstable.slice/
	// kubepods-burstable-pod<uid_with_underscores>.slice/<runtime>-<id>.scope.
	DriverSystemd Driver = "systemd"
)

// QoS is a pod's QoS class, spelled as in the Kubernetes API.
type QoS string

const (
	QoSGuaranteed QoS = "Guaranteed" // pod directly under kubepods
	QoSBurstable  QoS = "Burstable"
	QoSBestEffort QoS = "BestEffort"
)

// LayoutConfig overrides detection for unusual nodes. Zero fields are
// detected (Driver, KubepodsPath) or derived from the container ID scheme
// (ContainerFormat).
type LayoutConfig struct {
	// Driver is the kubelet cgroup driver.
	Driver Driver
	// KubepodsPath is the kubepods cgroup as a path from each hierarchy's
	// root, e.g. "/kubepods", "/kubepods.slice" or, with a kubelet
	// --cgroup-root, "/k8s/kubepods".
	KubepodsPath string
	// ContainerFormat names a container dir from its bare ID with one %s,
	// e.g. "cri-containerd-%s.scope", for runtimes not known here.
	ContainerFormat string
}

// Layout resolves pod and container directories on one node.
type Layout struct {
	mounts          Mounts
	driver          Driver
	kubepods        string
	containerFormat string
}

// NewLayout validates cfg and fills what it leaves open by looking for the
// kubepods cgroup in the hierarchies of m (systemd's kubepods.slice first).
func NewLayout(m Mounts, cfg LayoutConfig) (*Layout, error) {
	l := &Layout{mounts: m, driver: cfg.Driver, kubepods: cfg.KubepodsPath, containerFormat: cfg.ContainerFormat}
	switch l.driver {
	case "", DriverCgroupfs, DriverSystemd:
	default:
		return nil, fmt.Errorf("%w: unknown cgroup driver %q (want cgroupfs or systemd)", ErrLayout, l.driver)
	}
	if l.containerFormat != "" && (strings.Count(l.containerFormat, "%s") != 1 || strings.Count(l.containerFormat, "%") != 1 || strings.Contains(l.containerFormat, "/")) {
		return nil, fmt.Errorf("%w: container format %q must contain exactly one %%s and no '/' or other verbs", ErrLayout, l.containerFormat)
	}
	if l.kubepods != "" {
		if !path.IsAbs(l.kubepods) || path.Clean(l.kubepods) != l.kubepods || l.kubepods == "/" {
			return nil, fmt.Errorf("%w: kubepods path %q must be absolute and clean", ErrLayout, l.kubepods)
		}
		if l.driver == "" {
			l.driver = DriverCgroupfs
			if strings.HasSuffix(l.kubepods, ".slice") {
				l.driver = DriverSystemd
			}
		}
		return l, nil
	}
	if l.driver == "" || l.kubepods == "" {
		for _, c := range []struct {
			d Driver
			p string
		}{{DriverSystemd, "/kubepods.slice"}, {DriverCgroupfs, "/kubepods"}} {
			if l.driver != "" && l.driver != c.d {
				continue
			}
			if dir, err := l.dir(l.referenceMount(), c.p); err == nil && isDir(dir) {
				l.driver, l.kubepods = c.d, c.p
				return l, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: no kubepods cgroup found below %s (driver %q); set KubepodsPath", ErrLayout, l.referenceMount().Point, cfg.Driver)
}

// Mounts returns the mounts the layout resolves against.
func (l *Layout) Mounts() Mounts { return l.mounts }

// Driver returns the (detected or configured) kubelet cgroup driver.
func (l *Layout) Driver() Driver { return l.driver }

// KubepodsPath returns the kubepods cgroup path from each hierarchy root.
func (l *Layout) KubepodsPath() string { return l.kubepods }

// referenceMount is the hierarchy detection looks in: the unified tree on v2,
// else the cpu hierarchy (every runtime creates its cgroups there).
func (l *Layout) referenceMount() Mount {
	if l.mounts.Mode == ModeUnified {
		return l.mounts.Unified
	}
	return l.mounts.V1["cpu"]
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// QoSPath is the path of the QoS-class cgroup pods of qos live in:
// kubepods itself for Guaranteed, kubepods/burstable (or
// kubepods-burstable.slice) and kubepods/besteffort otherwise.
func (l *Layout) QoSPath(qos QoS) (string, error) {
	switch qos {
	case QoSGuaranteed:
		return l.kubepods, nil
	case QoSBurstable, QoSBestEffort:
		q := strings.ToLower(string(qos))
		if l.driver == DriverSystemd {
			return path.Join(l.kubepods, strings.TrimSuffix(path.Base(l.kubepods), ".slice")+"-"+q+".slice"), nil
		}
		return path.Join(l.kubepods, q), nil
	}
	return "", fmt.Errorf("%w: unknown QoS class %q", ErrLayout, qos)
}

// PodPath is the pod cgroup's path from the hierarchy root.
func (l *Layout) PodPath(uid string, qos QoS) (string, error) {
	if !validToken(uid) {
		return "", fmt.Errorf("%w: invalid pod UID %q", ErrLayout, uid)
	}
	base := l.kubepods
	if l.driver == DriverSystemd {
		prefix := strings.TrimSuffix(path.Base(base), ".slice")
		switch qos {
		case QoSGuaranteed:
		case QoSBurstable, QoSBestEffort:
			prefix += "-" + strings.ToLower(string(qos))
			base = path.Join(base, prefix+".slice")
		default:
			return "", fmt.Errorf("%w: unknown QoS class %q", ErrLayout, qos)
		}
		return path.Join(base, prefix+"-pod"+strings.ReplaceAll(uid, "-", "_")+".slice"), nil
	}
	switch qos {
	case QoSGuaranteed:
	case QoSBurstable, QoSBestEffort:
		base = path.Join(base, strings.ToLower(string(qos)))
	default:
		return "", fmt.Errorf("%w: unknown QoS class %q", ErrLayout, qos)
	}
	return path.Join(base, "pod"+uid), nil
}

// ContainerPath is the container cgroup's path from the hierarchy root.
// containerID is the pod status form "<runtime>://<id>".
func (l *Layout) ContainerPath(uid string, qos QoS, containerID string) (string, error) {
	pod, err := l.PodPath(uid, qos)
	if err != nil {
		return "", err
	}
	name, err := l.containerName(containerID)
	if err != nil {
		return "", err
	}
	return path.Join(pod, name), nil
}

func (l *Layout) containerName(containerID string) (string, error) {
	scheme, id, ok := strings.Cut(containerID, "://")
	if !ok {
		scheme, id = "", containerID
	}
	if !validToken(id) || strings.Contains(id, "-") {
		return "", fmt.Errorf("%w: invalid container ID %q", ErrLayout, containerID)
	}
	if l.containerFormat != "" {
		return fmt.Sprintf(l.containerFormat, id), nil
	}
	systemd := l.driver == DriverSystemd
	switch scheme {
	case "containerd":
		if systemd {
			return "cri-containerd-" + id + ".scope", nil
		}
		return id, nil
	case "cri-o":
		if systemd {
			return "crio-" + id + ".scope", nil
		}
		return "crio-" + id, nil
	case "docker":
		if systemd {
			return "docker-" + id + ".scope", nil
		}
		return id, nil
	}
	return "", fmt.Errorf("%w: container ID %q: unknown runtime %q (want containerd://, cri-o:// or docker://, or set ContainerFormat)", ErrLayout, containerID, scheme)
}

// validToken accepts what pod UIDs and container IDs are made of, and
// nothing that could change a path.
func validToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Dirs are one cgroup's directories, per controller. On a unified host all
// of them are the same v2 directory. PSI is the directory with the
// *.pressure files: the v2 directory, also on hybrid hosts (empty when the
// host has no cgroup2 mount).
type Dirs struct {
	Unified bool
	CPU     string
	CPUAcct string
	CPUSet  string
	Memory  string
	PSI     string
}

// DirsAt returns the directories of the cgroup at rel (a path from each
// hierarchy root, as PodPath returns).
func (l *Layout) DirsAt(rel string) (Dirs, error) { return DirsAt(l.mounts, rel) }

// PodDirs resolves a pod's directories.
func (l *Layout) PodDirs(uid string, qos QoS) (Dirs, error) {
	rel, err := l.PodPath(uid, qos)
	if err != nil {
		return Dirs{}, err
	}
	return DirsAt(l.mounts, rel)
}

// ContainerDirs resolves a container's directories.
func (l *Layout) ContainerDirs(uid string, qos QoS, containerID string) (Dirs, error) {
	rel, err := l.ContainerPath(uid, qos, containerID)
	if err != nil {
		return Dirs{}, err
	}
	return DirsAt(l.mounts, rel)
}

// DirsAt maps a hierarchy path to per-controller directories under m.
func DirsAt(m Mounts, rel string) (Dirs, error) {
	if !path.IsAbs(rel) || path.Clean(rel) != rel {
		return Dirs{}, fmt.Errorf("%w: cgroup path %q must be absolute and clean", ErrLayout, rel)
	}
	if m.Mode == ModeUnified {
		d, err := (&Layout{}).dir(m.Unified, rel)
		if err != nil {
			return Dirs{}, err
		}
		return Dirs{Unified: true, CPU: d, CPUAcct: d, CPUSet: d, Memory: d, PSI: d}, nil
	}
	var d Dirs
	var prev Mount
	var prevDir string
	for _, c := range []struct {
		name string
		dst  *string
	}{{"cpu", &d.CPU}, {"cpuacct", &d.CPUAcct}, {"cpuset", &d.CPUSet}, {"memory", &d.Memory}} {
		mnt, ok := m.V1[c.name]
		if !ok {
			return Dirs{}, fmt.Errorf("%w: no v1 %s hierarchy mounted", ErrLayout, c.name)
		}
		if mnt == prev {
			*c.dst = prevDir // co-mounted (cpu,cpuacct): one string for both, as the agent keeps them per container
			continue
		}
		dir, err := (&Layout{}).dir(mnt, rel)
		if err != nil {
			return Dirs{}, err
		}
		*c.dst, prev, prevDir = dir, mnt, dir
	}
	if m.Unified.Point != "" {
		if dir, err := (&Layout{}).dir(m.Unified, rel); err == nil {
			d.PSI = dir
		}
	}
	return d, nil
}

// dir maps a hierarchy path to a directory below mount point mnt.
func (*Layout) dir(mnt Mount, rel string) (string, error) {
	if mnt.Point == "" {
		return "", fmt.Errorf("%w: hierarchy not mounted", ErrLayout)
	}
	root := mnt.Root
	if root == "" {
		root = "/"
	}
	if root != "/" {
		if rel != root && !strings.HasPrefix(rel, root+"/") {
			if strings.HasPrefix(root, "/..") {
				return "", fmt.Errorf("%w: %s is outside the mounted part %s of the hierarchy at %s: the mount's root lies outside this process's cgroup namespace and is not the hierarchy's root (mount the host's /sys/fs/cgroup itself)", ErrLayout, rel, root, mnt.Point)
			}
			return "", fmt.Errorf("%w: %s is outside the mounted part %s of the hierarchy at %s", ErrLayout, rel, root, mnt.Point)
		}
		rel = strings.TrimPrefix(rel, root)
	}
	return filepath.Join(mnt.Point, rel), nil
}

// ParsePodDir returns the pod UID of a pod cgroup directory name, for the
// cgroupfs driver ("pod<uid>") and the systemd one
// ("kubepods-burstable-pod<uid_with_underscores>.slice"); ok is false for
// any other name.
func ParsePodDir(name string) (uid string, ok bool) {
	if uid, ok := strings.CutPrefix(name, "pod"); ok && uid != "" && !strings.Contains(uid, ".") {
		if !validToken(uid) {
			return "", false
		}
		return uid, true
	}
	if !strings.HasSuffix(name, ".slice") {
		return "", false
	}
	i := strings.LastIndex(name, "-pod")
	if i < 0 {
		return "", false
	}
	uid = strings.TrimSuffix(name[i+len("-pod"):], ".slice")
	if uid == "" || strings.ContainsAny(uid, "-.") {
		return "", false
	}
	uid = strings.ReplaceAll(uid, "_", "-")
	if !validToken(uid) {
		return "", false
	}
	return uid, true
}
