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
type collector interface {
	Name() string
	// Required: the sample is worthless without it (a CPU or memory figure
	// the recommender needs); other collectors only add detail.
	Required() bool
	Update(prev, cur *cgroup.Stats, dt time.Duration, s *Sample) error
}

// collectors is the flat table of every collector, in update order.
var collectors = []collector{cpuCollector{}, memoryCollector{}, throttleCollector{}, oomCollector{}, psiCollector{}}
