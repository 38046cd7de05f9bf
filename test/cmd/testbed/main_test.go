//go:build linux

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

func TestRunRejectsBadUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"sideways"}, {"up", "--no-such-flag"}} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}

func TestDownAndStatusOfNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "none")
	for _, cmd := range []string{"down", "status"} {
		var out bytes.Buffer
		if err := run([]string{cmd, "--dir", dir}, &out); err != nil || !strings.Contains(out.String(), "no test bed") {
			t.Errorf("%s of an empty dir: %v, %q", cmd, err, out.String())
		}
	}
}

// TestUpStatusDown is `make demo` / `make demo-down` without the node: up
// leaves the control plane running past the call, status sees it, down
// stops it by its recorded PIDs and removes the directory.
func TestUpStatusDown(t *testing.T) {
	bins := tier.E2E(t)
	dir := filepath.Join(t.TempDir(), "demo")
	var out bytes.Buffer
	if err := run([]string{"up", "--dir", dir, "--bins", bins}, &out); err != nil {
		t.Fatalf("up: %v\n%s", err, out.String())
	}
	t.Cleanup(func() { _ = harness.Teardown(dir) })
	t.Log(out.String())
	st, err := harness.LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Procs) != 4 {
		t.Fatalf("up recorded %d processes, want 4", len(st.Procs))
	}
	for _, p := range st.Procs {
		if !p.Alive() {
			t.Errorf("%s not running after up returned", p.Name)
		}
	}
	if !strings.Contains(out.String(), "export KUBECONFIG="+filepath.Join(dir, "kubeconfig")) {
		t.Errorf("up does not say how to use the kubeconfig:\n%s", out.String())
	}
	out.Reset()
	if err := run([]string{"up", "--dir", dir, "--bins", bins}, &out); err != nil || !strings.Contains(out.String(), "already runs") {
		t.Errorf("second up: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run([]string{"status", "--dir", dir}, &out); err != nil || strings.Count(out.String(), " running ") != 4 {
		t.Errorf("status: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run([]string{"down", "--dir", dir}, &out); err != nil {
		t.Fatalf("down: %v", err)
	}
	for _, p := range st.Procs {
		if p.Alive() {
			t.Errorf("%s (pid %d) survived down", p.Name, p.PID)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s survived down", dir)
	}
}

// TestUpDownWithNode is `make demo` as root: up --node leaves a Ready node
// running after up returns; down removes its processes, kubepods cgroups
// and lock.
func TestUpDownWithNode(t *testing.T) {
	bins := tier.Node(t)
	if m, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods"); len(m) > 0 {
		t.Skipf("kubepods cgroups exist (%v): another kubelet runs here", m)
	}
	dir := filepath.Join(t.TempDir(), "demo")
	var out bytes.Buffer
	if err := run([]string{"up", "--node", "--dir", dir, "--bins", bins}, &out); err != nil {
		t.Fatalf("up --node: %v\n%s", err, out.String())
	}
	t.Cleanup(func() { _ = harness.Teardown(dir) })
	if !strings.Contains(out.String(), "node cgpilot-node: Ready") {
		t.Errorf("up --node does not report a Ready node:\n%s", out.String())
	}
	st, err := harness.LoadState(dir)
	if err != nil || st.Node == nil || len(st.Node.Procs) != 2 {
		t.Fatalf("state after up --node: %v %+v", err, st)
	}
	procs := append(append([]harness.ProcRecord{}, st.Procs...), st.Node.Procs...)
	if m, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods"); len(m) == 0 {
		t.Error("no kubepods cgroup while the demo node runs")
	}
	out.Reset()
	if err := run([]string{"down", "--dir", dir}, &out); err != nil {
		t.Fatalf("down: %v", err)
	}
	for _, p := range procs {
		if p.Alive() {
			t.Errorf("%s (pid %d) survived down", p.Name, p.PID)
		}
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods"); len(m) > 0 {
		t.Errorf("kubepods cgroups survived down: %v", m)
	}
	for _, p := range []string{dir, harness.NodeLockFile} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived down", p)
		}
	}
}
