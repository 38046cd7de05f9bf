//go:build linux

package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// cpuDirs lists the cpuN directories of <sys>/devices/system/cpu.
func cpuDirs(cpuRoot string) ([]int, error) {
	ids, err := numberedEntries(cpuRoot, "cpu", MaxCPUID)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoCPUs, cpuRoot)
	case errors.Is(err, ErrParse):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: %s: %w", ErrRead, cpuRoot, err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: no cpuN directory in %s", ErrNoCPUs, cpuRoot)
	}
	return ids, nil
}

// readCPUList reads an optional cpu-list file; a garbled one is an error.
func readCPUList(path string) (cpuset.CPUSet, bool, error) { return readSet(path, parseCPUList) }

// readCPUMask reads an optional hex cpu mask file.
func readCPUMask(path string) (cpuset.CPUSet, bool, error) { return readSet(path, parseCPUMask) }

// readSet reads an optional CPU-set file written in parse's format; a
// garbled one is an error naming the file and its contents.
func readSet(path string, parse func(string) (cpuset.CPUSet, error)) (cpuset.CPUSet, bool, error) {
	s, ok, err := readOptional(path)
	if err != nil || !ok {
		return cpuset.New(), ok, err
	}
	set, err := parse(s)
	if err != nil {
		return cpuset.New(), true, parseErr(path, s, err)
	}
	return set, true, nil
}

// readInt reads an optional integer file.
func readInt(path string) (int, bool, error) {
	s, ok, err := readOptional(path)
	if err != nil || !ok {
		return 0, ok, err
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, true, parseErr(path, s, err)
	}
	return v, true, nil
}

// readCPUs reads <sys>/devices/system/cpu: the cpuN directories, online
// state (the global online list, else cpuN/online, else online), and each
// online CPU's topology directory. Offline CPUs have no usable topology.
func readCPUs(sysRoot string) ([]CPU, []Warning, error) {
	cpuRoot := filepath.Join(sysRoot, "devices", "system", "cpu")
	ids, err := cpuDirs(cpuRoot)
	if err != nil {
		return nil, nil, err
	}
	var warns []Warning
	onlinePath := filepath.Join(cpuRoot, "online")
	online, haveOnline, err := readCPUList(onlinePath)
	if err != nil {
		return nil, nil, err
	}
	cpus := make([]CPU, 0, len(ids))
	var noTopo []int
	for _, id := range ids {
		dir := filepath.Join(cpuRoot, "cpu"+strconv.Itoa(id))
		c := CPU{ID: id, Online: true, Core: Unknown, RawCoreID: Unknown, Socket: Unknown, RawPackageID: Unknown,
			Die: Unknown, NUMA: Unknown, L3: Unknown, cluster: Unknown, book: Unknown, drawer: Unknown}
		if haveOnline {
			c.Online = online.Contains(id)
		} else {
			v, ok, err := readInt(filepath.Join(dir, "online"))
			if err != nil {
				// An empty file (seen in ia64 captures) says nothing.
				if s, _, _ := readOptional(filepath.Join(dir, "online")); s != "" {
					return nil, nil, err
				}
				ok = false
			}
			if ok && v != 0 && v != 1 {
				return nil, nil, fmt.Errorf("%w: %s: %d is neither 0 nor 1", ErrParse, filepath.Join(dir, "online"), v)
			}
			// cpu0 often has no online file: it cannot be hot-unplugged.
			c.Online = !ok || v == 1
		}
		if c.Online {
			found, err := readCPUTopology(filepath.Join(dir, "topology"), &c)
			if err != nil {
				return nil, nil, err
			}
			if !found {
				noTopo = append(noTopo, id)
			}
		}
		cpus = append(cpus, c)
	}
	if haveOnline {
		var missing []int
		for _, id := range online.List() {
			if !containsID(ids, id) {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			warns = append(warns, Warning{onlinePath, "online CPUs without a cpuN directory are ignored: " + cpuset.New(missing...).String()})
		}
	}
	if len(noTopo) > 0 {
		warns = append(warns, Warning{cpuRoot, "no topology directory for online CPUs " + cpuset.New(noTopo...).String() + ": core and socket unknown"})
	}
	return cpus, warns, nil
}

func containsID(sorted []int, id int) bool {
	i := sort.SearchInts(sorted, id)
	return i < len(sorted) && sorted[i] == id
}

// readCPUTopology fills socket, die, core and siblings from cpuN/topology.
// It returns false when the directory does not exist.
func readCPUTopology(dir string, c *CPU) (bool, error) {
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("%w: %s: %w", ErrRead, dir, err)
	}
	c.hasTopology = true
	for _, f := range []struct {
		name string
		dst  *int
	}{{"physical_package_id", &c.RawPackageID}, {"die_id", &c.Die}, {"core_id", &c.RawCoreID},
		{"cluster_id", &c.cluster}, {"book_id", &c.book}, {"drawer_id", &c.drawer}} {
		v, ok, err := readInt(filepath.Join(dir, f.name))
		if err != nil {
			return true, err
		}
		// -1 means "not known" to the kernel (POWER, some ARM).
		if ok && v >= 0 {
			*f.dst = v
		}
	}
	// Kernels since 5.x name them core_cpus and package_cpus and keep the
	// old names as aliases; older kernels have only the old ones.
	sib, ok, err := readFirstSet(dir, "core_cpus_list", "core_cpus", "thread_siblings_list", "thread_siblings")
	if err != nil {
		return true, err
	}
	if ok && !sib.IsEmpty() {
		c.Siblings = sib.Union(cpuset.New(c.ID))
	}
	pkg, ok, err := readFirstSet(dir, "package_cpus_list", "package_cpus", "core_siblings_list", "core_siblings")
	if err != nil {
		return true, err
	}
	if ok {
		c.pkgCPUs = pkg
	}
	return true, nil
}

// readIsolated returns the isolated CPUs: <sys>/devices/system/cpu/isolated
// united with isolcpus= from <proc>/cmdline. Both are optional.
func readIsolated(sysRoot, procRoot string) (cpuset.CPUSet, error) {
	iso, _, err := readCPUList(filepath.Join(sysRoot, "devices", "system", "cpu", "isolated"))
	if err != nil {
		return cpuset.New(), err
	}
	path := filepath.Join(procRoot, "cmdline")
	cmd, ok, err := readOptional(path)
	if err != nil || !ok {
		return iso, err
	}
	fromCmd, err := isolatedFromCmdline(cmd)
	if err != nil {
		return cpuset.New(), fmt.Errorf("%w: %s: %w", ErrParse, path, err)
	}
	return iso.Union(fromCmd), nil
}

// readFirstSet reads the first existing file among names in dir; names
// ending in "list" (core_cpus_list, cpulist) are cpu lists, the others
// hex masks (core_cpus, cpumap, smp_affinity).
func readFirstSet(dir string, names ...string) (cpuset.CPUSet, bool, error) {
	for _, n := range names {
		read := readCPUMask
		if strings.HasSuffix(n, "list") {
			read = readCPUList
		}
		set, ok, err := read(filepath.Join(dir, n))
		if err != nil || ok {
			return set, ok, err
		}
	}
	return cpuset.New(), false, nil
}
