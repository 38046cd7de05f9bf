package topology_test

import (
	"errors"
	"fmt"

	"github.com/cgpilot/cgpilot/topology"
	"k8s.io/utils/cpuset"
)

// The agent discovers the node once (topology.Discover("/sys", "/proc")),
// then calls Allocate with what it has already granted. Here the machine is
// a literal: 2 sockets = 2 NUMA nodes = 2 L3 groups, 4 cores each, threads
// N and N+8 are siblings.
func ExampleAllocate() {
	var cpus []topology.CPU
	for id := 0; id < 16; id++ {
		core := id % 8
		cpus = append(cpus, topology.CPU{ID: id, Online: true, Core: core, RawCoreID: core,
			Socket: core / 4, RawPackageID: core / 4, Die: -1, NUMA: core / 4, L3: core / 4})
	}
	topo, err := topology.New(cpus, nil, nil, nil)
	if err != nil {
		panic(err)
	}
	state := topology.State{
		Taken:           cpuset.New(0, 8),    // one exclusive core already granted
		Reserved:        cpuset.New(7, 15),   // kubelet/system reserved core
		SharedMilliCPUs: []int64{2000, 1500}, // shared instances
	}
	got, err := topology.Allocate(topo, state, topology.Request{CPUs: 4})
	fmt.Println(got, err)

	_, err = topology.Allocate(topo, state, topology.Request{CPUs: 12})
	var refused *topology.AllocError
	if errors.As(err, &refused) {
		fmt.Println(refused.Reason)
	}
	// Output:
	// 1-2,9-10 <nil>
	// over-cap
}
