//go:build linux

package collector

import (
	"time"

	"github.com/cgpilot/cgpilot/cgroup"
)

// cpuCollector: mean CPU cores since the previous round, from the usage
// counter (v1 cpuacct.usage, v2 cpu.stat usage_usec).
type cpuCollector struct{}

func (cpuCollector) Name() string   { return "cpu" }
func (cpuCollector) Required() bool { return true }

func (cpuCollector) Update(prev, cur *cgroup.Stats, dt time.Duration, s *Sample) error {
	if cur.CPUUsageNs < prev.CPUUsageNs || dt <= 0 {
		return ErrCounter
	}
	s.CPUCores = float64(cur.CPUUsageNs-prev.CPUUsageNs) / float64(dt.Nanoseconds())
	return nil
}
