//go:build linux

package collector

import (
	"time"

	"github.com/cgpilot/cgpilot/cgroup"
)

// updateCPU: mean CPU cores since the previous round, from the usage
// counter (v1 cpuacct.usage, v2 cpu.stat usage_usec).
func updateCPU(prev, cur *cgroup.Stats, dt time.Duration, s *Sample) error {
	d, ok := delta(prev.CPUUsageNs, cur.CPUUsageNs)
	if !ok || dt <= 0 {
		return ErrCounter
	}
	s.CPUCores = float64(d) / float64(dt.Nanoseconds())
	return nil
}
