//go:build linux

package cgroup_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/cgpilot/cgpilot/cgroup"
	"k8s.io/utils/cpuset"
)

// Resolve a container's directories on a hybrid host with the systemd
// driver. On a node, use cgroup.ReadMounts("/proc") and an empty
// LayoutConfig: the driver and kubepods path are then detected.
func Example() {
	mounts, err := cgroup.ParseMountinfo(strings.NewReader(
		"32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n" +
			"33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n" +
			"34 31 0:31 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n" +
			"35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
			"41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"))
	if err != nil {
		log.Fatal(err)
	}
	layout, err := cgroup.NewLayout(mounts, cgroup.LayoutConfig{KubepodsPath: "/kubepods.slice"})
	if err != nil {
		log.Fatal(err)
	}
	dirs, err := layout.ContainerDirs("8c1c7a52-54e2-4a5b-9c1d-0e0f3a1b2c3d", cgroup.QoSBurstable, "containerd://4f2a9e")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(mounts.Mode, layout.Driver())
	fmt.Println(dirs.CPUSet)
	fmt.Println(dirs.PSI)
	// Output:
	// hybrid systemd
	// /sys/fs/cgroup/cpuset/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8c1c7a52_54e2_4a5b_9c1d_0e0f3a1b2c3d.slice/cri-containerd-4f2a9e.scope
	// /sys/fs/cgroup/unified/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8c1c7a52_54e2_4a5b_9c1d_0e0f3a1b2c3d.slice/cri-containerd-4f2a9e.scope
}

// The agent's loop for one pod: apply a plan (exclusive CPUs 2-3 and a
// 2-CPU quota on the pod, CPU 2 for one container), read stats, and
// re-assert the plan later. Not run: it needs a real pod.
func ExampleWriter_Apply() {
	mounts, err := cgroup.ReadMounts("/proc")
	if err != nil {
		log.Fatal(err)
	}
	layout, err := cgroup.NewLayout(mounts, cgroup.LayoutConfig{})
	if err != nil {
		log.Fatal(err)
	}
	uid, qos := "8c1c7a52-54e2-4a5b-9c1d-0e0f3a1b2c3d", cgroup.QoSGuaranteed
	pod, err := layout.PodDirs(uid, qos)
	if err != nil {
		log.Fatal(err)
	}
	ctr, err := layout.ContainerDirs(uid, qos, "containerd://4f2a9e")
	if err != nil {
		log.Fatal(err)
	}
	podCPUs, ctrCPUs := cpuset.New(2, 3), cpuset.New(2)
	plan := cgroup.Plan{
		Pod: cgroup.Target{Name: "pod " + uid, Dirs: pod,
			Set: cgroup.Resources{CPUs: &podCPUs, Quota: &cgroup.Quota{QuotaUs: 200000, PeriodUs: 100000}}},
		Containers: []cgroup.Target{{Name: "app", Dirs: ctr, Set: cgroup.Resources{CPUs: &ctrCPUs}}},
	}
	w := cgroup.NewWriter(cgroup.WriterOptions{Weight: cgroup.WeightQuadratic,
		Audit: func(r cgroup.Write) { log.Printf("%s: %s → %s", r.Path, r.Old, r.New) }})
	if _, err := w.Apply(plan); err != nil {
		log.Fatal(err) // errors.Is(err, cgroup.ErrRefused), cgroup.ErrGone, ...
	}

	r, err := cgroup.OpenReader(ctr)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	var st cgroup.Stats
	if err := r.Read(&st); err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.CPUUsageNs, st.ThrottledPeriods, st.WorkingSet, st.OOMKills)

	drifted, _, err := w.Reassert(plan) // every 60 s
	fmt.Println(drifted, err)
}
