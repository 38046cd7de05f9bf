package topology

import (
	"fmt"
	"strings"

	"k8s.io/utils/cpuset"
)

// isolatedFromCmdline returns the CPUs of the isolcpus= parameter of a kernel
// command line. isolcpus takes optional flags before the list
// ("isolcpus=managed_irq,domain,0-4,11-79"); the last occurrence wins, as in
// the kernel. No isolcpus parameter gives an empty set.
func isolatedFromCmdline(cmdline string) (cpuset.CPUSet, error) {
	var val string
	found := false
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, "isolcpus="); ok {
			val, found = v, true
		}
	}
	if !found {
		return cpuset.New(), nil
	}
	parts := strings.Split(val, ",")
	i := 0
	for i < len(parts) && isIsolcpusFlag(parts[i]) {
		i++
	}
	set, err := parseCPUList(strings.Join(parts[i:], ","))
	if err != nil {
		return cpuset.New(), fmt.Errorf("isolcpus=%s: %w", val, err)
	}
	return set, nil
}

func isIsolcpusFlag(s string) bool {
	switch s {
	case "domain", "nohz", "managed_irq", "io_queue":
		return true
	}
	return false
}
