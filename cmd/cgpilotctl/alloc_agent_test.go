//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/agent/pools"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/internal/cpulist"
	"github.com/cgpilot/cgpilot/topology"
)

// noCgroups is a pools.Cgroups with no pods on disk: the decision is what
// this test compares, not the writes.
type noCgroups struct{}

func (noCgroups) PodPath(uid string, _ cgroup.QoS) (string, error) { return "/kubepods/pod" + uid, nil }
func (noCgroups) ContainerPath(uid string, _ cgroup.QoS, id string) (string, error) {
	return "/kubepods/pod" + uid + "/" + id, nil
}
func (noCgroups) QoSPaths() []string                                { return nil }
func (noCgroups) Children(string) ([]string, error)                 { return nil, nil }
func (noCgroups) KnownChildren(string) ([]string, error)            { return nil, nil }
func (noCgroups) ForgetChildren(string)                             {}
func (noCgroups) ReadCPUs(string) (cpuset.CPUSet, error)            { return cpuset.New(), nil }
func (noCgroups) WidenCPUs(string, cpuset.CPUSet) (int, error)      { return 0, nil }
func (noCgroups) ApplyPod(cgroup.PodCPUs) ([]cgroup.Written, error) { return nil, nil }
func (noCgroups) Exists(string) (bool, error)                       { return false, nil }

// agentReason is the agent's status reason for each allocator reason.
var agentReason = map[string]string{
	"over-cap": local.ReasonCapExceeded, "not-sellable": local.ReasonCapExceeded, "not-enough-cpus": local.ReasonInsufficientCPUs,
	"taken-cpu": local.ReasonCPUsTaken, "reserved-cpu": local.ReasonReservedOverlap, "unknown-cpu": local.ReasonCPUsNotOnNode,
	"offline-cpu": local.ReasonCPUsNotOnNode, "splits-core": local.ReasonTopologyNoFit, "numa-no-fit": local.ReasonTopologyNoFit,
	"shares-core": local.ReasonTopologyNoFit, "numa-span": local.ReasonTopologyNoFit, "io-queue-cpu": local.ReasonTopologyNoFit,
}

// TestAllocAgreesWithAgent: on the same machine and inputs, `cgpilotctl
// alloc` and the agent's pools pick the same CPUs or refuse for the same
// reason (the cap and the sellable rule live in package topology only).
// CPUs the kubelet's static CPU manager holds play --taken.
func TestAllocAgreesWithAgent(t *testing.T) {
	root := writeTree(t)
	topo, _, err := topology.Discover(filepath.Join(root, "sys"), filepath.Join(root, "proc"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cpus       int
		explicit   string
		policy     string
		numa       string
		io         string
		reserved   string
		taken      string
		capRatio   float64
		overcommit float64
		shared     []int64
	}{
		{cpus: 2},
		{cpus: 1},
		{cpus: 3},
		{cpus: 2, io: "any"},
		{cpus: 2, taken: "2,6"},
		{cpus: 1, policy: "spread", reserved: "2-3"},
		{cpus: 4, numa: "spread", io: "any"},
		{cpus: 4, numa: "single", capRatio: 1},
		{cpus: 6, numa: "single", capRatio: 1},
		{cpus: 6},
		{cpus: 5, shared: []int64{2000}, overcommit: 1},
		{cpus: 3, shared: []int64{2000}, overcommit: 2, io: "any"},
		{cpus: 4, shared: []int64{2000}, overcommit: 2},
		{cpus: 2, shared: []int64{1500, 2500}, overcommit: 1.5},
		{explicit: "2,6"},
		{explicit: "2,3"},
		{explicit: "0-1", reserved: "1"},
		{explicit: "3,7", taken: "7"},
		{cpus: 2, reserved: "0-3"},
		{cpus: 3, taken: "0-3"},
	} {
		name := fmt.Sprintf("%+v", tc)
		t.Run(name, func(t *testing.T) {
			ratio := tc.capRatio
			if ratio == 0 {
				ratio = topology.DefaultCapRatio
			}
			args := []string{"alloc", "--root", root, "-o", "json", "--cap", fmt.Sprint(ratio)}
			for _, kv := range [][2]string{{"--policy", tc.policy}, {"--numa", tc.numa}, {"--io-queues", tc.io}, {"--reserved", tc.reserved}, {"--taken", tc.taken}, {"--cpuset", tc.explicit}} {
				if kv[1] != "" {
					args = append(args, kv[0], kv[1])
				}
			}
			if tc.cpus > 0 {
				args = append(args, "--cpus", fmt.Sprint(tc.cpus))
			}
			if tc.overcommit > 0 {
				var s []string
				for _, v := range tc.shared {
					s = append(s, fmt.Sprint(v))
				}
				args = append(args, "--overcommit", fmt.Sprint(tc.overcommit), "--shared", strings.Join(s, ","))
			}
			code, out, stderr := runCmd(args...)
			if code > 1 {
				t.Fatalf("cgpilotctl %v: exit %d %s %s", args, code, out, stderr)
			}
			var ok allocResult
			var refused allocFailure
			if code == 0 {
				_ = json.Unmarshal([]byte(out), &ok)
			} else if err := json.Unmarshal([]byte(out), &refused); err != nil {
				t.Fatal(err)
			}

			reserved, _ := cpulist.Parse(tc.reserved)
			taken, _ := cpulist.Parse(tc.taken)
			m, err := pools.New(pools.Options{Topology: topo, All: topo.Online(), Reserved: reserved, CapRatio: ratio, OvercommitRatio: tc.overcommit, Cgroups: noCgroups{}})
			if err != nil {
				t.Fatal(err)
			}
			m.SetKubeletTaken(taken)
			req := local.PodRequest{Pool: local.PoolExclusive, CPUPolicy: tc.policy, NUMA: tc.numa, IOQueues: tc.io}
			if tc.explicit != "" {
				set, _ := cpulist.Parse(tc.explicit)
				req.CPUSet = &set
			} else {
				n := tc.cpus
				req.CPUs = &n
			}
			all := []pools.Pod{{Key: "ns/pod", UID: "pod", Namespace: "ns", Name: "pod", QoS: cgroup.QoSGuaranteed, Req: req}}
			for i, milli := range tc.shared {
				all = append(all, pools.Pod{Key: fmt.Sprintf("ns/shared-%d", i), UID: fmt.Sprintf("shared-%d", i), QoS: cgroup.QoSBurstable,
					Req: local.PodRequest{Pool: local.PoolShared}, DemandMilli: milli})
			}
			res := m.Sync(all[0], func() []pools.Pod { return all })
			if code == 0 {
				if res.AllocatedCPUs != ok.CPUs {
					t.Fatalf("cgpilotctl alloc picks %s, the agent %q (%+v)", ok.CPUs, res.AllocatedCPUs, res.Status)
				}
				return
			}
			want, known := agentReason[refused.Reason]
			if refused.Reason == "not-enough-cpus" && tc.cpus > topo.Online().Difference(reserved).Size() {
				want = local.ReasonTooManyCPUs
			}
			if !known || res.Refusal != want {
				t.Fatalf("cgpilotctl alloc refuses (%s: %s), the agent says %q (%+v)", refused.Reason, refused.Error, res.Refusal, res.Status)
			}
		})
	}
}
