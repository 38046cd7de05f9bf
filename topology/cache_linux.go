//go:build linux

package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// readLLC reads cpuN/cache/index*/{level,type,shared_cpu_list} of each online
// CPU, keeps the highest data or unified level, and gives CPUs that share it
// the same machine-unique group id (dense, ordered by lowest CPU id). CPUs
// without cache information keep L3 = Unknown and yield one warning.
func readLLC(sysRoot string, cpus []CPU) ([]CacheGroup, []Warning, error) {
	cpuRoot := filepath.Join(sysRoot, "devices", "system", "cpu")
	type llc struct {
		level int
		set   cpuset.CPUSet
	}
	per := make([]llc, len(cpus))
	var missing []int
	for i, c := range cpus {
		if !c.Online {
			continue
		}
		dir := filepath.Join(cpuRoot, "cpu"+strconv.Itoa(c.ID), "cache")
		ents, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("%w: %s: %w", ErrRead, dir, err)
		}
		best := llc{level: -1}
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), "index") {
				continue
			}
			idx := filepath.Join(dir, e.Name())
			typ, _, err := readOptional(filepath.Join(idx, "type"))
			if err != nil {
				return nil, nil, err
			}
			if typ == "Instruction" {
				continue
			}
			level, ok, err := readInt(filepath.Join(idx, "level"))
			if err != nil {
				return nil, nil, err
			}
			if !ok || level <= best.level {
				continue
			}
			set, ok, err := readCPUList(filepath.Join(idx, "shared_cpu_list"))
			if err != nil {
				return nil, nil, err
			}
			// A cache is always shared with its own CPU. When the list
			// says otherwise (hand-edited captures), the mask decides.
			if !ok || !set.Contains(c.ID) {
				mask, mok, err := readCPUMask(filepath.Join(idx, "shared_cpu_map"))
				if err != nil {
					return nil, nil, err
				}
				if mok && (!ok || mask.Contains(c.ID)) {
					set, ok = mask, true
				}
			}
			if !ok || set.IsEmpty() {
				continue
			}
			best = llc{level: level, set: set.Union(cpuset.New(c.ID))}
		}
		if best.level < 0 {
			missing = append(missing, c.ID)
			continue
		}
		per[i] = best
	}
	var warns []Warning
	if len(missing) > 0 {
		warns = append(warns, Warning{cpuRoot, "no cache information for online CPUs " + cpuset.New(missing...).String() + ": L3 group unknown"})
	}
	// The highest level seen anywhere is the LLC; CPUs that report only a
	// lower level (asymmetric caches) form their own groups at that level.
	ids := map[string]int{}
	var groups []CacheGroup
	for i := range cpus {
		if per[i].level < 0 || per[i].set.IsEmpty() {
			continue
		}
		key := strconv.Itoa(per[i].level) + ":" + per[i].set.String()
		id, ok := ids[key]
		if !ok {
			id = len(groups)
			ids[key] = id
			groups = append(groups, CacheGroup{ID: id, Level: per[i].level, CPUs: cpuset.New()})
		}
		cpus[i].L3 = id
		groups[id].CPUs = groups[id].CPUs.Union(cpuset.New(cpus[i].ID))
	}
	return groups, warns, nil
}
