// Package tier gates tests by test-bed tier, so that a plain `go test ./...`
// runs only what needs nothing but Go, and every skip says what to run
// instead.
//
// Tiers (each enabled by an environment variable that the Makefile sets):
//
//	unit        always: pure logic, fixtures, fake clientsets
//	kernel      CGPILOT_TEST_KERNEL=1, root: real cgroup writes on this host (make test-kernel)
//	v2          inside the cgroup v2 VM; the VM runner sets CGPILOT_TEST_KERNEL=1 (make test-v2)
//	e2e         CGPILOT_TEST_E2E=1: real etcd + kube-apiserver (make test-e2e)
//	node        CGPILOT_TEST_NODE=1, root: real kubelet + containerd 2 + runc (make test-e2e; CGPILOT_RUNTIME_BINS)
//
// It imports nothing of cgpilot.
package tier

import (
	"os"
	"path/filepath"
	"testing"
)

func enabled(name string) bool { return os.Getenv(name) == "1" }

// Kernel skips t unless the kernel tier is enabled and the test runs as root.
func Kernel(t testing.TB) {
	t.Helper()
	if !enabled("CGPILOT_TEST_KERNEL") {
		t.Skip("kernel tier: set CGPILOT_TEST_KERNEL=1 and run as root (make test-kernel, or make test-v2 for cgroup v2)")
	}
	if os.Geteuid() != 0 {
		t.Skip("kernel tier: needs root to write cgroups")
	}
}

// E2E skips t unless the control-plane tier is enabled. It returns the
// directory holding the Kubernetes binaries (CGPILOT_K8S_BINS, set by the
// Makefile from test/k8sbins/build.sh).
func E2E(t testing.TB) string {
	t.Helper()
	if !enabled("CGPILOT_TEST_E2E") {
		t.Skip("e2e tier: set CGPILOT_TEST_E2E=1 and CGPILOT_K8S_BINS (make test-e2e builds the binaries and sets both)")
	}
	dir := os.Getenv("CGPILOT_K8S_BINS")
	if dir == "" {
		t.Fatal("e2e tier enabled but CGPILOT_K8S_BINS is empty: run test/k8sbins/build.sh, or make test-e2e")
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("e2e tier: %s missing in CGPILOT_K8S_BINS=%s: run make deps", b, dir)
		}
	}
	return dir
}

// Descheduler returns the upstream descheduler binary the rescheduling
// tests run (CGPILOT_DESCHEDULER, set by the Makefile from
// test/deschedbin/build.sh); it skips t outside the e2e tier and fails it
// when the e2e tier is on but the binary is missing.
func Descheduler(t testing.TB) string {
	t.Helper()
	E2E(t)
	bin := os.Getenv("CGPILOT_DESCHEDULER")
	if bin == "" {
		t.Fatal("e2e tier enabled but CGPILOT_DESCHEDULER is empty: run test/deschedbin/build.sh, or make test-e2e")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("e2e tier: descheduler %s: %v (run test/deschedbin/build.sh)", bin, err)
	}
	return bin
}

// Node skips t unless the node tier (real kubelet + containerd) is enabled
// and the test runs as root, and fails it when the node's container runtime
// is missing: CGPILOT_RUNTIME_BINS, set by the Makefile from
// test/runtimebins/build.sh, must hold containerd 2, its runc shim, ctr and
// runc (the harness's default runtime). It returns the Kubernetes binaries
// directory.
func Node(t testing.TB) string {
	t.Helper()
	if !enabled("CGPILOT_TEST_NODE") {
		t.Skip("node tier: set CGPILOT_TEST_NODE=1 as root (make test-e2e sets it, and builds containerd 2 and runc, when the CNI plugins and libseccomp-dev are installed: make deps)")
	}
	if os.Geteuid() != 0 {
		t.Skip("node tier: needs root for kubelet and containerd")
	}
	bins := E2E(t)
	dir := os.Getenv("CGPILOT_RUNTIME_BINS")
	if dir == "" {
		t.Fatal("node tier enabled but CGPILOT_RUNTIME_BINS is empty: run test/runtimebins/build.sh, or make test-e2e")
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("node tier: %s missing in CGPILOT_RUNTIME_BINS=%s: run make deps", b, dir)
		}
	}
	return bins
}

// SharedData returns the path of ../shared/data/<sub> beside the repository
// root (or $CGPILOT_SHARED_DATA/<sub>), and skips t when it is absent: the
// project must work without the team's data.
func SharedData(t testing.TB, sub string) string {
	t.Helper()
	base := os.Getenv("CGPILOT_SHARED_DATA")
	if base == "" {
		root, err := RepoRoot()
		if err != nil {
			t.Skipf("shared data: %v", err)
		}
		base = filepath.Join(root, "..", "shared", "data")
	}
	p := filepath.Join(base, sub)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("shared data %s not present (%v): these tests need ../shared/data beside the repository", p, err)
	}
	return p
}

// RepoRoot finds the directory of the main module's go.mod from the working
// directory upwards (tests run in their package directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && isMainModule(b) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

func isMainModule(gomod []byte) bool {
	const want = "module github.com/cgpilot/cgpilot\n"
	return len(gomod) >= len(want) && string(gomod[:len(want)]) == want
}
