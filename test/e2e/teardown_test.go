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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// TestInterruptTearsDown runs a child test process that starts a test bed
// (a control plane; as root with the node tier also a node running a pod),
// interrupts it with SIGINT as Ctrl-C would, and checks that the harness's
// signal handler tore everything down before the child exited.
func TestInterruptTearsDown(t *testing.T) {
	tier.E2E(t)
	t.Run("control plane", func(t *testing.T) { interruptChild(t, "cp", 2) })
	t.Run("node", func(t *testing.T) {
		tier.Node(t)
		interruptChild(t, "node", 5) // + containerd, kubelet, the pod's shim
	})
}

func interruptChild(t *testing.T, mode string, wantProcs int) {
	before := takeSnapshot(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldTestBed$", "-test.v")
	cmd.Env = append(os.Environ(), "CGPILOT_E2E_HELPER="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// If this test fails early, the child must still tear down:
		// SIGINT, not SIGKILL.
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGINT)
			_ = cmd.Wait()
		}
	}()
	dirc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			t.Log("child: " + line)
			if i := strings.Index(line, "HOLDING "); i >= 0 {
				dirc <- strings.TrimSpace(line[i+len("HOLDING "):])
			}
		}
	}()
	var dir string
	select {
	case dir = <-dirc:
	case <-time.After(4 * time.Minute):
		t.Fatal("child never reported its test bed")
	}
	// Node processes carry the dir in their args too; shims carry the
	// containerd socket, which lies in it.
	if ps := processesMentioning(dir); len(ps) < wantProcs {
		t.Fatalf("child's test bed runs %d processes, want at least %d: %v", len(ps), wantProcs, ps)
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

// TestHelperHoldTestBed is the child of TestInterruptTearsDown.
func TestHelperHoldTestBed(t *testing.T) {
	mode := os.Getenv("CGPILOT_E2E_HELPER")
	if mode == "" {
		t.Skip("helper process of TestInterruptTearsDown")
	}
	bins := tier.E2E(t)
	ctx := context.Background()
	cp, err := harness.StartControlPlane(ctx, harness.Options{BinDir: bins})
	if err != nil {
		t.Fatal(err)
	}
	if mode == "node" {
		n, err := harness.StartNode(ctx, cp, harness.NodeOptions{Name: "cgpilot-interrupted"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cp.Client.CoreV1().Pods("default").Create(ctx, testPod("held", n.Name()), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "pod held running", 2*time.Minute, func() bool {
			p, err := cp.Client.CoreV1().Pods("default").Get(ctx, "held", metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning
		})
	}
	os.Stdout.WriteString("HOLDING " + cp.Dir() + "\n")
	time.Sleep(5 * time.Minute)
	t.Error("not interrupted")
}
