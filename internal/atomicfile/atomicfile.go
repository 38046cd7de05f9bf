package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// tempPattern names the temporary file of target base; Clean recognises it.
func tempPattern(base string) string { return "." + base + ".tmp-*" }

// corruptInfix separates a quarantined file's name from its time stamp.
const corruptInfix = ".corrupt-"

// WriteFile replaces path with data atomically and durably (see the package
// doc). The directory is created (mode 0700) when missing. On error the
// target is unchanged and no temporary file is left.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if base == "" {
		return fmt.Errorf("atomic write %q: no file name", path)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("atomic write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, tempPattern(base))
	if err != nil {
		return fmt.Errorf("atomic write %s: %w", path, err)
	}
	fail := func(step string, err error) error {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("atomic write %s: %s: %w", path, step, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail("write", err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return fail("chmod", err)
	}
	if err := tmp.Sync(); err != nil {
		return fail("fsync", err)
	}
	if err := tmp.Close(); err != nil {
		return fail("close", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("atomic write %s: rename: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("atomic write %s: open directory: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("atomic write %s: fsync directory: %w", path, err)
	}
	return nil
}

// Quarantine moves path aside as path.corrupt-<UTC time> and returns the new
// name. The copy is kept for a post-mortem; Clean bounds how many stay.
func Quarantine(path string, now time.Time) (string, error) {
	aside := path + corruptInfix + now.UTC().Format("20060102T150405.000000000Z")
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", path, err)
	}
	return aside, nil
}

// Clean removes the temporary files of path that a killed writer left, and
// all but the keep newest quarantined copies of path. Call it at start,
// before the first write. It returns the files it removed.
func Clean(path string, keep int) ([]string, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("clean %s: %w", path, err)
	}
	tmpPrefix := strings.TrimSuffix(tempPattern(base), "*")
	var removed, quarantined []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, tmpPrefix):
			p := filepath.Join(dir, name)
			if err := os.Remove(p); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, p)
		case strings.HasPrefix(name, base+corruptInfix):
			quarantined = append(quarantined, name)
		}
	}
	// The time stamp sorts as text: oldest first.
	sort.Strings(quarantined)
	for len(quarantined) > max(keep, 0) {
		p := filepath.Join(dir, quarantined[0])
		quarantined = quarantined[1:]
		if err := os.Remove(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, p)
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("clean %s: %v", path, errs)
	}
	return removed, nil
}

// Quarantined lists the quarantined copies of path, oldest first.
func Quarantined(path string) ([]string, error) {
	matches, err := filepath.Glob(path + corruptInfix + "*")
	sort.Strings(matches)
	return matches, err
}
