//go:build linux

package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// PathMark records a host path the node writes outside its own directory,
// as it was before the node started: Existed, and then its entries up to
// markDepth levels (relative paths), so teardown removes only what is new.
type PathMark struct {
	Path    string   `json:"path"`
	Existed bool     `json:"existed"`
	Entries []string `json:"entries,omitempty"`
}

const markDepth = 3

// hostPaths are written by the kubelet, containerd, the runc shim and the
// CNI plugins even with private root/state directories (measured in
// ../shared/research/k8s-local.md and checked again here).
var hostPaths = []string{
	"/var/lib/kubelet",         // device-plugins/kubelet.sock is hard-coded
	"/var/log/pods",            // in case podLogsDir is ignored
	"/var/log/containers",      // symlinks to pod logs
	"/usr/libexec/kubernetes",  // in case volumePluginDir is ignored
	"/run/containerd",          // shim sockets: /run/containerd/s/<hash>
	"/var/lib/containerd",      // default root, should stay unused
	"/opt/containerd",          // the opt plugin's default path
	"/var/lib/cni",             // CNI result cache
	"/run/netns",               // CRI network namespaces with containerd 1 (2 mounts them in its state directory)
	"/run/runc",                // runc's default root, should stay unused
	"/var/run/kubernetes",      // default --cert-dir of the components
	"/etc/kubernetes",          // kubelet manifests dir default
	"/var/lib/kubelet-plugins", // defensive: never created by 1.36
}

func markPath(p string) PathMark {
	m := PathMark{Path: p}
	if _, err := os.Lstat(p); err != nil {
		return m
	}
	m.Existed = true
	m.Entries = walkDepth(p)
	return m
}

// walkDepth lists relative paths under root down to markDepth levels,
// without following symlinks or crossing into other file systems' content
// beyond that depth.
func walkDepth(root string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, rel)
		if d.IsDir() && strings.Count(rel, "/")+1 >= markDepth {
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

// restore removes what is new under m.Path; mounts must be gone first.
func (m PathMark) restore(mounted func(string) bool) error {
	if _, err := os.Lstat(m.Path); err != nil {
		return nil
	}
	if !m.Existed {
		if mounted(m.Path) {
			return fmt.Errorf("%w: %s still has mounts; not removing it", ErrTeardown, m.Path)
		}
		if err := os.RemoveAll(m.Path); err != nil {
			return fmt.Errorf("%w: remove %s: %v", ErrTeardown, m.Path, err)
		}
		return nil
	}
	had := map[string]bool{}
	for _, e := range m.Entries {
		had[e] = true
	}
	var errs []error
	for _, rel := range walkDepth(m.Path) {
		if had[rel] {
			continue
		}
		// Parents come before children in walk order: skip what a removed
		// parent took with it.
		p := filepath.Join(m.Path, rel)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if mounted(p) {
			errs = append(errs, fmt.Errorf("%w: %s still has mounts; not removing it", ErrTeardown, p))
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("%w: remove %s: %v", ErrTeardown, p, err))
		}
	}
	return errors.Join(errs...)
}

// mountInfo is one line of /proc/self/mountinfo.
type mountInfo struct {
	Point, FSType, Source string
}

func readMounts() ([]mountInfo, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountInfo(f)
}

// parseMountInfo parses proc(5) mountinfo lines; lines it cannot read are
// skipped (the kernel's format is stable; a torn read is not an error).
func parseMountInfo(r io.Reader) ([]mountInfo, error) {
	var out []mountInfo
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" && i >= 6 {
				sep = i
				break
			}
		}
		if sep < 0 || sep+2 >= len(fields) {
			continue
		}
		out = append(out, mountInfo{Point: unescapeMount(fields[4]), FSType: fields[sep+1], Source: fields[sep+2]})
	}
	return out, sc.Err()
}

// unescapeMount undoes the octal escapes (\040 for space ...) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

func under(p, root string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// unmountNew unmounts, deepest first, every mount that is not in before
// and lies under one of roots. Stacked mounts are unmounted repeatedly.
func unmountNew(before map[string]bool, roots []string) error {
	var errs []error
	for range 5 {
		ms, err := readMounts()
		if err != nil {
			return fmt.Errorf("%w: read mountinfo: %v", ErrTeardown, err)
		}
		var todo []string
		for _, m := range ms {
			if before[m.Point] {
				continue
			}
			for _, r := range roots {
				if under(m.Point, r) {
					todo = append(todo, m.Point)
					break
				}
			}
		}
		if len(todo) == 0 {
			return nil
		}
		sort.Slice(todo, func(i, j int) bool { return len(todo[i]) > len(todo[j]) })
		errs = errs[:0]
		for _, p := range todo {
			if err := unix.Unmount(p, 0); err != nil && err != unix.EINVAL && err != unix.ENOENT {
				if err2 := unix.Unmount(p, unix.MNT_DETACH); err2 != nil && err2 != unix.EINVAL && err2 != unix.ENOENT {
					errs = append(errs, fmt.Errorf("%w: unmount %s: %v", ErrTeardown, p, err2))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// cgroupMounts lists the mount points of every cgroup hierarchy (v1 and v2).
func cgroupMounts() ([]string, error) {
	ms, err := readMounts()
	if err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]bool{}
	for _, m := range ms {
		if (m.FSType == "cgroup" || m.FSType == "cgroup2") && !seen[m.Point] {
			seen[m.Point] = true
			out = append(out, m.Point)
		}
	}
	return out, nil
}

// cgroupTree lists root and every cgroup below it, deepest first.
func cgroupTree(root string) []string {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	return dirs
}

// killCgroupProcs SIGKILLs every process in the cgroups under root. Only
// used on the kubepods tree, which the node created (it refuses to start
// when one exists), so everything in it is a container of ours.
func killCgroupProcs(root string) int {
	n := 0
	for _, d := range cgroupTree(root) {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 && pid != os.Getpid() {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					n++
				}
			}
		}
	}
	return n
}

// removeCgroupTree rmdirs root and everything below it, bottom-up,
// retrying while the kernel still reports the cgroups busy.
func removeCgroupTree(root string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var last error
		for _, d := range cgroupTree(root) {
			if err := syscall.Rmdir(d); err != nil && err != syscall.ENOENT {
				last = fmt.Errorf("%w: rmdir %s: %v", ErrTeardown, d, err)
			}
		}
		if _, err := os.Stat(root); os.IsNotExist(err) {
			return nil
		}
		if time.Now().After(deadline) {
			return last
		}
		killCgroupProcs(root)
		time.Sleep(200 * time.Millisecond)
	}
}

// kubeletSysctls are the kernel settings the kubelet rewrites at start
// (setupKernelTunables, protectKernelDefaults=false) and ptp's ip_forward:
// host-wide state that teardown puts back.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
}

func readSysctls() map[string]string {
	out := map[string]string{}
	for _, k := range kubeletSysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			out[k] = strings.TrimSpace(string(b))
		}
	}
	return out
}

func restoreSysctls(want map[string]string) error {
	var errs []error
	for k, v := range want {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil || strings.TrimSpace(string(b)) == v {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("%w: restore sysctl %s=%s: %v", ErrTeardown, k, v, err))
		}
	}
	return errors.Join(errs...)
}

func netLinks() []string {
	ents, _ := os.ReadDir("/sys/class/net")
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// deleteNewVeths removes veth links that did not exist before: the ptp
// plugin's host ends, normally gone with their network namespace.
func deleteNewVeths(before []string) error {
	had := map[string]bool{}
	for _, l := range before {
		had[l] = true
	}
	var errs []error
	for _, l := range netLinks() {
		if had[l] || !strings.HasPrefix(l, "veth") {
			continue
		}
		out, err := exec.Command("ip", "link", "delete", l).CombinedOutput()
		if _, serr := os.Stat(filepath.Join("/sys/class/net", l)); os.IsNotExist(serr) {
			continue // gone, by us or with its namespace meanwhile
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: ip link delete %s: %v: %s", ErrTeardown, l, err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// hostHasIP reports whether an interface of this host holds ip.
func hostHasIP(ip string) bool {
	want := net.ParseIP(ip)
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(want) {
			return true
		}
	}
	return false
}

// ipAddr runs `ip addr VERB ADDR dev DEV` for addr = "ADDR dev DEV".
func ipAddr(verb, addr string) error {
	args := append([]string{"addr", verb}, strings.Fields(addr)...)
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// removeAddr deletes an address StartNode added; one already gone is fine.
func removeAddr(addr string) error {
	ip, _, _ := strings.Cut(addr, "/")
	if !hostHasIP(ip) {
		return nil
	}
	if err := ipAddr("del", addr); err != nil {
		return fmt.Errorf("%w: %v", ErrTeardown, err)
	}
	return nil
}
