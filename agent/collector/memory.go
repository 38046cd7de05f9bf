//go:build linux

package collector

import (
	"time"

	"github.com/cgpilot/cgpilot/cgroup"
)

// memoryCollector: the working set (usage − inactive file, what the
// kubelet evicts on), usage and the limit in force, now.
type memoryCollector struct{}

func (memoryCollector) Name() string   { return "memory" }
func (memoryCollector) Required() bool { return true }

func (memoryCollector) Update(_, cur *cgroup.Stats, _ time.Duration, s *Sample) error {
	s.MemoryWorkingSet, s.MemoryUsage = cur.WorkingSet, cur.MemoryUsage
	if !cur.MemoryUnlimited {
		s.MemoryLimit = cur.MemoryLimit
	}
	return nil
}
