package topology

import (
	"fmt"

	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/internal/cpulist"
)

// BlockQueue is one blk-mq hardware queue of a block device
// (/sys/block/<dev>/mq/<n>/cpu_list): the CPUs whose submissions go to it.
type BlockQueue struct {
	Device string
	Queue  int
	CPUs   cpuset.CPUSet
}

// maxBlockCPUList bounds a blk-mq cpu_list file: every CPU id listed once
// with ", " after it is at most twice the longest range list.
const maxBlockCPUList = 2 * cpulist.MaxLen

// parseBlockCPUList parses a blk-mq cpu_list file. Kernels write it as
// "0, 1, 2" (comma and space) rather than the usual range list.
func parseBlockCPUList(b []byte) (cpuset.CPUSet, error) {
	if len(b) > maxBlockCPUList {
		return cpuset.New(), fmt.Errorf("cpu list of %d bytes, longer than %d", len(b), maxBlockCPUList)
	}
	return parseCPUList(string(b))
}
