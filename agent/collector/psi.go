//go:build linux

package collector

import (
	"time"

	"github.com/cgpilot/cgpilot/cgroup"
)

// updatePSI: the share of the last 10 s in which some task of the
// cgroup stalled on CPU, memory or IO (the *.pressure files of the v2
// tree, also on hybrid hosts).
func updatePSI(_, cur *cgroup.Stats, _ time.Duration, s *Sample) error {
	if !cur.HasPSI {
		return ErrNoData
	}
	// Averages are hundredths of a percent.
	s.CPUPressure = float64(cur.CPUPressure.Some.Avg10) / 10000
	s.MemoryPressure = float64(cur.MemoryPressure.Some.Avg10) / 10000
	s.IOPressure = float64(cur.IOPressure.Some.Avg10) / 10000
	s.HasPSI = true
	return nil
}
