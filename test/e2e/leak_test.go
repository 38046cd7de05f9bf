//go:build linux

package e2e

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cgpilot/cgpilot/test/harness"
)

// hostSnapshot is what a test bed may touch on the host, read with code
// independent of the harness, so a harness bug cannot hide its own leaks.
type hostSnapshot struct {
	mounts   map[string]bool
	kubepods []string
	links    map[string]bool
	sysctls  map[string]string
	paths    map[string][]string // host path -> sorted entries (nil: absent)
	addrs    map[string]bool     // "dev addr/prefix" of every IPv4 address
}

// leakPaths are the host paths a node writes outside its directory.
var leakPaths = []string{"/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/usr/libexec/kubernetes",
	"/run/containerd", "/var/lib/containerd", "/opt/containerd", "/var/lib/cni", "/run/netns", "/run/runc",
	"/var/run/kubernetes", "/etc/kubernetes", harness.NodeLockFile,
	// containerd 2's NRI socket (off in the harness) and CDI spec directories.
	"/run/nri", "/run/cdi", "/etc/cdi"}

var leakSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward"}

func takeSnapshot(t *testing.T) hostSnapshot {
	t.Helper()
	s := hostSnapshot{mounts: map[string]bool{}, links: map[string]bool{}, sysctls: map[string]string{}, paths: map[string][]string{}, addrs: map[string]bool{}}
	out, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		t.Fatalf("ip addr show: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		// 1: lo    inet 127.0.0.1/8 scope host lo ...
		if f := strings.Fields(l); len(f) >= 4 && f[2] == "inet" {
			s.addrs[f[1]+" "+f[3]] = true
		}
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	var cgroupRoots []string
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 10 {
			continue
		}
		s.mounts[fl[4]] = true
		for i := 6; i+1 < len(fl); i++ {
			if fl[i] == "-" && (fl[i+1] == "cgroup" || fl[i+1] == "cgroup2") {
				cgroupRoots = append(cgroupRoots, fl[4])
			}
		}
	}
	f.Close()
	for _, r := range cgroupRoots {
		if _, err := os.Stat(filepath.Join(r, "kubepods")); err == nil {
			s.kubepods = append(s.kubepods, filepath.Join(r, "kubepods"))
		}
	}
	ents, _ := os.ReadDir("/sys/class/net")
	for _, e := range ents {
		s.links[e.Name()] = true
	}
	for _, k := range leakSysctls {
		b, _ := os.ReadFile("/proc/sys/" + k)
		s.sysctls[k] = strings.TrimSpace(string(b))
	}
	for _, p := range leakPaths {
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		entries := []string{}
		_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
			if err == nil && q != p {
				entries = append(entries, strings.TrimPrefix(q, p))
			}
			return nil
		})
		sort.Strings(entries)
		s.paths[p] = entries
	}
	return s
}

// listeners returns the loopback/any TCP ports in LISTEN state.
func listeners(t *testing.T) map[int]bool {
	t.Helper()
	out := map[int]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fl := strings.Fields(line)
			if len(fl) < 4 || fl[3] != "0A" { // 0A = TCP_LISTEN
				continue
			}
			if i := strings.LastIndexByte(fl[1], ':'); i >= 0 {
				if p, err := strconv.ParseUint(fl[1][i+1:], 16, 16); err == nil {
					out[int(p)] = true
				}
			}
		}
	}
	return out
}

// processesMentioning lists live processes whose command line contains s
// (a test bed directory: every process of a test bed has it in its args).
func processesMentioning(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(b), s) {
			continue
		}
		if st, _ := os.ReadFile("/proc/" + e.Name() + "/stat"); strings.Contains(string(st), ") Z ") {
			continue
		}
		out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(b), "\x00", " ")))
	}
	return out
}

// assertNoLeaks compares the host after a teardown with before.
func assertNoLeaks(t *testing.T, before hostSnapshot, bed bedRecord) {
	t.Helper()
	after := takeSnapshot(t)
	for _, p := range bed.procs {
		if p.Alive() {
			t.Errorf("leak: process %s (pid %d) still runs", p.Name, p.PID)
		}
	}
	if ps := processesMentioning(bed.dir); len(ps) > 0 {
		t.Errorf("leak: processes of %s still run: %v", bed.dir, ps)
	}
	ls := listeners(t)
	for _, p := range bed.ports {
		if ls[p] {
			t.Errorf("leak: something still listens on port %d", p)
		}
	}
	for m := range after.mounts {
		if before.mounts[m] {
			continue
		}
		if strings.HasPrefix(m, bed.dir) || strings.Contains(m, "kubelet") || strings.Contains(m, "containerd") || strings.HasPrefix(m, "/run/netns") {
			t.Errorf("leak: mount %s", m)
		}
		for _, p := range leakPaths {
			if strings.HasPrefix(m, p) {
				t.Errorf("leak: mount %s", m)
			}
		}
	}
	if len(after.kubepods) > len(before.kubepods) {
		t.Errorf("leak: kubepods cgroups %v (before: %v)", after.kubepods, before.kubepods)
	}
	for l := range after.links {
		if !before.links[l] && strings.HasPrefix(l, "veth") {
			t.Errorf("leak: network link %s", l)
		}
	}
	for a := range after.addrs {
		if !before.addrs[a] {
			t.Errorf("leak: address %s", a)
		}
	}
	for k, v := range before.sysctls {
		if after.sysctls[k] != v {
			t.Errorf("leak: sysctl %s = %s, was %s", k, after.sysctls[k], v)
		}
	}
	for _, p := range leakPaths {
		b, hadBefore := before.paths[p]
		a, hasAfter := after.paths[p]
		switch {
		case !hadBefore && hasAfter:
			t.Errorf("leak: %s created and left (%d entries)", p, len(a))
		case hadBefore && hasAfter && strings.Join(a, "\n") != strings.Join(b, "\n"):
			t.Errorf("leak: %s changed: before %v, after %v", p, b, a)
		}
	}
	if _, err := os.Stat(bed.dir); !os.IsNotExist(err) {
		t.Errorf("leak: test bed directory %s still exists", bed.dir)
	}
}

// bedRecord is what a test remembers of a test bed to check its teardown.
type bedRecord struct {
	dir   string
	procs []harness.ProcRecord
	ports []int
}

func recordBed(cp *harness.ControlPlane) bedRecord {
	st := cp.State
	r := bedRecord{dir: st.Dir, procs: append([]harness.ProcRecord{}, st.Procs...)}
	for _, p := range st.Ports {
		r.ports = append(r.ports, p)
	}
	if st.Node != nil {
		r.procs = append(r.procs, st.Node.Procs...)
		for _, p := range st.Node.Ports {
			r.ports = append(r.ports, p)
		}
	}
	return r
}
