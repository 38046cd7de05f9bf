//go:build linux

package collector

import (
	"syscall"
	"time"
)

type syscallRusage struct{ ru syscall.Rusage }

func getrusage(r *syscallRusage) { _ = syscall.Getrusage(syscall.RUSAGE_SELF, &r.ru) }

func (r syscallRusage) cpu() time.Duration {
	return time.Duration(r.ru.Utime.Nano() + r.ru.Stime.Nano())
}
