package oomwatch

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedUpToDate regenerates the BPF object and bindings with the
// //go:generate line of gen.go into a temporary directory and requires
// them to equal the committed files byte for byte. It skips (saying what to
// install) where clang-19 is absent, so only CI's generate job and
// developers with the toolchain run it.
func TestGeneratedUpToDate(t *testing.T) {
	for _, tool := range []string{"go", "clang-19", "llvm-strip-19"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not in PATH: cannot regenerate (apt-get install --no-install-recommends clang-19 llvm-19 libbpf-dev)", tool)
		}
	}
	if _, err := os.Stat("/usr/include/bpf/bpf_helpers.h"); err != nil {
		t.Skipf("libbpf headers missing (apt-get install libbpf-dev): %v", err)
	}
	src, err := os.ReadFile("gen.go")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, line := range strings.Split(string(src), "\n") {
		if rest, ok := strings.CutPrefix(line, "//go:generate go tool "); ok {
			args = strings.Fields(rest)
		}
	}
	if len(args) == 0 || args[0] != "bpf2go" {
		t.Fatalf("gen.go has no //go:generate go tool bpf2go line")
	}
	out := t.TempDir()
	args = append([]string{"tool", args[0], "-output-dir", out}, args[1:]...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOPACKAGE=oomwatch", "GOFILE=gen.go")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	for _, f := range []string{"oomwatch_bpfel.go", "oomwatch_bpfel.o"} {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from a fresh go generate (%d vs %d bytes): run go generate ./agent/oomwatch and commit", f, len(got), len(want))
		}
	}
}
