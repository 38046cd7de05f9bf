package topology

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/internal/cpulist"
)

// MaxCPUID bounds CPU ids accepted from sysfs: Linux's largest NR_CPUS
// (cpulist.MaxID), so a corrupt file cannot make a huge set.
const MaxCPUID = cpulist.MaxID

// parseCPUList parses the Linux list format ("0-3,8,10-11") used by
// cpulist, *_list and isolated files with the one bounded parser of
// internal/cpulist. It also accepts what sysfs writes around it: the ", "
// separator of blk-mq cpu_list files ("0, 1"), surrounding whitespace and
// an empty list.
func parseCPUList(s string) (cpuset.CPUSet, error) {
	s = strings.TrimSpace(s)
	// blk-mq's ", " at most doubles a list; anything longer is refused
	// before any copy is made.
	if len(s) > 2*cpulist.MaxLen {
		return cpuset.New(), fmt.Errorf("cpu list of %d bytes: %w", len(s), cpulist.ErrBounds)
	}
	if strings.ContainsAny(s, " \t\n") {
		parts := strings.Split(s, ",")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		s = strings.Join(parts, ",")
	}
	set, err := cpulist.Parse(s)
	if err != nil {
		return cpuset.New(), fmt.Errorf("cpu list %q: %w", clip(s), err)
	}
	return set, nil
}

// clip shortens a value quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// parseCPUMask parses the hexadecimal mask format of cpumap, *_siblings and
// smp_affinity files: comma-separated 32-bit words, most significant first
// ("00000000,000aaaa0"). Word count is bounded by MaxCPUID.
func parseCPUMask(s string) (cpuset.CPUSet, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return cpuset.New(), fmt.Errorf("empty cpu mask")
	}
	if n := strings.Count(s, ",") + 1; n*32 > MaxCPUID+1 {
		return cpuset.New(), fmt.Errorf("cpu mask of %d words is longer than %d cpus", n, MaxCPUID+1)
	}
	words := strings.Split(s, ",")
	var ids []int
	for i, w := range words {
		if w == "" || len(w) > 8 {
			return cpuset.New(), fmt.Errorf("cpu mask %q: bad word %q", clip(s), clip(w))
		}
		v, err := strconv.ParseUint(w, 16, 32)
		if err != nil {
			return cpuset.New(), fmt.Errorf("cpu mask %q: bad word %q", clip(s), clip(w))
		}
		base := (len(words) - 1 - i) * 32
		for bit := 0; bit < 32; bit++ {
			if v&(1<<bit) != 0 {
				ids = append(ids, base+bit)
			}
		}
	}
	return cpuset.New(ids...), nil
}
