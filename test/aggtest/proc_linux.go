package aggtest

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcCPU is the CPU time (user + system) a process has used, from
// /proc/PID/stat.
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("aggtest: /proc/%d/stat: no command", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// After the command: state, ppid, ... utime (12th), stime (13th).
	if len(f) < 13 {
		return 0, fmt.Errorf("aggtest: /proc/%d/stat: short", pid)
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(u+s) * (time.Second / 100), nil // USER_HZ is 100
}

// ProcRSS is a process's resident memory and its peak (bytes), from
// /proc/PID/status.
func ProcRSS(pid int) (cur, peak uint64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			cur = kb << 10
		case "VmHWM":
			peak = kb << 10
		}
	}
	return cur, peak, sc.Err()
}
