//go:build linux

package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
)

// memory.go: the memory controller. v1 files: memory.usage_in_bytes,
// memory.limit_in_bytes, memory.stat, memory.oom_control. v2 files:
// memory.current, memory.max, memory.high, memory.stat, memory.events.

// DefaultMemoryMargin is the head room a new memory limit must keep above
// current usage: v1 answers EBUSY below usage, v2 OOM-kills.
const DefaultMemoryMargin = 0.10

// v1 reports "no limit" as PAGE_COUNTER_MAX pages (9223372036854771712 with
// 4 KiB pages); anything this large is unlimited.
const unlimitedThreshold = 1 << 62

func memoryFiles(unified bool) (usage, limit, stat, events string) {
	if unified {
		return "memory.current", "memory.max", "memory.stat", "memory.events"
	}
	return "memory.usage_in_bytes", "memory.limit_in_bytes", "memory.stat", "memory.oom_control"
}

// readMemoryUsage reads the cgroup's memory usage in bytes.
func readMemoryUsage(d Dirs) (uint64, error) {
	usage, _, _, _ := memoryFiles(d.Unified)
	s, err := readFile(d.Memory, usage)
	if err != nil {
		return 0, err
	}
	n, err := parseUint([]byte(s))
	if err != nil {
		return 0, wrapParse(filepath.Join(d.Memory, usage), []byte(s), err)
	}
	return n, nil
}

// readMemoryLimit reads memory.limit_in_bytes / memory.max, -1 = unlimited.
func readMemoryLimit(d Dirs) (int64, error) {
	_, limit, _, _ := memoryFiles(d.Unified)
	return readMemoryValue(d.Memory, limit)
}

// memswFile is v1's memory+swap limit; it exists only where the kernel
// accounts swap (swapaccount=1, the default on most distributions).
const memswFile = "memory.memsw.limit_in_bytes"

// readMemsw reads v1's memory+swap limit, -1 = unlimited; ok is false on
// v2 and where the file does not exist.
func readMemsw(d Dirs) (limit int64, ok bool, err error) {
	if d.Unified {
		return 0, false, nil
	}
	if _, err := os.Stat(filepath.Join(d.Memory, memswFile)); err != nil {
		return 0, false, nil
	}
	limit, err = readMemoryValue(d.Memory, memswFile)
	return limit, err == nil, err
}

// readMemoryHigh reads v2 memory.high, -1 = max.
func readMemoryHigh(d Dirs) (int64, error) {
	if !d.Unified {
		return 0, &FileError{Op: "read", Path: filepath.Join(d.Memory, "memory.high"), Kind: ErrUnsupported}
	}
	return readMemoryValue(d.Memory, "memory.high")
}

func readMemoryValue(dir, file string) (int64, error) {
	s, err := readFile(dir, file)
	if err != nil {
		return 0, err
	}
	lim, unlimited, err := parseMemoryLimit([]byte(s))
	if err != nil {
		return 0, wrapParse(filepath.Join(dir, file), []byte(s), err)
	}
	if unlimited {
		return -1, nil
	}
	return int64(lim), nil
}

// parseMemoryLimit parses "max" (v2) or a byte count (huge = unlimited on v1).
func parseMemoryLimit(b []byte) (limit uint64, unlimited bool, err error) {
	b = trimSpace(b)
	if string(b) == "max" {
		return 0, true, nil
	}
	n, err := parseUint(b)
	if err != nil {
		return 0, false, err
	}
	return n, n >= unlimitedThreshold, nil
}

// memoryValue formats a limit for writing (-1 = unlimited).
func memoryValue(unified bool, v int64) string {
	if v < 0 {
		if unified {
			return "max"
		}
		return "-1"
	}
	return strconv.FormatInt(v, 10)
}

// pageRound is what the kernel stores for a byte limit: whole pages, rounded
// down. Comparing desired with current values needs the same rounding.
func pageRound(v int64) int64 {
	if v < 0 {
		return v
	}
	ps := int64(os.Getpagesize())
	return v / ps * ps
}

// parseMemoryStat returns the inactive file bytes from memory.stat: the
// hierarchical total_inactive_file on v1, inactive_file on v2.
func parseMemoryStat(b []byte, v2 bool) (uint64, error) {
	want := "total_inactive_file"
	if v2 {
		want = "inactive_file"
	}
	// Only the wanted line is parsed: memory.stat has 30-60 lines on v2 and
	// this runs on every sample.
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		key, val := cutField(line)
		if string(key) == want {
			return parseUint(trimSpace(val))
		}
	}
	return 0, errors.New("memory.stat lacks " + want)
}

// ParseOOMKills returns the oom_kill counter of v1 memory.oom_control or v2
// memory.events ("key value" lines, every value a decimal); ok is false
// when the kernel has no such line. The one parser of that counter: the
// reader's samples and agent/oomwatch's counter backend use it.
func ParseOOMKills(b []byte) (n uint64, ok bool, err error) {
	err = eachKV(b, func(key []byte, v uint64) bool {
		if string(key) == "oom_kill" {
			n, ok = v, true
		}
		return !ok
	})
	if err != nil {
		return 0, false, err
	}
	return n, ok, nil
}

// OOMGroup says whether the cgroup directory dir has its processes killed
// together at an OOM (v2 memory.oom.group 1: the kubelet's default on
// cgroup v2 since 1.32). A directory without the file (v1) is not; a
// directory that is gone is an error (ErrGone).
func OOMGroup(dir string) (bool, error) {
	v, err := readFile(dir, "memory.oom.group")
	if errors.Is(err, ErrUnsupported) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return v == "1", nil
}
