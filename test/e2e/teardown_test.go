//go:build linux

package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

// TestControlPlaneTeardownLeavesNothing: after Stop no process, listener
// or directory of the control plane (with controllers) is left.
func TestControlPlaneTeardownLeavesNothing(t *testing.T) {
	bins := tier.E2E(t)
	before := takeSnapshot(t)
	cp := harness.MustStart(t, bins, harness.Options{Controllers: true})
	bed := recordBed(cp)
	if len(bed.procs) != 4 || len(bed.ports) != 5 {
		t.Fatalf("recorded %d processes and %d ports, want 4 and 5", len(bed.procs), len(bed.ports))
	}
	ls := listeners(t)
	for _, p := range bed.ports {
		if p != cp.State.Ports["etcd-peer"] && !ls[p] {
			t.Errorf("nothing listens on recorded port %d before teardown: the leak check would prove nothing", p)
		}
	}
	if ps := processesMentioning(bed.dir); len(ps) < 4 {
		t.Errorf("only %d processes mention %s before teardown", len(ps), bed.dir)
	}
	start := time.Now()
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: control plane teardown %v", time.Since(start).Round(time.Millisecond))
	assertNoLeaks(t, before, bed)
}

// TestInterruptTearsDown runs a child test process that starts a control
// plane, interrupts it with SIGINT as Ctrl-C would, and checks that the
// harness's signal handler tore everything down before the child exited.
func TestInterruptTearsDown(t *testing.T) {
	tier.E2E(t)
	before := takeSnapshot(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldControlPlane$", "-test.v")
	cmd.Env = append(os.Environ(), "CGPILOT_E2E_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	var dir string
	sc := bufio.NewScanner(out)
	ready := make(chan struct{})
	go func() {
		for sc.Scan() {
			line := sc.Text()
			t.Log("child: " + line)
			if i := strings.Index(line, "HOLDING "); i >= 0 && dir == "" {
				dir = strings.TrimSpace(line[i+len("HOLDING "):])
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(3 * time.Minute):
		t.Fatal("child never reported its control plane")
	}
	if ps := processesMentioning(dir); len(ps) != 2 {
		t.Fatalf("child's test bed runs %d processes, want 2 (etcd, kube-apiserver): %v", len(ps), ps)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("child exit: %v, want exit status 2 from the harness's handler", err)
	}
	assertNoLeaks(t, before, bedRecord{dir: dir})
}

// TestHelperHoldControlPlane is the child of TestInterruptTearsDown.
func TestHelperHoldControlPlane(t *testing.T) {
	if os.Getenv("CGPILOT_E2E_HELPER") != "1" {
		t.Skip("helper process of TestInterruptTearsDown")
	}
	bins := tier.E2E(t)
	cp, err := harness.StartControlPlane(context.Background(), harness.Options{BinDir: bins})
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("HOLDING " + cp.Dir() + "\n")
	time.Sleep(5 * time.Minute)
	t.Error("not interrupted")
}
