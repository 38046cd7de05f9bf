//go:build linux

package cgroup

import (
	"errors"
	"sync"
)

// readBufSize bounds one file read; memory.stat is the largest file read
// (about 1.5 KiB on v1, 3 KiB on recent v2 kernels).
const readBufSize = 16 << 10

// bufPool shares read buffers among Readers, so a node with 1,000
// containers does not keep 1,000 buffers; Get/Put of a pointer allocate
// nothing in steady state.
var bufPool = sync.Pool{New: func() any { return new([readBufSize]byte) }}

// Reader samples one cgroup (container or pod). It keeps every file it
// reads open and re-reads each with one pread at offset 0: no open, no stat
// and no allocation per sample. A Reader is not safe for concurrent use.
type Reader struct {
	unified bool
	cpuUsage,
	cpuStat,
	memUsage,
	memLimit,
	memStat,
	oom heldFile
	psi [3]heldFile
}

// OpenReader opens the files of the cgroup at d. The CPU and memory files
// are required: the error wraps ErrGone when the cgroup directory is gone
// (the container exited), ErrUnsupported when the directory exists without
// the file (controller not enabled). The OOM counter and PSI files are
// optional.
func OpenReader(d Dirs) (*Reader, error) {
	r := &Reader{unified: d.Unified}
	for _, h := range r.files() {
		h.fd = -1
	}
	usage, limit, stat, events := memoryFiles(d.Unified)
	type spec struct {
		dst      *heldFile
		dir      string
		name     string
		optional bool
	}
	specs := []spec{
		{&r.cpuStat, d.CPU, "cpu.stat", false},
		{&r.memUsage, d.Memory, usage, false},
		{&r.memLimit, d.Memory, limit, false},
		{&r.memStat, d.Memory, stat, false},
		{&r.oom, d.Memory, events, true},
	}
	if !d.Unified {
		specs = append(specs, spec{&r.cpuUsage, d.CPUAcct, "cpuacct.usage", false})
	}
	if d.PSI != "" {
		for i, f := range psiFiles {
			specs = append(specs, spec{&r.psi[i], d.PSI, f, true})
		}
	}
	for _, s := range specs {
		h, err := openHeld(s.dir, s.name)
		if err != nil {
			if s.optional && (errors.Is(err, ErrGone) || errors.Is(err, ErrUnsupported)) {
				continue
			}
			r.Close()
			return nil, err
		}
		*s.dst = h
	}
	// PSI counts only as a whole: all three files or none.
	if !(r.psi[0].open() && r.psi[1].open() && r.psi[2].open()) {
		for i := range r.psi {
			_ = r.psi[i].close()
		}
	}
	return r, nil
}

// Read fills s with one sample. Errors wrap ErrGone when the cgroup was
// removed since OpenReader (ENODEV/ENOENT on the held fd), ErrParse on
// contents that are not what the kernel documents, ErrRead otherwise; s is
// then partly filled and must not be used.
func (r *Reader) Read(s *Stats) error {
	bp := bufPool.Get().(*[readBufSize]byte)
	defer bufPool.Put(bp)
	buf := bp[:]
	*s = Stats{}

	b, err := r.cpuStat.read(buf)
	if err != nil {
		return err
	}
	if err := parseCPUStat(b, r.unified, s); err != nil {
		return wrapParse(r.cpuStat.path(), b, err)
	}
	if !r.unified {
		if b, err = r.cpuUsage.read(buf); err != nil {
			return err
		}
		if s.CPUUsageNs, err = parseUint(trimSpace(b)); err != nil {
			return wrapParse(r.cpuUsage.path(), b, err)
		}
	}
	if b, err = r.memUsage.read(buf); err != nil {
		return err
	}
	if s.MemoryUsage, err = parseUint(trimSpace(b)); err != nil {
		return wrapParse(r.memUsage.path(), b, err)
	}
	if b, err = r.memLimit.read(buf); err != nil {
		return err
	}
	if s.MemoryLimit, s.MemoryUnlimited, err = parseMemoryLimit(b); err != nil {
		return wrapParse(r.memLimit.path(), b, err)
	}
	if b, err = r.memStat.read(buf); err != nil {
		return err
	}
	if s.InactiveFile, err = parseMemoryStat(b, r.unified); err != nil {
		return wrapParse(r.memStat.path(), b, err)
	}
	if s.MemoryUsage > s.InactiveFile {
		s.WorkingSet = s.MemoryUsage - s.InactiveFile
	}
	if r.oom.open() {
		if b, err = r.oom.read(buf); err != nil {
			return err
		}
		if s.OOMKills, s.HasOOMKills, err = ParseOOMKills(b); err != nil {
			return wrapParse(r.oom.path(), b, err)
		}
	}
	if r.psi[0].open() {
		dst := [3]*Pressure{&s.CPUPressure, &s.MemoryPressure, &s.IOPressure}
		for i := range r.psi {
			if b, err = r.psi[i].read(buf); err != nil {
				return err
			}
			if err := parsePSI(b, dst[i]); err != nil {
				return wrapParse(r.psi[i].path(), b, err)
			}
		}
		s.HasPSI = true
	}
	return nil
}

func (r *Reader) files() [9]*heldFile {
	return [9]*heldFile{&r.cpuUsage, &r.cpuStat, &r.memUsage, &r.memLimit, &r.memStat, &r.oom, &r.psi[0], &r.psi[1], &r.psi[2]}
}

// Close closes every held file. The Reader must not be used afterwards.
func (r *Reader) Close() error {
	var errs []error
	for _, h := range r.files() {
		if err := h.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
