//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

// file.go is the only file of this package that opens cgroup files. Every
// open goes through opencontainers/cgroups, which resolves paths below
// /sys/fs/cgroup with openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS) and, for
// any other path, checks with fstatfs that the file is on a cgroup
// filesystem. That is why deployments must mount the host cgroupfs at
// /sys/fs/cgroup: elsewhere only the fstatfs check applies.

// checkName rejects names that could walk out of the directory: the library
// cleans "/"+name, but a name with '/' has no business here at all.
func checkName(dir, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return &FileError{Op: "open", Path: dir, Value: name, Kind: ErrBadName}
	}
	if dir == "" {
		return &FileError{Op: "open", Path: name, Kind: ErrLayout, Err: errors.New("empty directory")}
	}
	return nil
}

// classify maps an error from the library or a syscall to a sentinel.
func classify(err error) error {
	var pe *os.PathError
	switch {
	case errors.Is(err, os.ErrNotExist), errors.Is(err, unix.ENODEV):
		// ENODEV: the fd outlived the cgroup (kernfs node removed).
		return ErrGone
	case errors.Is(err, unix.EXDEV):
		// openat2 RESOLVE_BENEATH/NO_XDEV: the path left the cgroup root.
		return ErrNotCgroupfs
	case errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == "not a cgroup file":
		// opencontainers/cgroups' unexported errNotCgroupfs, from its
		// fstatfs check; it has no exported sentinel to match.
		return ErrNotCgroupfs
	}
	return nil
}

func fileErr(op, path, value string, err error, fallback error) error {
	kind := classify(err)
	if kind == nil {
		kind = fallback
	}
	if kind == ErrGone && isDir(filepath.Dir(path)) {
		// The cgroup is there but the file is not: the controller is not
		// enabled for it (v2 subtree_control) or the kernel lacks the file.
		kind = ErrUnsupported
	}
	return &FileError{Op: op, Path: path, Value: value, Kind: kind, Err: unwrapPathErr(err)}
}

// unwrapPathErr keeps the errno and drops the library's path wrapping, since
// FileError names the path itself.
func unwrapPathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// openFile opens one cgroup file through opencontainers/cgroups, and
// beneath the mount that holds dir where the library's openat2 refused to
// cross into it. On cgroup v2 the library resolves every path beneath
// /sys/fs/cgroup with RESOLVE_NO_XDEV (one cgroup2 mount there, it
// assumes), but the agent's DaemonSet mounts the host's /sys/fs/cgroup
// read-only and /sys/fs/cgroup/kubepods read-write on top of it (the
// cgroup-v2 component): every kubepods file is then on another mount
// (EXDEV). The retry keeps the same confinement, beneath that mount's
// root: RESOLVE_BENEATH, NO_XDEV, NO_SYMLINKS and NO_MAGICLINKS, on a
// cgroup2 filesystem.
func openFile(dir, name string, flags int) (*os.File, error) {
	// Below a mount already met, open beneath it at once: the library's
	// attempt would fail again, and finding the mount costs a statx a
	// level (every write of the writer in the DaemonSet on v2).
	if root := mountRoots.holding(dir); root != nil {
		if f, err := openBeneath(root, dir, name, flags); err == nil || !errors.Is(err, unix.EXDEV) {
			return f, err
		}
	}
	f, err := cgroups.OpenFile(dir, name, flags)
	if err == nil || !errors.Is(err, unix.EXDEV) {
		return f, err
	}
	root, rerr := mountRoots.get(dir)
	if rerr != nil {
		return nil, errors.Join(err, rerr)
	}
	return openBeneath(root, dir, name, flags)
}

// openBeneath opens dir/name beneath the mount whose root is root, with
// the library's confinement; EXDEV when the path is not below it.
func openBeneath(root *os.File, dir, name string, flags int) (*os.File, error) {
	path := filepath.Join(dir, name)
	rel, err := filepath.Rel(root.Name(), path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, &os.PathError{Op: "openat2", Path: path, Err: unix.EXDEV}
	}
	fd, err := unix.Openat2(int(root.Fd()), rel, &unix.OpenHow{Flags: uint64(flags) | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// mountRoots are O_PATH descriptors of the cgroup2 mounts below
// /sys/fs/cgroup that openFile retries beneath, by mount point, opened
// once.
var mountRoots = rootCache{roots: map[string]*os.File{}}

type rootCache struct {
	mu    sync.Mutex
	roots map[string]*os.File
}

// holding returns the deepest mount already met that dir lies in, or nil.
func (c *rootCache) holding(dir string) *os.File {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *os.File
	for point, f := range c.roots {
		if (dir == point || strings.HasPrefix(dir, point+"/")) && (best == nil || len(point) > len(best.Name())) {
			best = f
		}
	}
	return best
}

// get returns the root of the mount that holds dir: its highest ancestor
// on the same mount (statx's mount ID), checked to be cgroup2.
func (c *rootCache) get(dir string) (*os.File, error) {
	mntID := func(p string) (uint64, error) {
		var st unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st); err != nil {
			return 0, err
		}
		if st.Mask&unix.STATX_MNT_ID == 0 {
			return 0, errors.New("statx: no mount ID (Linux 5.8+)")
		}
		return st.Mnt_id, nil
	}
	id, err := mntID(dir)
	if err != nil {
		return nil, err
	}
	point := filepath.Clean(dir)
	for point != "/" {
		parent := filepath.Dir(point)
		pid, err := mntID(parent)
		if err != nil || pid != id {
			break
		}
		point = parent
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.roots[point]; ok {
		return f, nil
	}
	fd, err := unix.Open(point, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: point, Err: err}
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: point, Err: errors.New("not a cgroup file")}
	}
	f := os.NewFile(uintptr(fd), point)
	c.roots[point] = f
	return f, nil
}

// maxValueFile bounds readFile: the files it reads hold one value or a
// short list (cpuset.cpus, cpu.max, memory.max, subtree_control, a few
// hundred bytes at most), so anything longer is not such a file and is
// refused rather than read into memory.
const maxValueFile = 64 << 10

// readFile reads a whole (small) cgroup file, trimmed of the trailing newline.
// It is the slow path (writer, layout); the hot path is heldFile.
func readFile(dir, name string) (string, error) {
	if err := checkName(dir, name); err != nil {
		return "", err
	}
	f, err := openFile(dir, name, unix.O_RDONLY)
	if err != nil {
		return "", fileErr("read", filepath.Join(dir, name), "", err, ErrRead)
	}
	defer f.Close()
	return readValue(f, filepath.Join(dir, name))
}

// readValue reads at most maxValueFile bytes of r (the file at path).
func readValue(r io.Reader, path string) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxValueFile+1))
	if err != nil {
		return "", fileErr("read", path, "", err, ErrRead)
	}
	if len(b) > maxValueFile {
		return "", &FileError{Op: "read", Path: path, Kind: ErrRead, Err: fmt.Errorf("longer than %d bytes: not a cgroup value file", maxValueFile)}
	}
	return strings.TrimSpace(string(b)), nil
}

// writeFile writes one value to one cgroup file. The file must exist: the
// library does not create files outside its test mode, and this package
// never creates cgroups it does not own.
func writeFile(dir, name, value string) error {
	if err := checkName(dir, name); err != nil {
		return err
	}
	f, err := openFile(dir, name, unix.O_WRONLY)
	if err != nil {
		return fileErr("write", filepath.Join(dir, name), value, err, ErrWrite)
	}
	defer f.Close()
	// One write (os.File retries EINTR): the kernel takes the value whole
	// or fails it.
	if _, err := f.Write([]byte(value)); err != nil {
		return fileErr("write", filepath.Join(dir, name), value, err, ErrWrite)
	}
	return nil
}

// heldFile is a cgroup file kept open for repeated pread at offset 0: one
// syscall per sample, no stat (cgroup file sizes are meaningless), no
// allocation. It holds the bare descriptor and the directory (shared with
// the Reader's other files) rather than an *os.File and its path: a node
// with 1,000 containers holds 6,000 to 9,000 of them.
type heldFile struct {
	fd        int // -1 when not open
	dir, name string
}

func openHeld(dir, name string) (heldFile, error) { return openHeldFlags(dir, name, unix.O_RDONLY) }

// openHeldFlags is openHeld with open flags (O_RDWR: the record's files,
// read and written through one descriptor, known.go).
func openHeldFlags(dir, name string, flags int) (heldFile, error) {
	if err := checkName(dir, name); err != nil {
		return heldFile{fd: -1}, err
	}
	// openFile resolves the name beneath the cgroupfs root (openat2); the
	// descriptor is then ours alone.
	f, err := openFile(dir, name, flags)
	if err != nil {
		return heldFile{fd: -1}, fileErr("open", filepath.Join(dir, name), "", err, ErrRead)
	}
	defer f.Close()
	sc, err := f.SyscallConn()
	if err != nil {
		return heldFile{fd: -1}, fileErr("open", f.Name(), "", err, ErrRead)
	}
	fd := -1
	cerr := sc.Control(func(raw uintptr) { fd, err = unix.FcntlInt(raw, unix.F_DUPFD_CLOEXEC, 0) })
	if err = errors.Join(cerr, err); err != nil {
		return heldFile{fd: -1}, fileErr("open", f.Name(), "", err, ErrRead)
	}
	return heldFile{fd: fd, dir: dir, name: name}, nil
}

// writeHeld writes value to a cgroup file held open for writing (one
// pwrite at offset 0, which cgroup files ignore); gone says the
// descriptor's cgroup was removed (ENODEV) and it is of no further use.
func writeHeld(fd int, dir, name, value string) (gone bool, err error) {
	for {
		_, err = unix.Pwrite(fd, []byte(value), 0)
		if err != unix.EINTR {
			break
		}
	}
	if err == nil {
		return false, nil
	}
	return errors.Is(err, unix.ENODEV), fileErr("write", filepath.Join(dir, name), value, err, ErrWrite)
}

// readHeldFD reads a cgroup file held open (one pread at offset 0 into
// buf), trimmed like readFile; gone as for writeHeld.
func readHeldFD(fd int, dir, name string, buf []byte) (v string, gone bool, err error) {
	h := heldFile{fd: fd, dir: dir, name: name}
	b, err := h.read(buf)
	if err != nil {
		return "", errors.Is(err, unix.ENODEV), err
	}
	return strings.TrimSpace(string(b)), false, nil
}

func (h *heldFile) path() string { return filepath.Join(h.dir, h.name) }

// read fills buf from offset 0 with a single pread. A file that fills the
// whole buffer may have been cut short, which is an error, not a silent
// truncation.
func (h *heldFile) read(buf []byte) ([]byte, error) {
	n, err := unix.Pread(h.fd, buf, 0)
	if err != nil {
		return nil, fileErr("read", h.path(), "", err, ErrRead)
	}
	if n == len(buf) {
		return nil, &FileError{Op: "read", Path: h.path(), Kind: ErrRead, Err: errors.New("file larger than read buffer")}
	}
	return buf[:n], nil
}

func (h *heldFile) open() bool { return h.fd >= 0 }

func (h *heldFile) close() error {
	if h.fd < 0 {
		return nil
	}
	err := unix.Close(h.fd)
	h.fd = -1
	return err
}

// subdirs lists the child cgroups (subdirectories) of dir, as full paths.
func subdirs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fileErr("read", dir, "", err, ErrRead)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}
