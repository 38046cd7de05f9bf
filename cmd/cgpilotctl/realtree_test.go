//go:build linux

package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/internal/cpulist"
	"github.com/cgpilot/cgpilot/test/tier"
)

// untgz extracts a must-gather sysinfo.tgz (sys/ and proc/ at the top) into
// a temporary directory, skipping anything that would leave it.
func untgz(t *testing.T, archive string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return dst
		}
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || strings.HasPrefix(name, "..") || h.Typeflag != tar.TypeReg {
			continue // the captures' symlinks are not needed by discovery
		}
		p := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCommandsOnRealNode runs both commands on a real OpenShift worker
// capture: 80 CPUs, isolcpus=0-4,11-79 (so 5-10 are housekeeping), and
// managed NVMe queues on every CPU.
func TestCommandsOnRealNode(t *testing.T) {
	dir := tier.SharedData(t, "nto-mustgather-irq-sysinfo")
	root := untgz(t, filepath.Join(dir, "bare-metal-worker1.internal.sysinfo.tgz"))

	code, out, stderr := runCmd("topology", "--root", root, "-o", "json")
	if code != 0 {
		t.Fatalf("topology: exit %d: %s", code, stderr)
	}
	var v topologyJSON
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	nvme := 0
	for _, q := range v.IRQs {
		if q.Kind == "nvme" && q.Queue != "" {
			nvme++
		}
	}
	if len(v.CPUs) != 80 || nvme != 80 || len(v.Reserved) != 6 || v.Reserved[0] != 5 {
		t.Errorf("%d CPUs, %d nvme queues, reserved %v; want 80, 80, 5-10", len(v.CPUs), nvme, v.Reserved)
	}

	code, out, stderr = runCmd("alloc", "--root", root, "--cpus", "8", "-o", "json")
	if code != 0 {
		t.Fatalf("alloc: exit %d: %s %s", code, out, stderr)
	}
	var r allocResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	got, err := cpulist.Parse(r.CPUs)
	if err != nil || got.Size() != 8 {
		t.Fatalf("alloc printed %q (%v)", r.CPUs, err)
	}
	if hk := got.Intersection(cpuset.New(5, 6, 7, 8, 9, 10)); !hk.IsEmpty() {
		t.Errorf("alloc %s includes housekeeping CPUs %s", got, hk)
	}
	// 74 allocatable CPUs: the default cap is 49.
	code, out, _ = runCmd("alloc", "--root", root, "--cpus", "50", "-o", "json")
	if code != 1 || !strings.Contains(out, `"reason":"over-cap"`) {
		t.Errorf("50 CPUs: exit %d, %s", code, out)
	}
}
