//go:build linux

package cgroup

import (
	"sync"

	"golang.org/x/sys/unix"

	"github.com/cgpilot/cgpilot/internal/cpulist"
)

// known.go: what the Kubepods tree last wrote to, or read from, the CPU
// placement files of its cgroups, so that a pool-wide refresh writes
// without reading every file first. A value is trusted only while the
// tree's Watch has an inotify watch on the file's directory: every write
// from then on, whoever makes it, raises an event, and the watch compares
// the value it reads back with the record before anything else sees the
// event, dropping a record that differs. A read or write under way marks
// its record pending; an event seen meanwhile drops it, so a value is
// recorded only when no write can have slipped in between unseen.
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
	v       string
	gen     uint64 // of the read or write that set, or is setting, v
	set     bool   // v is the file's value
	pending bool   // a read or write is under way
}

type knownDir struct {
	watched bool
	vals    [len(knownFiles)]knownVal
	// fds hold the files written, opened once (fd+1; 0: none), so a
	// write is one pwrite. They are closed when the directory loses its
	// watch, and never used outside known.mu: a descriptor closed there
	// cannot be reused under a write.
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
	gen  uint64
}

// get returns the recorded value of dir/file, if it is trusted.
func (k *known) get(dir, file string) (string, bool) {
	i := knownIndex(file)
	if i < 0 {
		return "", false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.dirs[dir]
	if d == nil || !d.watched {
		return "", false
	}
	v := d.vals[i]
	if !v.set || v.pending {
		return "", false
	}
	return v.v, true
}

// begin marks dir/file pending before a read or write of it; the token
// (0: not recorded, the directory is not watched) goes to commit.
func (k *known) begin(dir, file string) uint64 {
	i := knownIndex(file)
	if i < 0 {
		return 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.dirs[dir]
	if d == nil || !d.watched {
		return 0
	}
	k.gen++
	d.vals[i] = knownVal{gen: k.gen, pending: true}
	return k.gen
}

// commit records v as dir/file's value if nothing was seen since begin
// gave tok; ok false (the read or write failed) drops the record.
func (k *known) commit(dir, file string, tok uint64, v string, ok bool) {
	if tok == 0 {
		return
	}
	i := knownIndex(file)
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.dirs[dir]
	if d == nil || !d.watched || d.vals[i].gen != tok {
		return
	}
	if !ok {
		d.vals[i] = knownVal{}
		return
	}
	d.vals[i] = knownVal{v: v, gen: tok, set: true}
}

// observe is the watch's: dir/file was written and now holds v. A record
// that differs, or a read or write under way, is dropped.
func (k *known) observe(dir, file, v string) {
	i := knownIndex(file)
	if i < 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.dirs[dir]
	if d == nil {
		return
	}
	if cur := d.vals[i]; cur.pending || (cur.set && !sameValue(file, cur.v, v)) {
		d.vals[i] = knownVal{}
	}
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
// directory removed, or the watch ended.
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
	d := k.dirs[dir]
	return d != nil && d.watched
}

// clear drops every value (events were lost: an overflowed queue); stop
// also drops the watched directories (the watch ended).
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

// sameValue compares two contents of file: cpusets as sets (the kernel
// may print a list another way than it was written), others as text.
func sameValue(file, a, b string) bool {
	if a == b {
		return true
	}
	if file != cpusFile {
		return false
	}
	x, err1 := cpulist.Parse(a)
	y, err2 := cpulist.Parse(b)
	return err1 == nil && err2 == nil && x.Equals(y)
}

// readKnown reads dir/file, or returns its trusted record when trust is
// set; a value read is recorded.
func (k *known) read(dir, file string, trust bool) (string, error) {
	if k == nil {
		return readFile(dir, file)
	}
	if trust {
		if v, ok := k.get(dir, file); ok {
			return v, nil
		}
	}
	tok := k.begin(dir, file)
	v, err := readFile(dir, file)
	k.commit(dir, file, tok, v, err == nil)
	return v, err
}

// write writes dir/file and records the value written. In a watched
// directory the write goes through a descriptor held open (one pwrite, no
// open and close), under the record's lock, so no event is compared
// between the write and its record.
func (k *known) write(dir, file, v string) error {
	i := knownIndex(file)
	if k == nil || i < 0 {
		return writeFile(dir, file, v)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.dirs[dir]
	if d == nil || !d.watched {
		return writeFile(dir, file, v)
	}
	err := d.write(dir, file, i, v)
	if err != nil {
		d.vals[i] = knownVal{}
		return err
	}
	k.gen++
	d.vals[i] = knownVal{v: v, gen: k.gen, set: true}
	return nil
}

// write writes v to d's file i through its held descriptor, opening it
// first (confined like every open, file.go). A descriptor whose cgroup
// went away is closed; the next write opens the path again.
func (d *knownDir) write(dir, file string, i int, v string) error {
	if d.fds[i] == 0 {
		h, err := openHeldFlags(dir, file, unix.O_WRONLY)
		if err != nil {
			return err
		}
		d.fds[i] = int32(h.fd + 1)
	}
	fd := int(d.fds[i] - 1)
	gone, err := writeHeld(fd, dir, file, v)
	if gone {
		_ = unix.Close(fd)
		d.fds[i] = 0
	}
	return err
}
