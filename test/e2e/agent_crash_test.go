//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgpilot/cgpilot/agent/pools"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/test/tier"
)

// agentProc is the real cgpilot-agent binary run as a subprocess, so the
// test can SIGKILL it at any point.
type agentProc struct {
	t    testing.TB
	bin  string
	args []string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func buildAgent(t testing.TB) string { return buildCmd(t, "cgpilot-agent") }

func buildCmd(t testing.TB, name string) string {
	t.Helper()
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return bin
}

func (b *bed) agentProcess(t testing.TB) *agentProc {
	t.Helper()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config.yaml")
	yaml := fmt.Sprintf("cpus: %q\ncgroupParent: %s\ncheckpointPath: %s\nkubeletCPUManagerState: \"\"\nsweepInterval: 1s\n",
		b.cfg.CPUs, b.cfg.CgroupParent, b.cfg.CheckpointPath)
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &agentProc{t: t, bin: buildAgent(t), log: filepath.Join(dir, "agent.log"), args: []string{
		"--config", cfgFile, "--kubeconfig", b.cp.Kubeconfig(), "--node-name", testNode,
		"--health-addr", "127.0.0.1:0", "--socket", b.cfg.SocketPath,
	}}
	t.Cleanup(func() {
		a.kill()
		if t.Failed() {
			if out, err := os.ReadFile(a.log); err == nil {
				t.Logf("agent log:\n%s", tail(string(out), 4000))
			}
		}
	})
	return a
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (a *agentProc) start() {
	a.t.Helper()
	f, err := os.OpenFile(a.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		a.t.Fatal(err)
	}
	a.cmd = exec.Command(a.bin, a.args...)
	a.cmd.Stdout, a.cmd.Stderr = f, f
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	f.Close()
	a.done = make(chan struct{})
	go func() { a.cmd.Wait(); close(a.done) }()
}

// kill SIGKILLs the agent (our own child, by PID) and waits for it.
func (a *agentProc) kill() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	a.cmd = nil
}

// waitReady waits until the agent's local API answers.
func (a *agentProc) waitReady(socket string) {
	a.t.Helper()
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	eventually(a.t, "agent API up", func() (bool, string) {
		resp, err := c.Get("http://agent/v1/pools")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
}

// consistent checks the whole node: the checkpoint decodes (so no CPU is
// held twice), every exclusive pod named in want holds what the
// checkpoint, its annotation and its cgroup say, and the shared pod runs
// on all − exclusive.
func (b *bed) consistent(t testing.TB, sharedRel string, want map[string]string) (bool, string) {
	cp, err := pools.ReadCheckpoint(b.cfg.CheckpointPath)
	if err != nil {
		return false, err.Error()
	}
	if len(cp) != len(want) {
		return false, fmt.Sprintf("checkpoint has %d allocations, want %d", len(cp), len(want))
	}
	excl := mustSet(t, "")
	for name, rel := range want {
		_, ann := b.status(t, name)
		pod, err := b.cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		a, ok := cp[string(pod.UID)]
		if !ok {
			return false, name + " missing from checkpoint"
		}
		if ann[local.AnnotationAllocatedCPUs] != a.CPUs.String() {
			return false, fmt.Sprintf("%s annotation %s, checkpoint %s", name, ann[local.AnnotationAllocatedCPUs], a.CPUs)
		}
		if got := b.k.CPUSet(rel); got != a.CPUs.String() {
			return false, fmt.Sprintf("%s cgroup %s, checkpoint %s", name, got, a.CPUs)
		}
		excl = excl.Union(a.CPUs)
	}
	shared := mustSet(t, b.cfg.CPUs).Difference(excl).String()
	if got := b.k.CPUSet(sharedRel); got != shared {
		return false, fmt.Sprintf("shared container on %s, want %s", got, shared)
	}
	return true, ""
}

// TestE2EKillMidChangeAndRestart SIGKILLs the real agent binary at several
// points during an allocation and a release, restarts it, and checks that
// the node converges to one consistent state; then it corrupts the
// checkpoint and checks the rebuild from annotations and cgroups.
func TestE2EKillMidChangeAndRestart(t *testing.T) {
	b := newBed(t)
	_, sRel, _ := b.createPod(t, "web", "Burstable", nil, "app")
	a := b.agentProcess(t)
	a.start()
	a.waitReady(b.cfg.SocketPath)
	for i, delay := range []time.Duration{0, 5 * time.Millisecond, 30 * time.Millisecond, 150 * time.Millisecond} {
		name := fmt.Sprintf("db-%d", i)
		_, rel, _ := b.createPod(t, name, "Guaranteed", map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "1"}, "postgres")
		time.Sleep(delay)
		a.kill()
		a.start()
		a.waitReady(b.cfg.SocketPath)
		eventually(t, fmt.Sprintf("consistent after kill %v into allocation", delay), func() (bool, string) {
			return b.consistent(t, sRel+"/app", map[string]string{name: rel + "/postgres"})
		})
		if err := b.cs.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		a.kill()
		a.start()
		a.waitReady(b.cfg.SocketPath)
		eventually(t, fmt.Sprintf("consistent after kill %v into release", delay), func() (bool, string) {
			return b.consistent(t, sRel+"/app", nil)
		})
	}

	// Corrupt checkpoint: moved aside, state rebuilt from the pod's
	// allocated-cpus annotation, the same core kept, a Warning Event.
	_, rel, _ := b.createPod(t, "db", "Guaranteed", map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "1"}, "postgres")
	eventually(t, "allocated", func() (bool, string) {
		return b.consistent(t, sRel+"/app", map[string]string{"db": rel + "/postgres"})
	})
	_, ann := b.status(t, "db")
	before := ann[local.AnnotationAllocatedCPUs]
	a.kill()
	raw, _ := os.ReadFile(b.cfg.CheckpointPath)
	if err := os.WriteFile(b.cfg.CheckpointPath, []byte(strings.Replace(string(raw), `"cpus":"`, `"cpus":"9,`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	a.start()
	a.waitReady(b.cfg.SocketPath)
	eventually(t, "rebuilt after corruption", func() (bool, string) {
		return b.consistent(t, sRel+"/app", map[string]string{"db": rel + "/postgres"})
	})
	if _, ann := b.status(t, "db"); ann[local.AnnotationAllocatedCPUs] != before {
		t.Fatalf("rebuild moved db from %s to %s", before, ann[local.AnnotationAllocatedCPUs])
	}
	aside, _ := filepath.Glob(b.cfg.CheckpointPath + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("corrupt checkpoint not moved aside: %v", aside)
	}
	eventually(t, "CheckpointCorrupt Event", func() (bool, string) {
		evs, _ := b.cs.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "reason=CheckpointCorrupt"})
		return evs != nil && len(evs.Items) > 0, ""
	})

	// The real cgpilotctl against the real agent.
	ctl := buildCmd(t, "cgpilotctl")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"pods"}, []string{"db", "Allocated", before, "web", "Shared"}},
		{[]string{"pools", "-o", "json"}, []string{`"exclusive":"` + before + `"`, `"name":"db"`}},
		{[]string{"explain", "default/db"}, []string{"DECISION", "exclusive cpus " + before, "cpuset.cpus=" + before}},
		{[]string{"events"}, []string{"CheckpointCorrupt"}},
	} {
		out, err := exec.Command(ctl, append(append([]string{tc.args[0]}, "-socket", b.cfg.SocketPath), tc.args[1:]...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("cgpilotctl %v: %v\n%s", tc.args, err, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Fatalf("cgpilotctl %v lacks %q:\n%s", tc.args, w, out)
			}
		}
		t.Logf("cgpilotctl %s:\n%s", strings.Join(tc.args, " "), out)
	}
}
