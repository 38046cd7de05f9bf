package topology

import "k8s.io/utils/cpuset"

// BlockQueue is one blk-mq hardware queue of a block device
// (/sys/block/<dev>/mq/<n>/cpu_list): the CPUs whose submissions go to it.
type BlockQueue struct {
	Device string
	Queue  int
	CPUs   cpuset.CPUSet
}

// parseBlockCPUList parses a blk-mq cpu_list file. Kernels write it as
// "0, 1, 2" (comma and space) rather than the usual range list.
func parseBlockCPUList(b []byte) (cpuset.CPUSet, error) { return parseCPUList(string(b)) }
