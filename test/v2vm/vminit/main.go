//go:build linux

package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	marker       = "V2VM:"
	cgroupRoot   = "/sys/fs/cgroup"
	payloadDir   = "/v2vm"
	manifestFile = payloadDir + "/manifest"
)

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stdout, marker+" "+format+"\n", a...)
}

func main() {
	openConsole()
	mountAll()
	loopbackUp()
	logf("init started uptime=%s", uptime())
	loadModules()
	enableControllers()
	report()

	code := runTests()
	logf("EXIT_CODE=%d", code)
	powerOff()
}

// openConsole makes sure fds 0-2 exist: the kernel only opens /dev/console
// for init when the initramfs has that node, and run.sh packs no device
// nodes (it needs no root to build the image).
func openConsole() {
	mount("devtmpfs", "/dev", "devtmpfs", syscall.MS_NOSUID, "mode=0755")
	for _, c := range []string{"/dev/console", "/dev/ttyS0"} {
		fd, err := syscall.Open(c, syscall.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			continue
		}
		for i := 0; i < 3; i++ {
			_ = syscall.Dup3(fd, i, 0)
		}
		if fd > 2 {
			_ = syscall.Close(fd)
		}
		return
	}
}

func mount(src, dst, fstype string, flags uintptr, data string) {
	_ = os.MkdirAll(dst, 0o755)
	if err := syscall.Mount(src, dst, fstype, flags, data); err != nil && err != syscall.EBUSY {
		logf("mount %s on %s (%s): %v", src, dst, fstype, err)
	}
}

func mountAll() {
	const nsd = syscall.MS_NOSUID | syscall.MS_NODEV
	mount("proc", "/proc", "proc", nsd|syscall.MS_NOEXEC, "")
	mount("sysfs", "/sys", "sysfs", nsd|syscall.MS_NOEXEC, "")
	mount("tmpfs", "/tmp", "tmpfs", nsd, "")
	mount("tmpfs", "/run", "tmpfs", nsd, "")
	// The options a systemd host uses, so tests see the semantics of a real node.
	mount("cgroup2", cgroupRoot, "cgroup2", nsd|syscall.MS_NOEXEC, "nsdelegate,memory_recursiveprot")
	mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, "")
	mount("bpf", "/sys/fs/bpf", "bpf", 0, "")
}

// loopbackUp brings lo up, as every node has it: tests serve on 127.0.0.1
// (the kernel gives lo 127.0.0.1/8 when it comes up). No netlink package:
// two ioctls on struct ifreq (name[16], then the flags).
func loopbackUp() {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		logf("loopback: socket: %v", err)
		return
	}
	defer syscall.Close(fd)
	var ifr [40]byte
	copy(ifr[:], "lo")
	ioctl := func(req uintptr) error {
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
			return e
		}
		return nil
	}
	if err := ioctl(syscall.SIOCGIFFLAGS); err != nil {
		logf("loopback: get flags: %v", err)
		return
	}
	flags := binary.NativeEndian.Uint16(ifr[16:18]) | syscall.IFF_UP | syscall.IFF_RUNNING
	binary.NativeEndian.PutUint16(ifr[16:18], flags)
	if err := ioctl(syscall.SIOCSIFFLAGS); err != nil {
		logf("loopback: set up: %v", err)
	}
}

// loadModules loads the kernel modules run.sh packed (V2VM_MODULES) in the
// order of payloadDir/modules/order, dependencies first: the node tier's
// overlay and veth, which Debian's kernel builds as modules. A module that
// fails to load is reported; the tests that need it then fail and say why.
func loadModules() {
	lines, err := readLinesFile(payloadDir + "/modules/order")
	if err != nil {
		logf("read modules/order: %v", err)
		return
	}
	for _, rel := range lines {
		f, err := os.Open(payloadDir + "/modules/" + rel)
		if err != nil {
			logf("module %s: %v", rel, err)
			continue
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		_ = f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			logf("module %s: finit_module: %v", rel, err)
			continue
		}
		logf("module %s loaded", rel)
	}
}

// enableControllers turns on every controller for the root's children, as
// systemd does on a node; a test then only has to enable them further down
// its own subtree.
func enableControllers() {
	b, err := os.ReadFile(cgroupRoot + "/cgroup.controllers")
	if err != nil {
		logf("read cgroup.controllers: %v", err)
		return
	}
	for _, c := range strings.Fields(string(b)) {
		if err := os.WriteFile(cgroupRoot+"/cgroup.subtree_control", []byte("+"+c), 0o644); err != nil {
			logf("enable +%s: %v", c, err)
		}
	}
}

// report prints the facts a failing test's log needs: which kernel, which
// controllers, and whether the features cgpilot probes for are present.
func report() {
	var u syscall.Utsname
	_ = syscall.Uname(&u)
	logf("kernel %s", cString(u.Release[:]))
	logf("cgroup2 controllers=[%s] subtree_control=[%s]",
		readTrim(cgroupRoot+"/cgroup.controllers"), readTrim(cgroupRoot+"/cgroup.subtree_control"))
	logf("btf=%v psi=%v oom:mark_victim=%v cpus=%s",
		exists("/sys/kernel/btf/vmlinux"), exists("/proc/pressure/cpu"),
		exists("/sys/kernel/tracing/events/oom/mark_victim"), readTrim("/sys/devices/system/cpu/online"))
}

func runTests() int {
	f, err := os.Open(manifestFile)
	if err != nil {
		logf("open manifest: %v", err)
		return 2
	}
	pkgs, err := parseManifest(f)
	_ = f.Close()
	if err != nil {
		logf("%v", err)
		return 2
	}
	args, err := readLinesFile(payloadDir + "/args")
	if err != nil {
		logf("read args: %v", err)
		return 2
	}
	extraEnv, err := readLinesFile(payloadDir + "/env")
	if err != nil {
		logf("read env: %v", err)
		return 2
	}
	env := append([]string{"PATH=/", "HOME=/root", "TMPDIR=/tmp", "V2VM=1"}, extraEnv...)

	codes := make([]int, 0, len(pkgs))
	logf("test start uptime=%s packages=%d args=%q", uptime(), len(pkgs), args)
	begin := time.Now()
	for _, p := range pkgs {
		start := time.Now()
		cmd := exec.Command(p.dir+"/test.bin", args...)
		cmd.Dir = p.dir // tests open testdata/ relative to their package directory
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		code := exitCode(cmd.Run())
		codes = append(codes, code)
		fmt.Println(summaryLine(p.importPath, code, time.Since(start)))
	}
	logf("test end uptime=%s duration=%s", uptime(), time.Since(begin).Round(time.Millisecond))
	return overallCode(codes)
}

func powerOff() {
	syscall.Sync()
	// qemu runs with -no-reboot, so a restart ends it too if ACPI power-off fails.
	_ = syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF)
	_ = syscall.Reboot(syscall.LINUX_REBOOT_CMD_RESTART)
	select {}
}

func readLinesFile(p string) ([]string, error) {
	f, err := os.Open(p)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseLines(f)
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func uptime() string {
	if f := strings.Fields(readTrim("/proc/uptime")); len(f) > 0 {
		return f[0]
	}
	return "?"
}

func cString(a []int8) string {
	b := make([]byte, 0, len(a))
	for _, c := range a {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}
