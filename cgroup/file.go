//go:build linux

package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

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

// readFile reads a whole (small) cgroup file, trimmed of the trailing newline.
// It is the slow path (writer, layout); the hot path is heldFile.
func readFile(dir, name string) (string, error) {
	if err := checkName(dir, name); err != nil {
		return "", err
	}
	s, err := cgroups.ReadFile(dir, name)
	if err != nil {
		return "", fileErr("read", filepath.Join(dir, name), "", err, ErrRead)
	}
	return strings.TrimSpace(s), nil
}

// writeFile writes one value to one cgroup file. The file must exist: the
// library does not create files outside its test mode, and this package
// never creates cgroups it does not own.
func writeFile(dir, name, value string) error {
	if err := checkName(dir, name); err != nil {
		return err
	}
	if err := cgroups.WriteFile(dir, name, value); err != nil {
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
	// cgroups.OpenFile resolves the name beneath the cgroupfs root
	// (openat2); the descriptor is then ours alone.
	f, err := cgroups.OpenFile(dir, name, flags)
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
