package reschedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Hours is a set of hours of the day (UTC); the zero value holds every
// hour.
type Hours struct {
	set  uint32 // bit h: hour h
	text string
}

// ParseHours reads comma-separated ranges "from-to" of whole hours (UTC,
// to exclusive, wrapping past midnight: "22-6" is 22:00 to 06:00), or
// single hours ("3"). The empty string is every hour.
func ParseHours(s string) (Hours, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Hours{}, nil
	}
	var h Hours
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		from, to, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(strings.TrimSpace(from))
		if err != nil || a < 0 || a > 23 {
			return Hours{}, fmt.Errorf("%w: hours %q: %q is not an hour 0-23", ErrConfig, s, from)
		}
		b := (a + 1) % 24
		if isRange {
			b, err = strconv.Atoi(strings.TrimSpace(to))
			if err != nil || b < 0 || b > 24 || b == a {
				return Hours{}, fmt.Errorf("%w: hours %q: range %q needs an end 0-24 other than its start", ErrConfig, s, part)
			}
			b %= 24
		}
		if b == a { // 0-24: the whole day
			h.set = 1<<24 - 1
		}
		for x := a; x != b; x = (x + 1) % 24 {
			h.set |= 1 << x
		}
	}
	h.text = s
	return h, nil
}

// Contains reports whether t's hour (UTC) is in the set.
func (h Hours) Contains(t time.Time) bool { return h.set == 0 || h.set&(1<<t.UTC().Hour()) != 0 }

// String is the text it was parsed from ("" for every hour).
func (h Hours) String() string { return h.text }
