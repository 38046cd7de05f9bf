//go:build linux

package cgtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

const envChild = "CGTEST_CHILD"

// Main runs the child role when the test binary was re-executed by Start,
// and the tests otherwise. Call it from TestMain.
func Main(m *testing.M) {
	if role := os.Getenv(envChild); role != "" {
		os.Exit(child(role))
	}
	os.Exit(m.Run())
}

// Kinds of child process.
const (
	// Busy spins on one CPU forever.
	Busy = "busy"
	// Sleep does nothing until killed.
	Sleep = "sleep"
	// Hog allocates and touches the given MiB, one MiB at a time, then
	// sleeps; above the memory limit the kernel OOM-kills it.
	Hog = "hog"
)

func child(role string) int {
	// Wait until the parent has placed us in the cgroups: v1 memory charges
	// only pages touched after the move.
	var b [1]byte
	if _, err := os.Stdin.Read(b[:]); err != nil {
		return 3
	}
	kind, arg, _ := cut(role)
	switch kind {
	case Busy:
		runtime.GOMAXPROCS(1)
		x := 0
		for {
			x++
		}
	case Hog:
		mib, err := strconv.Atoi(arg)
		if err != nil {
			return 4
		}
		var keep [][]byte
		for i := 0; i < mib; i++ {
			chunk := make([]byte, 1<<20)
			for j := 0; j < len(chunk); j += 4096 {
				chunk[j] = 1
			}
			keep = append(keep, chunk)
		}
		fmt.Printf("allocated %d MiB\n", len(keep))
		// Not select{}: in a static binary with nothing else to run the
		// runtime calls that a deadlock and exits (seen in the v2 VM), and
		// keep must stay live or the GC may hand its pages back.
		for {
			time.Sleep(time.Hour)
			runtime.KeepAlive(keep)
		}
	case Sleep:
		for {
			time.Sleep(time.Hour)
		}
	}
	return 5
}

func cut(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// Proc is a child process of the test running inside a sandbox cgroup.
type Proc struct {
	Pid  int
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs a child of kind (Busy, Sleep, or Hog with arg MiB) and places
// it in rel (relative to the sandbox) in every hierarchy before it starts
// working. It is killed at cleanup.
func (s *Sandbox) Start(rel, kind string, arg int) *Proc {
	s.t.Helper()
	role := kind
	if kind == Hog {
		role += ":" + strconv.Itoa(arg)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+role)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("cgtest: start child: %v", err)
	}
	p := &Proc{Pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	go func() { p.err = cmd.Wait(); close(p.done) }()
	for key := range s.Dirs {
		f := filepath.Join(s.Path(key, rel), "cgroup.procs")
		if err := os.WriteFile(f, []byte(strconv.Itoa(p.Pid)), 0); err != nil {
			s.t.Fatalf("cgtest: move %d to %s: %v", p.Pid, f, err)
		}
	}
	if _, err := stdin.Write([]byte{1}); err != nil {
		s.t.Fatalf("cgtest: release child: %v", err)
	}
	return p
}

// Kill kills the process (SIGKILL, by PID) and waits for it.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Wait waits up to timeout for the process to exit; exited is false on
// timeout, and err is the exit error of cmd.Wait.
func (p *Proc) Wait(timeout time.Duration) (exited bool, err error) {
	select {
	case <-p.done:
		return true, p.err
	case <-time.After(timeout):
		return false, nil
	}
}

// Signaled reports whether the process ended by sig.
func (p *Proc) Signaled(sig syscall.Signal) bool {
	select {
	case <-p.done:
	default:
		return false
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}
