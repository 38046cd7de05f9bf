package agent

import (
	"errors"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/topology"
)

// twoCoresHT: 2 physical cores with 2 threads each (0,2 and 1,3), one
// NUMA node, one L3.
func twoCoresHT(t *testing.T) *topology.Topology {
	var cpus []topology.CPU
	for id := 0; id < 4; id++ {
		cpus = append(cpus, topology.CPU{ID: id, Online: true, Core: id % 2, RawCoreID: id % 2, Socket: 0, Die: 0, NUMA: 0, L3: 0,
			Siblings: cpuset.New(id%2, id%2+2)})
	}
	topo, err := topology.New(cpus, []topology.NUMANode{{ID: 0, CPUs: cpuset.New(0, 1, 2, 3)}}, []topology.CacheGroup{{ID: 0, Level: 3, CPUs: cpuset.New(0, 1, 2, 3)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func TestTopologyAllocator(t *testing.T) {
	a := topologyAllocator{topo: twoCoresHT(t)}
	for _, tc := range []struct {
		name      string
		available string
		n         int
		opts      AllocOptions
		want      string
		wantErr   error
	}{
		{"full core", "0-3", 2, AllocOptions{}, "0,2", nil},
		{"full core avoids split", "1-3", 2, AllocOptions{}, "1,3", nil},
		{"spread one thread per core", "0-3", 2, AllocOptions{Policy: "spread"}, "0-1", nil},
		{"not enough", "1", 2, AllocOptions{}, "", ErrInsufficientCPUs},
		{"bind-all is not exclusive", "0-3", 1, AllocOptions{Policy: "bind-all"}, "", ErrNoFit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := a.Allocate(mustSet(t, tc.available), tc.n, tc.opts)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !errors.Is(err, ErrRefused) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("got %s, %v; want %s", got, err, tc.want)
			}
		})
	}
	// Through the policy: the second pod does not split the first one's core.
	s := newMemState(mustSet(t, "0-3"), cpuset.New())
	p := policy{alloc: a, capFraction: 1}
	if got, err := p.Allocate(s, exclusiveRequest{UID: "a", CPUs: 2}); err != nil || got.String() != "0,2" {
		t.Fatalf("pod a: %s %v", got, err)
	}
	if got, err := p.Allocate(s, exclusiveRequest{UID: "b", CPUs: 2}); err != nil || got.String() != "1,3" {
		t.Fatalf("pod b: %s %v", got, err)
	}
}
