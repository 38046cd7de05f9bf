package topology

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// MaxCPUID bounds CPU ids accepted from sysfs. Linux's NR_CPUS tops out at
// 8192 today; the margin keeps room for growth while refusing ranges like
// "0-2000000000" that would exhaust memory.
const MaxCPUID = 1<<16 - 1

// parseCPUList parses the Linux list format ("0-3,8,10-11") used by
// cpulist, *_list and isolated files. It also accepts the ", " separator
// that blk-mq cpu_list files use ("0, 1"), surrounding whitespace and an
// empty list. Ids above MaxCPUID are refused.
func parseCPUList(s string) (cpuset.CPUSet, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return cpuset.New(), nil
	}
	var ids []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return cpuset.New(), fmt.Errorf("empty element in cpu list %q", s)
		}
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := parseCPUID(lo)
		if err != nil {
			return cpuset.New(), fmt.Errorf("cpu list %q: %w", s, err)
		}
		last := first
		if isRange {
			if last, err = parseCPUID(hi); err != nil {
				return cpuset.New(), fmt.Errorf("cpu list %q: %w", s, err)
			}
			if last < first {
				return cpuset.New(), fmt.Errorf("cpu list %q: reversed range %q", s, part)
			}
		}
		for id := first; id <= last; id++ {
			ids = append(ids, id)
		}
	}
	return cpuset.New(ids...), nil
}

func parseCPUID(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("bad cpu id %q", s)
	}
	id, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("bad cpu id %q", s)
	}
	if id > MaxCPUID {
		return 0, fmt.Errorf("cpu id %d above limit %d", id, MaxCPUID)
	}
	return id, nil
}

// parseCPUMask parses the hexadecimal mask format of cpumap, *_siblings and
// smp_affinity files: comma-separated 32-bit words, most significant first
// ("00000000,000aaaa0"). Word count is bounded by MaxCPUID.
func parseCPUMask(s string) (cpuset.CPUSet, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return cpuset.New(), fmt.Errorf("empty cpu mask")
	}
	words := strings.Split(s, ",")
	if len(words)*32 > MaxCPUID+1 {
		return cpuset.New(), fmt.Errorf("cpu mask of %d words is longer than %d cpus", len(words), MaxCPUID+1)
	}
	var ids []int
	for i, w := range words {
		if w == "" || len(w) > 8 {
			return cpuset.New(), fmt.Errorf("cpu mask %q: bad word %q", s, w)
		}
		v, err := strconv.ParseUint(w, 16, 32)
		if err != nil {
			return cpuset.New(), fmt.Errorf("cpu mask %q: bad word %q", s, w)
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

// ParseCPUList parses a Linux cpu list ("0-3,8"; "0, 1" as blk-mq writes
// it), refusing ids above MaxCPUID. Use it for user input such as flags.
func ParseCPUList(s string) (cpuset.CPUSet, error) { return parseCPUList(s) }
