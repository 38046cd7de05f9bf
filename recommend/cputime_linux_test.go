//go:build linux

package recommend

import "syscall"

// processCPUSeconds is the CPU time (user + system) this process used; on a
// shared machine it gives per-core rates that wall time cannot.
func processCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
