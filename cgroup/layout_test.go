//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

const (
	testUID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
	testCID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// hostMountinfo is this project's CI host (hybrid, cpu and cpuacct apart).
const hostMountinfo = `25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		mode    Mode
		cpu     Mount
		cpuacct Mount
		unified string
	}{
		{"hybrid host", hostMountinfo, ModeHybrid,
			Mount{"/sys/fs/cgroup/cpu", "/"}, Mount{"/sys/fs/cgroup/cpuacct", "/"}, "/sys/fs/cgroup/unified"},
		{"v1 co-mounted cpu,cpuacct",
			"32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n" +
				"34 31 0:31 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n" +
				"35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
			ModeV1, Mount{"/sys/fs/cgroup/cpu,cpuacct", "/"}, Mount{"/sys/fs/cgroup/cpu,cpuacct", "/"}, ""},
		{"unified", "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n", ModeUnified, Mount{}, Mount{}, "/sys/fs/cgroup"},
		{"named v1 only plus unified is unified",
			"40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
			ModeUnified, Mount{}, Mount{}, "/sys/fs/cgroup/unified"},
		{"container view with non-root mount and escaped space",
			"32 31 0:29 /kubepods/x /host\\040cg/cpu rw - cgroup cgroup rw,cpu\n",
			ModeV1, Mount{"/host cg/cpu", "/kubepods/x"}, Mount{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseMountinfo(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if m.Mode != tc.mode || m.V1["cpu"] != tc.cpu || m.V1["cpuacct"] != tc.cpuacct || m.Unified.Point != tc.unified {
				t.Errorf("got mode %v cpu %+v cpuacct %+v unified %q", m.Mode, m.V1["cpu"], m.V1["cpuacct"], m.Unified.Point)
			}
		})
	}
	for _, bad := range []string{"", "no separator here\n", "1 2 3 - cgroup2\n", "24 1 0:1 / /proc rw - proc proc rw\n"} {
		if _, err := ParseMountinfo(strings.NewReader(bad)); !errors.Is(err, ErrLayout) {
			t.Errorf("ParseMountinfo(%q) = %v, want ErrLayout", bad, err)
		}
	}
}

func TestReadMountsThisHost(t *testing.T) {
	m, err := ReadMounts("/proc")
	if err != nil {
		t.Skipf("no cgroup mounts visible: %v", err)
	}
	if m.Mode == ModeUnknown {
		t.Fatalf("mode unknown: %+v", m)
	}
	if m.Mode != ModeUnified {
		if _, ok := m.V1["cpu"]; !ok {
			t.Errorf("v1 host without cpu hierarchy: %+v", m)
		}
	}
}

// TestReadMountsCgroupNamespace: in a container with its own cgroup
// namespace (containerd's default on cgroup v2) the hostPath mount of the
// host's /sys/fs/cgroup shows a root of "/../../../..". A mount point
// without cgroup.type is the hierarchy's root and resolves to "/", so the
// kubepods paths map below it (the demo's agent DaemonSet on the v2 VM
// crash-looped on "/kubepods is outside the mounted part /../../../..");
// one with cgroup.type (a cgroup below the root) keeps its root, and the
// error then names the namespace.
func TestReadMountsCgroupNamespace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		files    []string
		wantRoot string
	}{
		{"hierarchy root", []string{"cgroup.controllers", "cgroup.subtree_control"}, "/"},
		{"a cgroup below the root", []string{"cgroup.controllers", "cgroup.type"}, "/../../../.."},
		{"not a cgroup directory", nil, "/../../../.."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			point := filepath.Join(dir, "cgroup")
			if err := os.MkdirAll(filepath.Join(point, "kubepods"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range tc.files {
				if err := os.WriteFile(filepath.Join(point, f), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			proc := filepath.Join(dir, "proc")
			if err := os.MkdirAll(filepath.Join(proc, "self"), 0o755); err != nil {
				t.Fatal(err)
			}
			info := fmt.Sprintf("700 600 0:26 /../../../.. %s ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n"+
				"701 700 0:26 /../../.. %s/kubepods rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n", point, point)
			if err := os.WriteFile(filepath.Join(proc, "self", "mountinfo"), []byte(info), 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := ReadMounts(proc)
			if err != nil {
				t.Fatal(err)
			}
			if m.Mode != ModeUnified || m.Unified.Point != point || m.Unified.Root != tc.wantRoot {
				t.Fatalf("mounts %+v: want unified at %s, root %s", m, point, tc.wantRoot)
			}
			l, err := NewLayout(m, LayoutConfig{KubepodsPath: "/kubepods"})
			if tc.wantRoot == "/" {
				if err != nil {
					t.Fatal(err)
				}
				d, err := l.DirsAt("/kubepods")
				if err != nil || d.CPU != filepath.Join(point, "kubepods") {
					t.Errorf("kubepods dirs %+v (%v): want %s/kubepods", d, err, point)
				}
				return
			}
			if err == nil {
				_, err = l.DirsAt("/kubepods")
			}
			if err == nil || !strings.Contains(err.Error(), "cgroup namespace") {
				t.Errorf("layout of a mount outside the namespace: %v, want an error naming the cgroup namespace", err)
			}
		})
	}
}

// layoutCase is one directory as a driver/runtime combination creates it,
// written out literally (not computed) so the test checks the naming.
type layoutCase struct {
	driver   Driver
	scheme   string
	qos      QoS
	pod, ctr string
}

var uidU = strings.ReplaceAll(testUID, "-", "_")

var layoutCases = []layoutCase{
	// cgroupfs driver: containerd and docker (cri-dockerd) use the bare ID, CRI-O prefixes crio-.
	{DriverCgroupfs, "containerd", QoSGuaranteed, "/kubepods/pod" + testUID, "/kubepods/pod" + testUID + "/" + testCID},
	{DriverCgroupfs, "containerd", QoSBurstable, "/kubepods/burstable/pod" + testUID, "/kubepods/burstable/pod" + testUID + "/" + testCID},
	{DriverCgroupfs, "containerd", QoSBestEffort, "/kubepods/besteffort/pod" + testUID, "/kubepods/besteffort/pod" + testUID + "/" + testCID},
	{DriverCgroupfs, "cri-o", QoSGuaranteed, "/kubepods/pod" + testUID, "/kubepods/pod" + testUID + "/crio-" + testCID},
	{DriverCgroupfs, "cri-o", QoSBurstable, "/kubepods/burstable/pod" + testUID, "/kubepods/burstable/pod" + testUID + "/crio-" + testCID},
	{DriverCgroupfs, "cri-o", QoSBestEffort, "/kubepods/besteffort/pod" + testUID, "/kubepods/besteffort/pod" + testUID + "/crio-" + testCID},
	{DriverCgroupfs, "docker", QoSGuaranteed, "/kubepods/pod" + testUID, "/kubepods/pod" + testUID + "/" + testCID},
	{DriverCgroupfs, "docker", QoSBurstable, "/kubepods/burstable/pod" + testUID, "/kubepods/burstable/pod" + testUID + "/" + testCID},
	{DriverCgroupfs, "docker", QoSBestEffort, "/kubepods/besteffort/pod" + testUID, "/kubepods/besteffort/pod" + testUID + "/" + testCID},
	// systemd driver: slices with underscores in the UID, runtime scopes.
	{DriverSystemd, "containerd", QoSGuaranteed, "/kubepods.slice/kubepods-pod" + uidU + ".slice",
		"/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + testCID + ".scope"},
	{DriverSystemd, "containerd", QoSBurstable, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice",
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + testCID + ".scope"},
	{DriverSystemd, "containerd", QoSBestEffort, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice",
		"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + testCID + ".scope"},
	{DriverSystemd, "cri-o", QoSGuaranteed, "/kubepods.slice/kubepods-pod" + uidU + ".slice",
		"/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-" + testCID + ".scope"},
	{DriverSystemd, "cri-o", QoSBurstable, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice",
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-" + testCID + ".scope"},
	{DriverSystemd, "cri-o", QoSBestEffort, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice",
		"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/crio-" + testCID + ".scope"},
	{DriverSystemd, "docker", QoSGuaranteed, "/kubepods.slice/kubepods-pod" + uidU + ".slice",
		"/kubepods.slice/kubepods-pod" + uidU + ".slice/docker-" + testCID + ".scope"},
	{DriverSystemd, "docker", QoSBurstable, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice",
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/docker-" + testCID + ".scope"},
	{DriverSystemd, "docker", QoSBestEffort, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice",
		"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/docker-" + testCID + ".scope"},
}

// fakeHost builds mounts of the given mode whose hierarchies are temp dirs.
func fakeHost(t *testing.T, mode Mode) Mounts {
	t.Helper()
	root := t.TempDir()
	var mi strings.Builder
	add := func(id int, dir, fstype, opts string) {
		p := filepath.Join(root, dir)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&mi, "%d 1 0:%d / %s rw - %s %s rw,%s\n", id, id, p, fstype, fstype, opts)
	}
	switch mode {
	case ModeV1:
		add(30, "cpu,cpuacct", "cgroup", "cpu,cpuacct")
		add(31, "cpuset", "cgroup", "cpuset")
		add(32, "memory", "cgroup", "memory")
	case ModeHybrid:
		add(30, "cpu", "cgroup", "cpu")
		add(31, "cpuacct", "cgroup", "cpuacct")
		add(32, "cpuset", "cgroup", "cpuset")
		add(33, "memory", "cgroup", "memory")
		add(34, "unified", "cgroup2", "nsdelegate")
	case ModeUnified:
		add(30, "cg2", "cgroup2", "nsdelegate")
	}
	m, err := ParseMountinfo(strings.NewReader(mi.String()))
	if err != nil {
		t.Fatal(err)
	}
	if m.Mode != mode {
		t.Fatalf("fake host mode %v, want %v", m.Mode, mode)
	}
	return m
}

// mkTree creates rel in every hierarchy of m, as kubelet and runc do.
func mkTree(t *testing.T, m Mounts, rel string) {
	t.Helper()
	points := map[string]bool{}
	for _, mnt := range m.V1 {
		points[mnt.Point] = true
	}
	if m.Unified.Point != "" {
		points[m.Unified.Point] = true
	}
	for p := range points {
		if err := os.MkdirAll(filepath.Join(p, rel), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLayoutResolvesEveryDriverRuntimeQoS(t *testing.T) {
	for _, mode := range []Mode{ModeV1, ModeHybrid, ModeUnified} {
		for _, tc := range layoutCases {
			name := fmt.Sprintf("%v/%s/%s/%s", mode, tc.driver, tc.scheme, tc.qos)
			t.Run(name, func(t *testing.T) {
				m := fakeHost(t, mode)
				mkTree(t, m, tc.ctr)
				l, err := NewLayout(m, LayoutConfig{})
				if err != nil {
					t.Fatal(err)
				}
				if l.Driver() != tc.driver {
					t.Errorf("detected driver %s, want %s", l.Driver(), tc.driver)
				}
				pod, err := l.PodPath(testUID, tc.qos)
				if err != nil || pod != tc.pod {
					t.Errorf("PodPath = %q, %v; want %q", pod, err, tc.pod)
				}
				if q, err := l.QoSPath(tc.qos); err != nil || q != filepath.Dir(tc.pod) {
					t.Errorf("QoSPath = %q, %v; want %q", q, err, filepath.Dir(tc.pod))
				}
				d, err := l.ContainerDirs(testUID, tc.qos, tc.scheme+"://"+testCID)
				if err != nil {
					t.Fatal(err)
				}
				for ctl, dir := range map[string]string{"cpu": d.CPU, "cpuacct": d.CPUAcct, "cpuset": d.CPUSet, "memory": d.Memory} {
					if !isDir(dir) {
						t.Errorf("%s dir %s does not exist", ctl, dir)
					}
					if !strings.HasSuffix(dir, tc.ctr) {
						t.Errorf("%s dir %s does not end in %s", ctl, dir, tc.ctr)
					}
				}
				if d.Unified != (mode == ModeUnified) {
					t.Errorf("Unified = %v in mode %v", d.Unified, mode)
				}
				if (d.PSI != "") != (mode != ModeV1) || (d.PSI != "" && !isDir(d.PSI)) {
					t.Errorf("PSI dir %q in mode %v", d.PSI, mode)
				}
				if mode == ModeHybrid && (d.CPU == d.CPUAcct || d.CPU == d.Memory) {
					t.Errorf("hybrid host with separate hierarchies got shared dirs %+v", d)
				}
			})
		}
	}
}

func TestLayoutOverrides(t *testing.T) {
	m := fakeHost(t, ModeHybrid)
	// kubelet --cgroup-root=/k8s with cgroupfs, and a runtime this package
	// does not know, named by ContainerFormat.
	mkTree(t, m, "/k8s/kubepods/burstable/pod"+testUID+"/kata_"+testCID)
	if _, err := NewLayout(m, LayoutConfig{}); !errors.Is(err, ErrLayout) {
		t.Fatalf("detection found kubepods at a non-standard root: %v", err)
	}
	l, err := NewLayout(m, LayoutConfig{KubepodsPath: "/k8s/kubepods", ContainerFormat: "kata_%s"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Driver() != DriverCgroupfs {
		t.Errorf("driver %s", l.Driver())
	}
	d, err := l.ContainerDirs(testUID, QoSBurstable, "kata://"+testCID)
	if err != nil || !isDir(d.Memory) {
		t.Fatalf("ContainerDirs = %+v, %v", d, err)
	}
	// A systemd slice root implies the systemd driver and its prefixes.
	l, err = NewLayout(m, LayoutConfig{KubepodsPath: "/custom.slice/custom-kubepods.slice"})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := l.PodPath(testUID, QoSBestEffort)
	if want := "/custom.slice/custom-kubepods.slice/custom-kubepods-besteffort.slice/custom-kubepods-besteffort-pod" + uidU + ".slice"; p != want {
		t.Errorf("PodPath = %q, want %q", p, want)
	}
	// Configured driver wins over detection order.
	mkTree(t, m, "/kubepods.slice")
	mkTree(t, m, "/kubepods")
	l, err = NewLayout(m, LayoutConfig{Driver: DriverCgroupfs})
	if err != nil || l.KubepodsPath() != "/kubepods" {
		t.Errorf("driver cgroupfs: %v, kubepods %q", err, l.KubepodsPath())
	}
}

func TestLayoutRejectsBadInput(t *testing.T) {
	m := fakeHost(t, ModeUnified)
	mkTree(t, m, "/kubepods")
	l, err := NewLayout(m, LayoutConfig{})
	if err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		uid string
		qos QoS
		cid string
	}{
		{"../../etc", QoSBurstable, "containerd://" + testCID},
		{"a/b", QoSBurstable, "containerd://" + testCID},
		{"", QoSBurstable, "containerd://" + testCID},
		{testUID, "Platinum", "containerd://" + testCID},
		{testUID, QoSBurstable, "containerd://../x"},
		{testUID, QoSBurstable, "containerd://"},
		{testUID, QoSBurstable, "containerd://a-b"},
		{testUID, QoSBurstable, "rkt://" + testCID},
		{testUID, QoSBurstable, testCID},
	}
	for _, b := range bad {
		if _, err := l.ContainerDirs(b.uid, b.qos, b.cid); !errors.Is(err, ErrLayout) {
			t.Errorf("ContainerDirs(%q, %q, %q) = %v, want ErrLayout", b.uid, b.qos, b.cid, err)
		}
	}
	for _, cfg := range []LayoutConfig{
		{Driver: "cgroupfs2"},
		{KubepodsPath: "kubepods"},
		{KubepodsPath: "/kubepods/../x"},
		{KubepodsPath: "/"},
		{ContainerFormat: "%s-%s"},
		{ContainerFormat: "x/%s"},
		{ContainerFormat: "%d"},
	} {
		if _, err := NewLayout(m, cfg); !errors.Is(err, ErrLayout) {
			t.Errorf("NewLayout(%+v) = %v, want ErrLayout", cfg, err)
		}
	}
	if _, err := DirsAt(m, "/a/../b"); !errors.Is(err, ErrLayout) {
		t.Errorf("DirsAt unclean path: %v", err)
	}
	// A container-view mount whose root is a sub-tree cannot reach outside it.
	sub := Mounts{Mode: ModeUnified, Unified: Mount{Point: "/sys/fs/cgroup", Root: "/kubepods/x"}}
	if _, err := DirsAt(sub, "/kubepods/y"); !errors.Is(err, ErrLayout) {
		t.Errorf("DirsAt outside mount root: %v", err)
	}
	if d, err := DirsAt(sub, "/kubepods/x/c1"); err != nil || d.CPU != "/sys/fs/cgroup/c1" {
		t.Errorf("DirsAt inside mount root = %+v, %v", d, err)
	}
	// v1 with cpu,cpuacct co-mounted: one directory string serves both.
	cpu := Mount{Point: "/sys/fs/cgroup/cpu,cpuacct", Root: "/"}
	v1 := Mounts{Mode: ModeHybrid, V1: map[string]Mount{"cpu": cpu, "cpuacct": cpu,
		"cpuset": {Point: "/sys/fs/cgroup/cpuset", Root: "/"}, "memory": {Point: "/sys/fs/cgroup/memory", Root: "/"}}}
	d, err := DirsAt(v1, "/kubepods/p1")
	if err != nil || d.CPU != "/sys/fs/cgroup/cpu,cpuacct/kubepods/p1" || d.CPUSet != "/sys/fs/cgroup/cpuset/kubepods/p1" ||
		d.Memory != "/sys/fs/cgroup/memory/kubepods/p1" {
		t.Fatalf("v1 DirsAt = %+v, %v", d, err)
	}
	if unsafe.StringData(d.CPU) != unsafe.StringData(d.CPUAcct) {
		t.Error("co-mounted cpu and cpuacct: two copies of one directory")
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add(hostMountinfo)
	f.Add("29 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	f.Add("32 31 0:29 /a\\040b /x\\134y rw - cgroup cgroup rw,cpu,cpuacct\n")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMountinfo(strings.NewReader(s))
		if err != nil {
			return
		}
		if m.Mode == ModeUnknown || (m.Mode == ModeUnified) != (len(m.V1) == 0) {
			t.Fatalf("inconsistent mounts %+v", m)
		}
	})
}

// FuzzLayoutPaths checks that no pod UID or container ID can make a path
// that leaves the pod's directory.
func FuzzLayoutPaths(f *testing.F) {
	f.Add(testUID, "containerd://"+testCID, true)
	f.Add("../x", "cri-o://a/../../b", false)
	f.Fuzz(func(t *testing.T, uid, cid string, systemd bool) {
		cfg := LayoutConfig{KubepodsPath: "/kubepods", Driver: DriverCgroupfs}
		if systemd {
			cfg = LayoutConfig{KubepodsPath: "/kubepods.slice", Driver: DriverSystemd}
		}
		l, err := NewLayout(Mounts{Mode: ModeUnified, Unified: Mount{Point: "/sys/fs/cgroup", Root: "/"}}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, qos := range []QoS{QoSGuaranteed, QoSBurstable, QoSBestEffort} {
			pod, err := l.PodPath(uid, qos)
			if err != nil {
				continue
			}
			ctr, err := l.ContainerPath(uid, qos, cid)
			if err != nil {
				continue
			}
			if filepath.Clean(ctr) != ctr || filepath.Dir(ctr) != pod || !strings.HasPrefix(pod, cfg.KubepodsPath+"/") {
				t.Fatalf("uid %q cid %q made pod %q container %q", uid, cid, pod, ctr)
			}
		}
	})
}

func TestParsePodDir(t *testing.T) {
	for _, tc := range []struct {
		name, uid string
		ok        bool
	}{
		{"pod5d1c9a7e-0b7e-4c1e", "5d1c9a7e-0b7e-4c1e", true},
		{"kubepods-burstable-pod5d1c9a7e_0b7e_4c1e.slice", "5d1c9a7e-0b7e-4c1e", true},
		{"kubepods-besteffort-podabc.slice", "abc", true},
		{"kubepods-podabc_def.slice", "abc-def", true},
		{"burstable", "", false},
		{"kubepods-burstable.slice", "", false},
		{"pod", "", false},
		{"kubepods-pod.slice", "", false},
		{"cri-containerd-abc.scope", "", false},
		{"pod.x", "", false},
		{"pod a", "", false},
		{"kubepods-pod a.slice", "", false},
	} {
		uid, ok := ParsePodDir(tc.name)
		if uid != tc.uid || ok != tc.ok {
			t.Errorf("ParsePodDir(%q) = %q, %v; want %q, %v", tc.name, uid, ok, tc.uid, tc.ok)
		}
	}
}

// TestChildDirs: a pod's child resolved from the pod's directories is what
// DirsAt gives for its path; anything but a direct, clean child is refused.
func TestChildDirs(t *testing.T) {
	for _, m := range []Mounts{
		{Mode: ModeUnified, Unified: Mount{Point: "/sys/fs/cgroup"}},
		{Mode: ModeV1, V1: map[string]Mount{"cpu": {Point: "/sys/fs/cgroup/cpu,cpuacct"}, "cpuacct": {Point: "/sys/fs/cgroup/cpu,cpuacct"},
			"cpuset": {Point: "/sys/fs/cgroup/cpuset"}, "memory": {Point: "/sys/fs/cgroup/memory", Root: "/kubepods"}}},
	} {
		pod := "/kubepods/burstable/podabc"
		pd, err := DirsAt(m, pod)
		if err != nil {
			t.Fatal(err)
		}
		want, err := DirsAt(m, pod+"/ctr")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := childDirs(pd, pod+"/", pod+"/ctr"); err != nil || got != want {
			t.Fatalf("childDirs = %+v, %v; DirsAt %+v", got, err, want)
		}
		for _, bad := range []string{pod + "/a/b", pod + "/..", pod + "/", "/kubepods/besteffort/podabc/ctr", pod + "x/ctr"} {
			if _, err := childDirs(pd, pod+"/", bad); err == nil {
				t.Fatalf("childDirs accepted %q", bad)
			}
		}
	}
}
