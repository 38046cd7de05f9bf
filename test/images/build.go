package images

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// PausePackage is the import path of the pause program.
const PausePackage = "github.com/cgpilot/cgpilot/test/images/pause"

// buildFlags and buildEnv make a static, reproducible linux/amd64 binary
// without symbols; the Dockerfile at the repository root builds the agent
// with the same (TestDockerfileBuildsLikeTheDemo).
var (
	buildFlags = []string{"-trimpath", "-ldflags=-s -w"}
	buildEnv   = []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64"}
)

// BuildGo builds a Go main package as a static linux/amd64 binary at out.
// It runs the go command in the current directory, which must be inside the
// cgpilot module (tests and `go run` are).
func BuildGo(ctx context.Context, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"build"}, buildFlags...), "-o", out, pkg)...)
	cmd.Env = append(os.Environ(), buildEnv...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: go build %s: %v: %s", ErrImage, pkg, err, strings.TrimSpace(string(b)))
	}
	return nil
}

// GoImage builds pkg statically and writes a docker-archive at outTar with
// the binary as /bin/<name> and the entrypoint [/bin/<name>, args...].
func GoImage(ctx context.Context, ref, pkg, outTar string, args ...string) error {
	name := filepath.Base(pkg)
	bin := outTar + "." + name + ".bin"
	defer os.Remove(bin)
	if err := BuildGo(ctx, pkg, bin); err != nil {
		return err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("%w: read %s: %v", ErrImage, bin, err)
	}
	return WriteArchiveFile(outTar, ref, []File{{Path: "bin/" + name, Mode: 0o755, Data: data}},
		Config{Entrypoint: append([]string{"/bin/" + name}, args...)})
}

// Pause writes the pause image (PauseRef) to outTar.
func Pause(ctx context.Context, outTar string) error {
	return GoImage(ctx, PauseRef, PausePackage, outTar)
}

// Busybox writes the busybox image (BusyboxRef) to outTar from a static
// busybox binary (Debian's busybox-static installs /bin/busybox), with one
// symlink per applet so that `sh`, `sleep`, `cat` ... resolve in /bin.
func Busybox(ctx context.Context, busybox, outTar string) error {
	data, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("%w: read %s (install busybox-static: make deps): %v", ErrImage, busybox, err)
	}
	if !isStatic(data) {
		return fmt.Errorf("%w: %s is dynamically linked: the image has no libc; install busybox-static (make deps)", ErrImage, busybox)
	}
	list, err := exec.CommandContext(ctx, busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("%w: %s --list: %v", ErrImage, busybox, err)
	}
	files := []File{{Path: "bin/busybox", Mode: 0o755, Data: data}}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		files = append(files, File{Path: "bin/" + applet, Link: "busybox"})
	}
	return WriteArchiveFile(outTar, BusyboxRef, files, Config{Cmd: []string{"sh"}})
}

// isStatic reports whether an ELF file has no PT_INTERP program header,
// i.e. needs no dynamic loader.
func isStatic(data []byte) bool {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}
