//go:build linux

package cgroup

import (
	"path/filepath"

	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/internal/cpulist"
)

// cpuset.go: the cpuset controller, cpuset.cpus and cpuset.mems (same names
// on v1 and v2). v1 enforces child ⊆ parent on every write (EACCES when a
// child asks for more, EBUSY when a parent drops a CPU a child uses), which
// is why writer.go widens top-down to the union and narrows bottom-up.

const (
	cpusFile = "cpuset.cpus"
	memsFile = "cpuset.mems"
)

// readCPUSetFile reads cpuset.cpus or cpuset.mems.
func readCPUSetFile(dir, file string) (cpuset.CPUSet, error) {
	return readCPUSetWith(dir, file, readFile)
}

// readCPUSetWith is readCPUSetFile through read (the Writer's record).
func readCPUSetWith(dir, file string, read func(dir, file string) (string, error)) (cpuset.CPUSet, error) {
	s, err := read(dir, file)
	if err != nil {
		return cpuset.CPUSet{}, err
	}
	// Empty is an empty set: a fresh v1 cpuset or an unset v2 one.
	set, err := cpulist.Parse(s)
	if err != nil {
		return cpuset.CPUSet{}, parseErr(filepath.Join(dir, file), []byte(s), err.Error())
	}
	return set, nil
}

func checkCPUSet(path string, set cpuset.CPUSet) error {
	if set.IsEmpty() {
		return &Refusal{Path: path, Value: "", Reason: "empty cpuset would leave the tasks nowhere to run (v1: ENOSPC/EBUSY)"}
	}
	return nil
}
