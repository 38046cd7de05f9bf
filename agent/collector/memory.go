//go:build linux

package collector

import (
	"time"

	"github.com/cgpilot/cgpilot/cgroup"
)

// updateMemory: the working set (usage − inactive file, what the
// kubelet evicts on), usage and the limit in force, now.
func updateMemory(_, cur *cgroup.Stats, _ time.Duration, s *Sample) error {
	s.MemoryWorkingSet, s.MemoryUsage = cur.WorkingSet, cur.MemoryUsage
	if !cur.MemoryUnlimited {
		s.MemoryLimit = cur.MemoryLimit
	}
	return nil
}
