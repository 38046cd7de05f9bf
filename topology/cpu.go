package topology

import (
	"fmt"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/internal/cpulist"
)

// isolatedFromCmdline returns the CPUs of the isolcpus= parameter of a kernel
// command line. isolcpus takes optional flags before the list
// ("isolcpus=managed_irq,domain,0-4,11-79"); the last occurrence wins, as in
// the kernel. No isolcpus parameter gives an empty set. It walks the line
// without splitting it, and refuses a list longer than any CPU list can be
// before parsing it.
func isolatedFromCmdline(cmdline string) (cpuset.CPUSet, error) {
	var val string
	found := false
	for f := range strings.FieldsSeq(cmdline) {
		if v, ok := strings.CutPrefix(f, "isolcpus="); ok {
			val, found = v, true
		}
	}
	if !found {
		return cpuset.New(), nil
	}
	list := val
	for {
		flag, rest, more := strings.Cut(list, ",")
		if !isIsolcpusFlag(flag) {
			break
		}
		if list = rest; !more {
			list = ""
		}
	}
	if len(list) > cpulist.MaxLen {
		return cpuset.New(), fmt.Errorf("isolcpus=%s: cpu list of %d bytes, longer than %d", truncate(val), len(list), cpulist.MaxLen)
	}
	set, err := parseCPUList(list)
	if err != nil {
		return cpuset.New(), fmt.Errorf("isolcpus=%s: %w", truncate(val), err)
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
