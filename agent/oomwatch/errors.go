package oomwatch

import "errors"

var (
	// ErrUnavailable: the backend asked for cannot run on this kernel or
	// without these privileges.
	ErrUnavailable = errors.New("oomwatch backend unavailable")
	// ErrNotCgroup: a directory given to Watch is not a memory cgroup
	// (no oom_kill counter, not on cgroupfs, or gone).
	ErrNotCgroup = errors.New("not a memory cgroup directory")
	// ErrParse: a counter file or kmsg record did not look as the kernel
	// documents it.
	ErrParse = errors.New("oomwatch parse")
	// ErrClosed: the Watcher was closed.
	ErrClosed = errors.New("oomwatch closed")
)
