//go:build linux

package collector

import (
	"time"

	"github.com/cgpilot/cgpilot/cgroup"
)

// oomCollector: OOM kills counted by the cgroup since the previous round
// (memory.events or memory.oom_control oom_kill). The agent learns of
// kills at once from oomwatch; this count is the slow cross-check.
type oomCollector struct{}

func (oomCollector) Name() string   { return "oom" }
func (oomCollector) Required() bool { return false }

func (oomCollector) Update(prev, cur *cgroup.Stats, _ time.Duration, s *Sample) error {
	if !cur.HasOOMKills || !prev.HasOOMKills {
		return ErrNoData
	}
	if cur.OOMKills < prev.OOMKills {
		return ErrCounter
	}
	s.OOMKills = cur.OOMKills - prev.OOMKills
	return nil
}
