//go:build linux

package cgtest

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// V2 is the pseudo controller name of the cgroup2 tree in Dirs.
const V2 = "unified"

// Sandbox is one test's cgroup parent.
type Sandbox struct {
	t testing.TB
	// Unified is true when the host has only cgroup2 (all controllers there).
	Unified bool
	// Mounts maps each controller asked for (and V2 when a cgroup2 tree is
	// mounted) to the mount point of its hierarchy.
	Mounts map[string]string
	// Dirs maps the same keys to the sandbox parent directory.
	Dirs map[string]string
	// Name is the parent's base name, cgpilot-test-<random>.
	Name string

	// mu guards made and procs: tests create pods from several goroutines
	// (a lost append leaves a directory behind, and its parents busy).
	mu    sync.Mutex
	made  []string // every directory created, in creation order
	procs []*Proc
	own   map[string]string // key → the test process's own cgroup dir
}

// New creates the sandbox for controllers (v1 names such as "cpu",
// "cpuacct", "cpuset", "memory"). On a unified host the names select the
// controllers enabled in the sandbox's cgroup.subtree_control.
func New(t testing.TB, controllers ...string) *Sandbox {
	t.Helper()
	mounts, v2, err := readMounts()
	if err != nil {
		t.Skipf("cgtest: %v", err)
	}
	own, err := readSelfCgroup()
	if err != nil {
		t.Fatalf("cgtest: %v", err)
	}
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		t.Fatal(err)
	}
	s := &Sandbox{t: t, Mounts: map[string]string{}, Dirs: map[string]string{}, own: map[string]string{},
		Name: "cgpilot-test-" + hex.EncodeToString(suffix[:])}
	s.Unified = len(mounts) == 0 && v2 != ""
	t.Cleanup(s.cleanup)
	if s.Unified {
		s.Mounts[V2] = v2
	} else {
		for _, c := range controllers {
			mp, ok := mounts[c]
			if !ok {
				t.Skipf("cgtest: no v1 %s hierarchy on this host", c)
			}
			s.Mounts[c] = mp
		}
		if v2 != "" {
			s.Mounts[V2] = v2
		}
	}
	for key, mp := range s.Mounts {
		rel := own[key]
		if key == V2 {
			rel = own[""]
		}
		s.own[key] = filepath.Join(mp, rel)
		dir := filepath.Join(s.own[key], s.Name)
		s.mkdir(key, dir)
		s.Dirs[key] = dir
	}
	if s.Unified {
		// Children need the controllers enabled in the sandbox; the
		// parent of the sandbox must have them already (the v2 VM's init
		// enables all in the root).
		s.enableV2(s.own[V2], controllers)
		s.enableV2(s.Dirs[V2], controllers)
	}
	return s
}

func (s *Sandbox) enableV2(dir string, controllers []string) {
	for _, c := range v2Names(controllers) {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0); err != nil {
			s.t.Skipf("cgtest: cannot enable %s in %s/cgroup.subtree_control: %v", c, dir, err)
		}
	}
}

// v2Names maps v1 controller names to v2 ones (cpuacct is part of cpu).
func v2Names(cs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range cs {
		if c == "cpuacct" {
			c = "cpu"
		}
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

func (s *Sandbox) mkdir(key, dir string) {
	s.t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return
		}
		s.t.Fatalf("cgtest: %v", err)
	}
	s.mu.Lock()
	s.made = append(s.made, dir)
	s.mu.Unlock()
	if key == "cpuset" && !s.Unified {
		// A fresh v1 cpuset is empty and refuses tasks (ENOSPC); copy the
		// parent's, as runc and the kubelet do.
		for _, f := range []string{"cpuset.mems", "cpuset.cpus"} {
			var err error
			// An agent under test may narrow the parent between the read and
			// the write (the kernel then answers EACCES): read it again.
			for try := 0; try < 20; try++ {
				var b []byte
				b, err = os.ReadFile(filepath.Join(filepath.Dir(dir), f))
				if err == nil {
					err = os.WriteFile(filepath.Join(dir, f), b, 0)
				}
				if !errors.Is(err, fs.ErrPermission) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err != nil {
				s.t.Fatalf("cgtest: init %s: %v", filepath.Join(dir, f), err)
			}
		}
	}
}

// Mkdir creates rel (slash-separated, relative to the sandbox) in every
// hierarchy and returns its directory per key. On a unified host every
// created parent gets the sandbox's controllers in its subtree_control.
func (s *Sandbox) Mkdir(rel string) map[string]string {
	s.t.Helper()
	if filepath.IsAbs(rel) || strings.Contains(rel, "..") {
		s.t.Fatalf("cgtest: Mkdir(%q): want a relative path", rel)
	}
	out := map[string]string{}
	for key, base := range s.Dirs {
		dir := base
		for _, part := range strings.Split(filepath.Clean(rel), "/") {
			if s.Unified {
				s.enableV2(dir, s.enabled())
			}
			dir = filepath.Join(dir, part)
			s.mkdir(key, dir)
		}
		out[key] = dir
	}
	return out
}

// enabled returns the controllers enabled in the sandbox parent.
func (s *Sandbox) enabled() []string {
	b, err := os.ReadFile(filepath.Join(s.Dirs[V2], "cgroup.subtree_control"))
	if err != nil {
		s.t.Fatalf("cgtest: %v", err)
	}
	return strings.Fields(string(b))
}

// PodPath returns a pod cgroup path relative to the sandbox as the kubelet
// names it: driver "cgroupfs" (kubepods/burstable/pod<uid>) or "systemd"
// (kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice);
// qos is "Guaranteed", "Burstable" or "BestEffort".
func PodPath(driver, qos, uid string) string {
	q := strings.ToLower(qos)
	if driver == "systemd" {
		u := strings.ReplaceAll(uid, "-", "_")
		if qos == "Guaranteed" {
			return "kubepods.slice/kubepods-pod" + u + ".slice"
		}
		return "kubepods.slice/kubepods-" + q + ".slice/kubepods-" + q + "-pod" + u + ".slice"
	}
	if qos == "Guaranteed" {
		return "kubepods/pod" + uid
	}
	return "kubepods/" + q + "/pod" + uid
}

// MkdirPod creates a pod cgroup and its container cgroups (names as the
// runtime makes them, e.g. "cri-containerd-<id>.scope" or "<id>") and
// returns their paths relative to the sandbox.
func (s *Sandbox) MkdirPod(driver, qos, uid string, containers ...string) (pod string, ctrs []string) {
	s.t.Helper()
	pod = PodPath(driver, qos, uid)
	s.Mkdir(pod)
	for _, c := range containers {
		ctrs = append(ctrs, pod+"/"+c)
		s.Mkdir(pod + "/" + c)
	}
	return pod, ctrs
}

// Path returns the directory of rel in the hierarchy of key.
func (s *Sandbox) Path(key, rel string) string { return filepath.Join(s.Dirs[key], rel) }

// cleanup kills our children, moves stragglers out, and removes the
// directories deepest first.
func (s *Sandbox) cleanup() {
	s.mu.Lock()
	procs, dirs := append([]*Proc(nil), s.procs...), append([]string(nil), s.made...)
	s.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	for _, d := range dirs {
		s.evacuate(d)
		var err error
		for i := 0; i < 50; i++ {
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond) // a killed task may take a moment to leave
		}
		if err != nil {
			s.t.Errorf("cgtest: rmdir %s: %v", d, err)
		}
	}
}

// evacuate moves tasks still in d back to the test's own cgroup of the
// same hierarchy.
func (s *Sandbox) evacuate(d string) {
	b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return
	}
	for key, base := range s.Dirs {
		if d == base || strings.HasPrefix(d, base+"/") {
			for _, pid := range strings.Fields(string(b)) {
				_ = os.WriteFile(filepath.Join(s.own[key], "cgroup.procs"), []byte(pid), 0)
			}
		}
	}
}

// readMounts returns the v1 controller mount points and the cgroup2 one.
func readMounts() (map[string]string, string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	v1 := map[string]string{}
	v2 := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 || pf[3] != "/" {
			continue
		}
		switch qf[0] {
		case "cgroup2":
			if v2 == "" {
				v2 = pf[4]
			}
		case "cgroup":
			for _, o := range strings.Split(qf[2], ",") {
				if _, dup := v1[o]; !dup && o != "rw" && o != "ro" && !strings.Contains(o, "=") {
					v1[o] = pf[4]
				}
			}
		}
	}
	if len(v1) == 0 && v2 == "" {
		return nil, "", errors.New("no cgroup mounts")
	}
	return v1, v2, sc.Err()
}

// readSelfCgroup maps controller ("" for cgroup2) → own cgroup path.
func readSelfCgroup() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("bad /proc/self/cgroup line %q", line)
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}
