package cpulist

import (
	"errors"
	"fmt"
	"math/bits"

	"k8s.io/utils/cpuset"
)

// Bounds. MaxCPUs is Linux's largest NR_CPUS (CONFIG_NR_CPUS tops out at
// 8192); MaxLen fits every id from 0 to MaxCPUs-1 listed one by one
// (about 39 KiB); MaxElements is one element per possible CPU.
const (
	MaxCPUs     = 8192
	MaxID       = MaxCPUs - 1
	MaxLen      = 48 << 10
	MaxElements = MaxCPUs
)

// Sentinels wrapped by every error of Parse.
var (
	ErrSyntax = errors.New("malformed cpu list")
	ErrBounds = errors.New("cpu list out of bounds")
)

// set is a fixed bitset over [0, MaxCPUs).
type set [MaxCPUs / 64]uint64

func (s *set) addRange(lo, hi int) {
	for lo <= hi {
		w, b := lo/64, lo%64
		n := min(64-b, hi-lo+1)
		mask := ^uint64(0)
		if n < 64 {
			mask = (1<<uint(n) - 1) << uint(b)
		}
		s[w] |= mask
		lo += n
	}
}

func (s *set) ids() []int {
	var out []int
	for w, word := range s {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			out = append(out, w*64+b)
			word &^= 1 << uint(b)
		}
	}
	return out
}

// Parse parses the kernel's list format: elements "N" or "N-M" (N ≤ M)
// separated by ",", decimal ids without sign or spaces, at most MaxID. The
// empty string is the empty set (an empty cpuset.cpus file reads that way);
// callers trim the trailing newline of a file. Overlapping and unordered
// elements are accepted, as the kernel accepts them on write.
func Parse(s string) (cpuset.CPUSet, error) {
	if len(s) > MaxLen {
		return cpuset.New(), fmt.Errorf("%w: %d bytes, at most %d", ErrBounds, len(s), MaxLen)
	}
	if s == "" {
		return cpuset.New(), nil
	}
	var bs set
	elements := 0
	for start := 0; start <= len(s); {
		end := start
		for end < len(s) && s[end] != ',' {
			end++
		}
		elements++
		if elements > MaxElements {
			return cpuset.New(), fmt.Errorf("%w: more than %d elements", ErrBounds, MaxElements)
		}
		part := s[start:end]
		lo, hi, err := parseElement(part)
		if err != nil {
			return cpuset.New(), err
		}
		bs.addRange(lo, hi)
		start = end + 1
	}
	return cpuset.New(bs.ids()...), nil
}

func parseElement(part string) (lo, hi int, err error) {
	dash := -1
	for i := 0; i < len(part); i++ {
		if part[i] == '-' {
			dash = i
			break
		}
	}
	if dash < 0 {
		lo, err = parseID(part, part)
		return lo, lo, err
	}
	if lo, err = parseID(part[:dash], part); err != nil {
		return 0, 0, err
	}
	if hi, err = parseID(part[dash+1:], part); err != nil {
		return 0, 0, err
	}
	if hi < lo {
		return 0, 0, fmt.Errorf("%w: reversed range %q", ErrSyntax, part)
	}
	return lo, hi, nil
}

// parseID parses a decimal id; at most 5 digits are read, so no input
// overflows before the bound check.
func parseID(s, part string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: element %q", ErrSyntax, part)
	}
	if len(s) > 5 {
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return 0, fmt.Errorf("%w: element %q", ErrSyntax, part)
			}
		}
		return 0, fmt.Errorf("%w: cpu id %s above %d", ErrBounds, s, MaxID)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: element %q", ErrSyntax, part)
		}
		n = n*10 + int(c-'0')
	}
	if n > MaxID {
		return 0, fmt.Errorf("%w: cpu id %d above %d", ErrBounds, n, MaxID)
	}
	return n, nil
}
