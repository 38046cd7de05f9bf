//go:build linux

package collector

import (
	"time"

	"github.com/cgpilot/cgpilot/cgroup"
)

// updateOOM: OOM kills counted by the cgroup since the previous round
// (memory.events or memory.oom_control oom_kill). The agent learns of
// kills at once from oomwatch; this count is the slow cross-check.
func updateOOM(prev, cur *cgroup.Stats, _ time.Duration, s *Sample) error {
	if !cur.HasOOMKills || !prev.HasOOMKills {
		return ErrNoData
	}
	kills, ok := delta(prev.OOMKills, cur.OOMKills)
	if !ok {
		return ErrCounter
	}
	s.OOMKills = kills
	return nil
}
