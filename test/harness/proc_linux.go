//go:build linux

package harness

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProcRecord identifies a process the harness started. StartTime (field 22
// of /proc/<pid>/stat) guards against signalling a reused PID.
type ProcRecord struct {
	Name      string   `json:"name"`
	PID       int      `json:"pid"`
	StartTime uint64   `json:"startTime"`
	Args      []string `json:"args"`
	Log       string   `json:"log"`
}

// children holds the processes this process started, so that stopping one
// reaps it (a zombie would look alive to kill(pid, 0)).
var children sync.Map // pid -> chan struct{} closed on exit

// startProc starts a binary with its output in logPath. detach makes the
// process outlive this one (the testbed command); otherwise it dies with us.
func startProc(name, logPath string, detach bool, env []string, bin string, args ...string) (ProcRecord, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return ProcRecord{}, fmt.Errorf("%w: %s: log %s: %v", ErrStart, name, logPath, err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	// Own process group: a terminal's Ctrl-C reaches only us, and we stop
	// the children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return ProcRecord{}, fmt.Errorf("%w: %s: %v", ErrStart, name, err)
	}
	// A detached process is reaped by init once we exit; until then a
	// dead one is a zombie, which Alive treats as gone.
	if !detach {
		done := make(chan struct{})
		children.Store(cmd.Process.Pid, done)
		go func() {
			_ = cmd.Wait()
			close(done)
		}()
	}
	st, _ := procStartTime(cmd.Process.Pid)
	return ProcRecord{Name: name, PID: cmd.Process.Pid, StartTime: st, Args: append([]string{bin}, args...), Log: logPath}, nil
}

// procStartTime reads the start time of pid in clock ticks since boot.
func procStartTime(pid int) (uint64, error) {
	st, _, err := procStat(pid)
	return st, err
}

// procStat returns the start time and the one-letter state of pid.
func procStat(pid int) (uint64, byte, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	// comm may hold spaces and parentheses: the fields start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no comm", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: starttime %q: %v", pid, f[19], err)
	}
	return st, f[0][0], nil
}

// Alive reports whether the recorded process still runs (not a zombie, and
// its PID not reused by another process).
func (p ProcRecord) Alive() bool {
	st, state, err := procStat(p.PID)
	if err != nil || state == 'Z' || state == 'X' {
		return false
	}
	return p.StartTime == 0 || st == p.StartTime
}

// exited returns a channel closed when p has exited, when we know it (our child).
func (p ProcRecord) exited() <-chan struct{} {
	if v, ok := children.Load(p.PID); ok {
		return v.(chan struct{})
	}
	return nil
}

// Stop sends SIGTERM, waits up to grace, then SIGKILL and waits again.
func (p ProcRecord) Stop(grace time.Duration) error {
	if !p.Alive() {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGTERM)
	if p.waitGone(grace) {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	if p.waitGone(10 * time.Second) {
		return nil
	}
	return fmt.Errorf("%s (pid %d) still alive after SIGKILL", p.Name, p.PID)
}

func (p ProcRecord) waitGone(d time.Duration) bool {
	deadline := time.Now().Add(d)
	ch := p.exited()
	for time.Now().Before(deadline) {
		if ch != nil {
			select {
			case <-ch:
				return true
			case <-time.After(50 * time.Millisecond):
			}
		} else {
			time.Sleep(50 * time.Millisecond)
		}
		if !p.Alive() {
			// Give our own Wait goroutine a moment to reap it.
			if ch != nil {
				select {
				case <-ch:
				case <-time.After(time.Second):
				}
			}
			return true
		}
	}
	return false
}

// tailFile returns the last n lines of a log, for error messages.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log %s: %v)", path, err)
	}
	defer f.Close()
	const max = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		_, _ = f.Seek(fi.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// procsMatching lists live PIDs of the named programs (by the base name of
// argv[0]) whose command line contains needle, which is always a path inside
// a harness directory: together they cannot match a process the harness
// did not start (not even a `tail -f` of one of its logs).
func procsMatching(needle string, programs ...string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), needle) {
			continue
		}
		argv0, _, _ := strings.Cut(string(b), "\x00")
		if len(programs) > 0 && !slices.Contains(programs, filepath.Base(argv0)) {
			continue
		}
		if _, state, err := procStat(pid); err == nil && state != 'Z' {
			pids = append(pids, pid)
		}
	}
	return pids
}
