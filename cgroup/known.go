//go:build linux

package cgroup

import (
	"sync"

	"golang.org/x/sys/unix"
)

// known.go: what the Kubepods tree last wrote to, or read from, the CPU
// placement files of its cgroups, so that a pool-wide refresh writes
// without reading every file first. A value is trusted only while the
// tree's Watch has an inotify watch on the file's directory: every write
// from then on, whoever makes it, raises an event, and the watch reads the
// file again through the record (read), which replaces the recorded value,
// before anything else sees the event. The tree's own reads and writes
// of a watched file go through a descriptor held open, under the record's
// lock together with the record's update, so no event is compared between
// a read or write and its record, and no descriptor is closed under one.
//
// Memory files are never recorded: a memory limit is only ever written
// after reading the usage it must stay above. A change the kernel makes by
// itself raises no event (v1 drops an offlined CPU from every cpuset.cpus):
// the callers' verified writes (the pools' sweep) are the net for it.

// knownFiles are the recorded files, indexed for knownDir.vals.
var knownFiles = [...]string{cpusFile, "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.max"}

func knownIndex(file string) int {
	for i, f := range knownFiles {
		if f == file {
			return i
		}
	}
	return -1
}

type knownVal struct {
	v   string
	set bool // v is the file's value
}

type knownDir struct {
	watched bool
	vals    [len(knownFiles)]knownVal
	// fds hold the files read or written, opened once for both (fd+1;
	// 0: none), so a read or write is one pread or pwrite. They are
	// closed when the directory loses its watch.
	fds [len(knownFiles)]int32
}

// close closes d's held descriptors.
func (d *knownDir) close() {
	for i, fd := range d.fds {
		if fd > 0 {
			_ = unix.Close(int(fd - 1))
			d.fds[i] = 0
		}
	}
}

// known is the record. The zero value records nothing until watching.
type known struct {
	mu   sync.Mutex
	dirs map[string]*knownDir
	buf  [4096]byte // reads, under mu
}

// dir returns dir's entry if it is watched; the caller holds mu.
func (k *known) dir(dir string) *knownDir {
	d := k.dirs[dir]
	if d == nil || !d.watched {
		return nil
	}
	return d
}

// get returns the recorded value of dir/file, if it is trusted.
func (k *known) get(dir, file string) (string, bool) {
	i := knownIndex(file)
	if i < 0 {
		return "", false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.dir(dir)
	if d == nil || !d.vals[i].set {
		return "", false
	}
	return d.vals[i].v, true
}

// forget drops the records of the files of dirs (a plan that failed).
func (k *known) forget(dirs ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, dir := range dirs {
		if d := k.dirs[dir]; d != nil {
			d.vals = [len(knownFiles)]knownVal{}
		}
	}
}

// watching says that dir now has an inotify watch (on) or lost it: a
// directory removed, or the watch ended. Either way its record and
// descriptors start afresh.
func (k *known) watching(dir string, on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if d := k.dirs[dir]; d != nil {
		d.close()
		delete(k.dirs, dir)
	}
	if !on {
		return
	}
	if k.dirs == nil {
		k.dirs = map[string]*knownDir{}
	}
	k.dirs[dir] = &knownDir{watched: true}
}

// watched says whether dir has a watch (so it existed when last seen).
func (k *known) watched(dir string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dir(dir) != nil
}

// clear drops every value (events were lost: an overflowed queue); stop
// also drops the watched directories and their descriptors (the watch
// ended).
func (k *known) clear(stop bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if stop {
		for _, d := range k.dirs {
			d.close()
		}
		clear(k.dirs)
		return
	}
	for _, d := range k.dirs {
		d.vals = [len(knownFiles)]knownVal{}
	}
}

// read reads dir/file, or returns its trusted record when trust is set. In
// a watched directory the value read is recorded.
func (k *known) read(dir, file string, trust bool) (string, error) {
	i := knownIndex(file)
	if k == nil || i < 0 {
		return readFile(dir, file)
	}
	k.mu.Lock()
	d := k.dir(dir)
	if d == nil {
		k.mu.Unlock()
		return readFile(dir, file)
	}
	defer k.mu.Unlock()
	if trust && d.vals[i].set {
		return d.vals[i].v, nil
	}
	d.vals[i] = knownVal{}
	fd, err := d.open(dir, file, i)
	if err != nil {
		return "", err
	}
	v, gone, err := readHeldFD(fd, dir, file, k.buf[:])
	if gone {
		d.drop(i)
	}
	if err != nil {
		return "", err
	}
	d.vals[i] = knownVal{v: v, set: true}
	return v, nil
}

// write writes dir/file and, in a watched directory, records the value.
func (k *known) write(dir, file, v string) error {
	i := knownIndex(file)
	if k == nil || i < 0 {
		return writeFile(dir, file, v)
	}
	k.mu.Lock()
	d := k.dir(dir)
	if d == nil {
		k.mu.Unlock()
		return writeFile(dir, file, v)
	}
	defer k.mu.Unlock()
	d.vals[i] = knownVal{}
	fd, err := d.open(dir, file, i)
	if err != nil {
		return err
	}
	gone, err := writeHeld(fd, dir, file, v)
	if gone {
		d.drop(i)
	}
	if err != nil {
		return err
	}
	d.vals[i] = knownVal{v: v, set: true}
	return nil
}

// open returns d's held descriptor of file i, opening it (read-write,
// confined like every open: file.go) the first time.
func (d *knownDir) open(dir, file string, i int) (int, error) {
	if d.fds[i] == 0 {
		h, err := openHeldFlags(dir, file, unix.O_RDWR)
		if err != nil {
			return -1, err
		}
		d.fds[i] = int32(h.fd + 1)
	}
	return int(d.fds[i] - 1), nil
}

// drop closes the descriptor of file i: its cgroup went away (ENODEV);
// the next read or write opens the path again.
func (d *knownDir) drop(i int) {
	if d.fds[i] > 0 {
		_ = unix.Close(int(d.fds[i] - 1))
		d.fds[i] = 0
	}
}
