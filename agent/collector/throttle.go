//go:build linux

package collector

import (
	"time"

	"github.com/cgpilot/cgpilot/cgroup"
)

// throttleCollector: CFS periods and throttled periods since the previous
// round (cpu.stat nr_periods, nr_throttled).
type throttleCollector struct{}

func (throttleCollector) Name() string   { return "throttle" }
func (throttleCollector) Required() bool { return false }

func (throttleCollector) Update(prev, cur *cgroup.Stats, _ time.Duration, s *Sample) error {
	if !cur.HasThrottling || !prev.HasThrottling {
		return ErrNoData
	}
	if cur.Periods < prev.Periods || cur.ThrottledPeriods < prev.ThrottledPeriods {
		return ErrCounter
	}
	s.Periods, s.ThrottledPeriods, s.HasThrottling = cur.Periods-prev.Periods, cur.ThrottledPeriods-prev.ThrottledPeriods, true
	return nil
}
