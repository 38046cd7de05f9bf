package cgroup

import (
	"errors"
	"fmt"
)

// Sentinels. Every error returned by this package wraps exactly one of them
// (test with errors.Is), and names the file and the value involved.
var (
	// ErrGone: the cgroup does not exist (any more), typically because the
	// container just exited. Callers drop the target.
	ErrGone = errors.New("cgroup gone")
	// ErrNotCgroupfs: the path resolved outside the cgroup filesystem.
	ErrNotCgroupfs = errors.New("not on cgroupfs")
	// ErrBadName: a file name containing '/' or otherwise not a plain name.
	ErrBadName = errors.New("bad cgroup file name")
	// ErrParse: a cgroup file had contents this package cannot parse.
	ErrParse = errors.New("cannot parse cgroup file")
	// ErrRefused: a safety rule refused a value before anything was written.
	ErrRefused = errors.New("refused by safety rule")
	// ErrWrite: the kernel rejected a write (the errno is wrapped too).
	ErrWrite = errors.New("cgroup write failed")
	// ErrRead: reading a cgroup file failed for another reason than ErrGone.
	ErrRead = errors.New("cgroup read failed")
	// ErrLayout: pod/container directories could not be resolved, or the
	// layout configuration is invalid.
	ErrLayout = errors.New("cgroup layout")
	// ErrNotReady: a pod or container cgroup exists in some hierarchies but
	// not yet in every one a plan needs (the kubelet and the runtimes create
	// one hierarchy at a time). Callers retry shortly; it is not a failure.
	ErrNotReady = errors.New("cgroup not created yet in every hierarchy")
	// ErrUnsupported: the operation or file does not exist here: memory.high
	// on cgroup v1, or a file missing from a cgroup that exists (controller
	// not enabled in the parent's v2 subtree_control, or an older kernel).
	ErrUnsupported = errors.New("unsupported in this cgroup mode")
)

// FileError is a failed read or write of one cgroup file.
type FileError struct {
	Op    string // "open", "read", "write", "parse"
	Path  string // directory joined with file name
	Value string // value written, or the offending contents (truncated)
	Kind  error  // one of the package sentinels
	Err   error  // underlying error (errno), may be nil
}

func (e *FileError) Error() string {
	msg := fmt.Sprintf("cgroup: %s %s", e.Op, e.Path)
	if e.Value != "" {
		msg += fmt.Sprintf(" value %q", e.Value)
	}
	msg += ": " + e.Kind.Error()
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap lets errors.Is match both the sentinel and the errno.
func (e *FileError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Refusal is a value a safety rule refused; nothing was written.
type Refusal struct {
	Path   string // cgroup file the value was meant for
	Value  string // refused value
	Reason string // which rule, with the numbers that broke it
}

func (e *Refusal) Error() string {
	return fmt.Sprintf("cgroup: refused %q for %s: %s", e.Value, e.Path, e.Reason)
}

// Unwrap returns ErrRefused.
func (e *Refusal) Unwrap() error { return ErrRefused }

func parseErr(path string, contents []byte, why string) error {
	const max = 64
	v := string(contents)
	if len(v) > max {
		v = v[:max] + "…"
	}
	return &FileError{Op: "parse", Path: path, Value: v, Kind: ErrParse, Err: errors.New(why)}
}
