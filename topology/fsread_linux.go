//go:build linux

package topology

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// maxSmallFile bounds reads of single-value sysfs and procfs files. sysfs
// attributes are at most one page; /proc/cmdline is under 4 KiB.
const maxSmallFile = 64 << 10

// readBounded does one bounded read of a pseudo-file: sysfs and procfs sizes
// from stat are meaningless, so we read up to limit bytes and refuse more.
// A missing file returns an error matching fs.ErrNotExist.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrRead, path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrRead, path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s: larger than %d bytes", ErrRead, path, limit)
	}
	return b, nil
}

// readOptional reads a small file and trims it; ok is false when it does not
// exist.
func readOptional(path string) (s string, ok bool, err error) {
	b, err := readBounded(path, maxSmallFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	// Some captures pad values with NUL bytes; the kernel never writes them.
	return strings.TrimSpace(strings.Trim(string(b), "\x00\n ")), true, nil
}

func parseErr(path, value string, err error) error {
	return fmt.Errorf("%w: %s: %q: %v", ErrParse, path, truncate(value), err)
}

// numberedEntries lists the ids of dir's <prefix>N entries (cpu0, node1;
// not cpufreq, cpu+1 or cpu-1), sorted: the one reading of sysfs's
// numbered directories. An id above max is an ErrParse naming the entry;
// any other error is os.ReadDir's, for the caller to word.
func numberedEntries(dir, prefix string, max int) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || rest == "" || rest[0] == '+' || rest[0] == '-' {
			continue // cpufreq, cpuidle, …
		}
		id, err := strconv.Atoi(rest)
		if err != nil {
			continue
		}
		if id > max {
			return nil, fmt.Errorf("%w: %s: %s id %d above limit %d", ErrParse, filepath.Join(dir, e.Name()), prefix, id, max)
		}
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids, nil
}
