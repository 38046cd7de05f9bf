package topology

import (
	"errors"
	"testing"

	"k8s.io/utils/cpuset"
)

func mustParse(t testing.TB, s string) cpuset.CPUSet {
	t.Helper()
	set, err := cpuset.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestAllocate(t *testing.T) {
	dual := topoDualSocketHT(t)
	single := topoSingleSocketHT(t)
	uncore := topoDualUncoreCacheSingleSocketHT(t)
	gold := topoDualSocketMultiNumaPerSocketHT(t)
	epyc := topoDualSocketMultiNumaPerSocketHTLarge(t)
	dualIO := withIRQs(t, dual, map[string]cpuset.CPUSet{"nvme0q1": cpuset.New(0), "eth0-TxRx-0": cpuset.New(1), "nvme0q0": cpuset.New(2)})
	dualIO2 := withIRQs(t, dual, map[string]cpuset.CPUSet{"nvme0q1": cpuset.New(0), "nvme0q2": cpuset.New(4)})
	all := func(s string) cpuset.CPUSet { return mustParse(t, s) }
	tests := []struct {
		name  string
		topo  *Topology
		state State
		req   Request
		want  string // the cpuset, or "" when an error is expected
		why   Reason
	}{
		{"one whole core", dual, State{}, Request{CPUs: 2}, "0,6", ""},
		{"odd count: a whole core and one thread", single, State{}, Request{CPUs: 3}, "0-1,4", ""},
		{"odd count completes a split core", single, State{Taken: all("1")}, Request{CPUs: 3}, "0,4-5", ""},
		{"whole cores rather than leftover threads", single, State{Taken: all("1-2"), CapRatio: 1}, Request{CPUs: 2}, "0,4", ""},
		{"leftover threads when no core is whole", single, State{Taken: all("0-3"), CapRatio: 1}, Request{CPUs: 2}, "4-5", ""},
		{"best fit node keeps the free node whole", dual, State{Taken: all("0,6")}, Request{CPUs: 2}, "2,8", ""},
		{"single thread splits one core", dual, State{}, Request{CPUs: 1}, "0", ""},
		{"single thread reuses a split core", dual, State{Taken: all("0")}, Request{CPUs: 1}, "6", ""},
		{"three threads: core plus the split core's sibling", dual, State{Taken: all("0")}, Request{CPUs: 3}, "2,6,8", ""},
		{"whole node then one core of the other", dual, State{CapRatio: 1}, Request{CPUs: 8}, "0-2,4,6-8,10", ""},
		{"single NUMA refuses what no node holds", dual, State{CapRatio: 1}, Request{CPUs: 8, NUMA: NUMASingle}, "", ReasonNUMANoFit},
		{"NUMA spread balances whole cores", dual, State{}, Request{CPUs: 4, NUMA: NUMASpread}, "0-1,6-7", ""},
		{"spread: one thread per core", dual, State{}, Request{CPUs: 3, Policy: Spread}, "0,2,4", ""},
		{"spread skips cores holding an exclusive thread", dual, State{Taken: all("0")}, Request{CPUs: 2, Policy: Spread}, "2,4", ""},
		{"spread needs untaken cores", dual, State{Taken: all("0-5"), CapRatio: 1}, Request{CPUs: 1, Policy: Spread}, "", ReasonNotEnoughCPUs},
		{"bind-all: every free allocatable CPU", dual, State{Taken: all("0,6"), Reserved: all("1")}, Request{Policy: BindAll}, "2-5,7-11", ""},
		{"reserved never", dual, State{Reserved: all("0,6,2,8"), CapRatio: 1}, Request{CPUs: 8}, "1,3-5,7,9-11", ""},
		{"cap 2/3 of allocatable", dual, State{Taken: all("0-7")}, Request{CPUs: 2}, "", ReasonOverCap},
		{"cap counts only allocatable", dual, State{Reserved: all("0-2")}, Request{CPUs: 7}, "", ReasonOverCap},
		{"cap allows up to 2/3", dual, State{Taken: all("0-5")}, Request{CPUs: 2}, "6,8", ""},
		{"sellable: 2 x largest shared", dual, State{SharedMilliCPUs: []int64{2500}}, Request{CPUs: 7}, "", ReasonNotSellable},
		{"sellable: sold / overcommit", dual, State{SharedMilliCPUs: []int64{1000, 1000, 1000, 1000, 1000, 1000}, Overcommit: 1}, Request{CPUs: 7}, "", ReasonNotSellable},
		{"sellable allows what is left", dual, State{SharedMilliCPUs: []int64{2500}}, Request{CPUs: 6}, "0,2,4,6,8,10", ""},
		{"resize: same count keeps the set", dual, State{}, Request{CPUs: 2, Keep: all("0,6")}, "0,6", ""},
		{"resize: grow keeps and adds the nearest core", dual, State{}, Request{CPUs: 4, Keep: all("0,6")}, "0,2,6,8", ""},
		{"resize: shrink keeps a whole core of its own", dual, State{}, Request{CPUs: 2, Keep: all("1,3,7,9")}, "1,7", ""},
		{"resize: the cap counts the result", dual, State{Taken: all("1,3,5,7,9")}, Request{CPUs: 4, Keep: all("0,6")}, "", ReasonOverCap},
		{"resize: a held CPU granted to another", dual, State{Taken: all("0")}, Request{CPUs: 2, Keep: all("0,6")}, "", ReasonTakenCPU},
		{"resize: a held CPU now reserved", dual, State{Reserved: all("6")}, Request{CPUs: 2, Keep: all("0,6")}, "", ReasonReservedCPU},
		{"resize: grow beyond the free CPUs", dual, State{Taken: all("1-5,7-11"), CapRatio: 1}, Request{CPUs: 3, Keep: all("0,6")}, "", ReasonNotEnoughCPUs},
		{"L3: best-fit cache group keeps the other whole", uncore, State{Taken: all("0,8")}, Request{CPUs: 6}, "1-3,9-11", ""},
		{"L3: only a whole group holds 8", uncore, State{Taken: all("0,8")}, Request{CPUs: 8}, "4-7,12-15", ""},
		{"L3: two groups when one cannot", uncore, State{CapRatio: 1}, Request{CPUs: 10}, "0-4,8-12", ""},
		{"multi-node: the nearest node completes the largest", withDistances(t, gold), State{Taken: all("0-1,40-41,10-19,50-59,30-33,70-73"), CapRatio: 1}, Request{CPUs: 26}, "20-29,34-36,60-69,74-76", ""},
		{"multi-node without distances: the next largest", gold, State{Taken: all("0-1,40-41,10-19,50-59,30-33,70-73"), CapRatio: 1}, Request{CPUs: 26}, "2-4,20-29,42-44,60-69", ""},
		{"SNC: one node", gold, State{}, Request{CPUs: 20}, "0-9,40-49", ""},
		{"SNC: best-fit node", gold, State{Taken: all("0,40")}, Request{CPUs: 4}, "1-2,41-42", ""},
		{"EPYC NPS4: one CCX", epyc, State{}, Request{CPUs: 8}, "0-3,128-131", ""},
		{"EPYC NPS4: two CCX in one node", epyc, State{}, Request{CPUs: 16}, "0-7,128-135", ""},
		{"EPYC NPS4: whole CCX in the fullest node", epyc, State{Taken: all("0,128")}, Request{CPUs: 6}, "1-3,129-131", ""},
		{"IO avoid keeps off queue CPUs, not the admin queue's", dualIO, State{}, Request{CPUs: 2}, "2,8", ""},
		{"IO any ignores queues", dualIO, State{}, Request{CPUs: 2, IOQueues: IOAny}, "0,6", ""},
		{"IO avoid falls back when needed", dualIO, State{CapRatio: 1}, Request{CPUs: 12}, "0-11", ""},
		{"IO spread prefers uncovered queues", dualIO2, State{Taken: all("0,6")}, Request{CPUs: 2, IOQueues: IOSpread}, "4,10", ""},
		{"IO any on the same state", dualIO2, State{Taken: all("0,6")}, Request{CPUs: 2, IOQueues: IOAny}, "2,8", ""},
		{"negative count", dual, State{}, Request{CPUs: -1}, "", ReasonInvalidRequest},
		{"zero count", dual, State{}, Request{}, "", ReasonInvalidRequest},
		{"unknown policy", dual, State{}, Request{CPUs: 1, Policy: "packed"}, "", ReasonInvalidRequest},
		{"unknown NUMA policy", dual, State{}, Request{CPUs: 1, NUMA: "any"}, "", ReasonInvalidRequest},
		{"unknown IO policy", dual, State{}, Request{CPUs: 1, IOQueues: "never"}, "", ReasonInvalidRequest},
		{"bad cap ratio", dual, State{CapRatio: 1.5}, Request{CPUs: 1}, "", ReasonInvalidRequest},
		{"negative shared size", dual, State{SharedMilliCPUs: []int64{-1}}, Request{CPUs: 1}, "", ReasonInvalidRequest},
		{"more than exist", dual, State{CapRatio: 1}, Request{CPUs: 13}, "", ReasonNotEnoughCPUs},
		{"more than free", dual, State{CapRatio: 1, Taken: all("0-9")}, Request{CPUs: 3}, "", ReasonNotEnoughCPUs},
		{"last free CPU", dual, State{CapRatio: 1, Reserved: all("0-9"), Taken: all("10")}, Request{CPUs: 1}, "11", ""},
		{"not enough free", dual, State{CapRatio: 1, Reserved: all("0-9"), Taken: all("10")}, Request{CPUs: 2}, "", ReasonNotEnoughCPUs},
		{"explicit ok", dual, State{}, Request{Explicit: all("1,7")}, "1,7", ""},
		{"explicit count mismatch", dual, State{}, Request{CPUs: 4, Explicit: all("1,7")}, "", ReasonCountMismatch},
		{"explicit unknown CPU", dual, State{}, Request{Explicit: all("1,99")}, "", ReasonUnknownCPU},
		{"explicit reserved", dual, State{Reserved: all("1")}, Request{Explicit: all("1,7")}, "", ReasonReservedCPU},
		{"explicit taken", dual, State{Taken: all("7")}, Request{Explicit: all("1,7")}, "", ReasonTakenCPU},
		{"explicit splits cores", dual, State{}, Request{Explicit: all("1,3")}, "", ReasonSplitsCore},
		{"explicit odd count may split one core", dual, State{}, Request{Explicit: all("1,3,7")}, "1,3,7", ""},
		{"explicit spans nodes under single", dual, State{}, Request{Explicit: all("0-1,6-7"), NUMA: NUMASingle}, "", ReasonNUMASpan},
		{"explicit spans nodes needlessly", dual, State{}, Request{Explicit: all("0-1,6-7")}, "", ReasonNUMASpan},
		{"explicit spread may span nodes", dual, State{}, Request{Explicit: all("0-1,6-7"), NUMA: NUMASpread}, "0-1,6-7", ""},
		{"explicit spread shares a core", dual, State{}, Request{Explicit: all("0,6"), Policy: Spread}, "", ReasonSharesCore},
		{"explicit on IO CPUs while others are free", dualIO, State{}, Request{Explicit: all("0,6")}, "", ReasonIOQueueCPU},
		{"explicit over cap", dual, State{Taken: all("0-7")}, Request{Explicit: all("9,11")}, "", ReasonOverCap},
		{"explicit offline", withOffline(t, dual, 11), State{}, Request{Explicit: all("5,11")}, "", ReasonOfflineCPU},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Allocate(tc.topo, tc.state, tc.req)
			if tc.why != "" {
				var ae *AllocError
				if !errors.As(err, &ae) || ae.Reason != tc.why || !errors.Is(err, ErrAllocation) {
					t.Fatalf("got %s, %v; want refusal %q", got, err, tc.why)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if got.String() != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func withOffline(t testing.TB, topo *Topology, ids ...int) *Topology {
	t.Helper()
	cpus := append([]CPU(nil), topo.CPUs...)
	for i := range cpus {
		for _, id := range ids {
			if cpus[i].ID == id {
				cpus[i].Online = false
			}
		}
	}
	out, err := New(cpus, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAllocateDoesNotMutate checks that Allocate leaves its inputs alone.
func TestAllocateDoesNotMutate(t *testing.T) {
	topo := topoDualSocketHT(t)
	st := State{Taken: cpuset.New(0, 6), Reserved: cpuset.New(1)}
	a, err := Allocate(topo, st, Request{CPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Allocate(topo, st, Request{CPUs: 2})
	if err != nil || !a.Equals(b) {
		t.Fatalf("not deterministic: %s then %s (%v)", a, b, err)
	}
	if st.Taken.String() != "0,6" || st.Reserved.String() != "1" {
		t.Fatalf("state mutated: %+v", st)
	}
}

// withDistances gives the SNC machine its NUMA distance matrix: nodes 0-1
// share socket 0 (distance 11), nodes 2-3 socket 1; 21 across sockets.
func withDistances(t testing.TB, topo *Topology) *Topology {
	t.Helper()
	var nodes []NUMANode
	for id := 0; id < 4; id++ {
		d := map[int]int{}
		for j := 0; j < 4; j++ {
			switch {
			case j == id:
				d[j] = 10
			case j/2 == id/2:
				d[j] = 11
			default:
				d[j] = 21
			}
		}
		nodes = append(nodes, NUMANode{ID: id, CPUs: topo.NUMACPUs(id), Distances: d})
	}
	out, err := New(topo.CPUs, nodes, topo.LLCGroups, topo.IRQs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFlat(t *testing.T) {
	topo, err := Flat(mustParse(t, "0-3,8"))
	if err != nil {
		t.Fatal(err)
	}
	if c := topo.Counts(); c.CPUs != 5 || c.Online != 5 || c.Cores != 5 || c.NUMANodes != 1 {
		t.Fatalf("counts %+v", c)
	}
	got, err := Allocate(topo, State{Taken: mustParse(t, "0")}, Request{CPUs: 2})
	if err != nil || got.Size() != 2 || got.Contains(0) {
		t.Fatalf("Allocate on a flat machine: %s, %v", got, err)
	}
	if _, err := Allocate(topo, State{Taken: mustParse(t, "0-1")}, Request{CPUs: 2}); !errors.Is(err, ErrAllocation) {
		t.Fatalf("cap not applied on a flat machine: %v", err)
	}
}
