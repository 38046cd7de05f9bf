//go:build linux

package collector

import (
	"errors"
	"time"

	"github.com/cgpilot/cgpilot/cgroup"
)

// ErrNoData: the kernel does not provide what a collector measures for
// this cgroup (no PSI, no CFS bandwidth counters). Not a failure.
var ErrNoData = errors.New("collector: no data")

// ErrCounter: a cumulative counter went backwards (the cgroup was
// replaced under the same directory); the round is skipped.
var ErrCounter = errors.New("collector: counter went backwards")

// collector turns two readings of one cgroup into part of a Sample.
type collector struct {
	// name labels the collector's series (cgpilot_collector_updates_total).
	name string
	// required: the sample is worthless without it (a CPU or memory figure
	// the recommender needs); other collectors only add detail.
	required bool
	update   func(prev, cur *cgroup.Stats, dt time.Duration, s *Sample) error
}

// collectors is the flat table of every collector, in update order: each
// one's name and weight stand here, its reading in its own file.
var collectors = []collector{
	{name: "cpu", required: true, update: updateCPU},
	{name: "memory", required: true, update: updateMemory},
	{name: "throttle", update: updateThrottle},
	{name: "oom", update: updateOOM},
	{name: "psi", update: updatePSI},
}

// delta is cur−prev of a cumulative counter; false when it went backwards
// (ErrCounter).
func delta(prev, cur uint64) (uint64, bool) {
	if cur < prev {
		return 0, false
	}
	return cur - prev, true
}
