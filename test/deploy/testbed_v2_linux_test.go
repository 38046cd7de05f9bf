//go:build linux

package deploy

import (
	"strings"
	"testing"
)

// TestTestBedOverlayCgroupV2: with the cgroup-v2 component (the demo on
// the v2 VM) the overlay's agent mounts the one kubepods tree of the
// unified hierarchy read-write and none of the v1 ones, its own changes
// (health port, moved host paths) still apply after the component's, and
// the admission policy of the base is deployed with it.
func TestTestBedOverlayCgroupV2(t *testing.T) {
	b := bed
	b.Components = []string{ComponentCgroupV2}
	ds, _, norm := overlayObjects(t, b)
	c := ds.Spec.Template.Spec.Containers[0]
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.ReadOnly
	}
	if ro, ok := mounts["/sys/fs/cgroup/kubepods"]; !ok || ro {
		t.Errorf("mounts %v: want /sys/fs/cgroup/kubepods read-write", mounts)
	}
	for _, p := range []string{"/sys/fs/cgroup/cpu/kubepods", "/sys/fs/cgroup/cpuset/kubepods", "/sys/fs/cgroup/memory/kubepods"} {
		if _, ok := mounts[p]; ok {
			t.Errorf("mounts %v: the v1 mount %s is left on a v2 node", mounts, p)
		}
	}
	paths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			paths[v.Name] = v.HostPath.Path
		}
	}
	if paths["cgroup-kubepods"] != "/sys/fs/cgroup/kubepods" || paths["cgroup-cpu-kubepods"] != "" {
		t.Errorf("hostPath volumes %v: want cgroup-kubepods and no v1 trees", paths)
	}
	for _, want := range b.HostPaths() {
		found := false
		for _, p := range paths {
			found = found || p == want
		}
		if !found {
			t.Errorf("hostPath volumes %v: the test bed's %s is missing", paths, want)
		}
	}
	if got := flags(t, c.Args)["--health-addr"]; got != "127.0.0.1:12345" {
		t.Errorf("--health-addr %q: the overlay's patch lost to the component", got)
	}
	admission := 0
	for k := range norm {
		if strings.HasPrefix(k, "ValidatingAdmissionPolicy") {
			admission++
		}
	}
	if admission < 2 {
		t.Errorf("%d ValidatingAdmissionPolicy objects (policy and binding) in the overlay, want the base's", admission)
	}
	if !strings.Contains(strings.Join(b.Notes(), "\n"), "component cgroup-v2") {
		t.Errorf("notes %q do not name the component", b.Notes())
	}
}
