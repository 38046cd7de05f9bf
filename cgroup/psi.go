//go:build linux

package cgroup

import "errors"

// psi.go: pressure stall information, cpu.pressure, memory.pressure and
// io.pressure in a v2 directory. On hybrid hosts the unified tree has them
// even though every controller is on v1 (PSI is accounted per task against
// its v2 cgroup).

var psiFiles = [3]string{"cpu.pressure", "memory.pressure", "io.pressure"}

// parsePSI parses
//
//	some avg10=0.12 avg60=0.05 avg300=0.01 total=12345
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//
// The full line is optional (cpu.pressure before 5.13).
func parsePSI(b []byte, p *Pressure) error {
	var some bool
	p.HasFull = false
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		if len(line) == 0 {
			continue
		}
		kind, rest := cutField(line)
		var dst *PressureLine
		switch string(kind) {
		case "some":
			dst, some = &p.Some, true
		case "full":
			dst, p.HasFull = &p.Full, true
		default:
			return errors.New("PSI line is neither some nor full")
		}
		var seen int
		for len(rest) > 0 {
			var kv []byte
			kv, rest = cutField(rest)
			if len(kv) == 0 {
				continue
			}
			key, val := kv, []byte(nil)
			for i, c := range kv {
				if c == '=' {
					key, val = kv[:i], kv[i+1:]
					break
				}
			}
			var err error
			switch string(key) {
			case "avg10":
				dst.Avg10, err = parseFixed2(val)
			case "avg60":
				dst.Avg60, err = parseFixed2(val)
			case "avg300":
				dst.Avg300, err = parseFixed2(val)
			case "total":
				dst.TotalUs, err = parseUint(val)
			default:
				continue
			}
			if err != nil {
				return err
			}
			seen++
		}
		if seen != 4 {
			return errors.New("PSI line lacks avg10/avg60/avg300/total")
		}
	}
	if !some {
		return errors.New("PSI file lacks the some line")
	}
	return nil
}
