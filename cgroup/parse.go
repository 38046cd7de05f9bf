package cgroup

import "errors"

// Allocation-free parsing of cgroup file contents. The hot-path reader calls
// these on every sample, so they work on []byte and never build strings.

var (
	errEmpty    = errors.New("empty value")
	errNotDigit = errors.New("not a decimal number")
	errOverflow = errors.New("number overflows uint64")
)

// parseUint parses a decimal uint64 with no sign, spaces or newline.
func parseUint(b []byte) (uint64, error) {
	if len(b) == 0 {
		return 0, errEmpty
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errNotDigit
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, errOverflow
		}
		n = n*10 + d
	}
	return n, nil
}

// trimSpace drops ASCII spaces, tabs and newlines at both ends.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// nextLine splits off the first line of b (without its newline).
func nextLine(b []byte) (line, rest []byte) {
	for i, c := range b {
		if c == '\n' {
			return b[:i], b[i+1:]
		}
	}
	return b, nil
}

// cutField splits off the first space-separated field of b.
func cutField(b []byte) (field, rest []byte) {
	for i, c := range b {
		if c == ' ' {
			return b[:i], b[i+1:]
		}
	}
	return b, nil
}

// parseFixed2 parses a non-negative decimal with at most two fraction digits
// ("12.34", as in PSI averages) into hundredths, without float parsing.
func parseFixed2(b []byte) (uint64, error) {
	intPart, frac := b, []byte(nil)
	for i, c := range b {
		if c == '.' {
			intPart, frac = b[:i], b[i+1:]
			break
		}
	}
	n, err := parseUint(intPart)
	if err != nil {
		return 0, err
	}
	if len(frac) > 2 {
		return 0, errNotDigit
	}
	var f uint64
	for i := 0; i < 2; i++ {
		f *= 10
		if i < len(frac) {
			c := frac[i]
			if c < '0' || c > '9' {
				return 0, errNotDigit
			}
			f += uint64(c - '0')
		}
	}
	if n > (1<<64-1)/100-1 {
		return 0, errOverflow
	}
	return n*100 + f, nil
}

// eachKV calls f with the key and value of each non-empty "key value"
// line of b (every value a decimal) until f returns false; the first
// malformed line ends it with its error. The flat-keyed files' one loop
// (cpu.stat, memory.events, memory.oom_control).
func eachKV(b []byte, f func(key []byte, v uint64) bool) error {
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		if len(line) == 0 {
			continue
		}
		key, v, err := kvUint(line)
		if err != nil {
			return err
		}
		if !f(key, v) {
			return nil
		}
	}
	return nil
}

// kvUint parses one "key value" line of a flat-keyed file, the value a
// decimal.
func kvUint(line []byte) (key []byte, v uint64, err error) {
	key, val := cutField(line)
	if len(key) == 0 {
		return nil, 0, errEmpty
	}
	v, err = parseUint(trimSpace(val))
	return key, v, err
}
