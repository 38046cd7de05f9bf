//go:build linux

package collector

import (
	"time"

	"github.com/cgpilot/cgpilot/cgroup"
)

// updateThrottle: CFS periods and throttled periods since the previous
// round (cpu.stat nr_periods, nr_throttled).
func updateThrottle(prev, cur *cgroup.Stats, _ time.Duration, s *Sample) error {
	if !cur.HasThrottling || !prev.HasThrottling {
		return ErrNoData
	}
	periods, ok1 := delta(prev.Periods, cur.Periods)
	throttled, ok2 := delta(prev.ThrottledPeriods, cur.ThrottledPeriods)
	if !ok1 || !ok2 {
		return ErrCounter
	}
	s.Periods, s.ThrottledPeriods, s.HasThrottling = periods, throttled, true
	return nil
}
