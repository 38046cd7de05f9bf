package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// raceFlags build with the race detector, linked statically (the image
// has no libc) and keeping symbols for the race reports' stacks. No
// -trimpath: the packages are then compiled exactly as `go test -race`
// compiles them, so a machine that ran the race tests reuses their build
// cache and only links.
var (
	raceFlags = []string{"-race", "-ldflags=-linkmode=external -extldflags=-static"}
	raceEnv   = []string{"CGO_ENABLED=1", "GOOS=linux", "GOARCH=amd64"}
)

// CachedRaceImage is CachedGoImage for a build with the race detector
// (the churn soak runs the agent so): the docker-archive of ref holding
// pkg's race-enabled static binary, rebuilt only when the binary's inputs,
// ref or args changed. It needs cgo (a C compiler and glibc's static
// libraries: Debian's gcc and libc6-dev).
func CachedRaceImage(ctx context.Context, ref, pkg, cacheDir string, args ...string) (Cached, error) {
	hash, err := InputHash(ctx, pkg)
	if err != nil {
		return Cached{}, err
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\nrace %q %q\n%s\n%q", hash, raceFlags, raceEnv, ref, args))
	name := filepath.Base(pkg)
	out := filepath.Join(cacheDir, "race-"+name+"-"+hex.EncodeToString(sum[:])[:20]+".tar")
	image := Cached{Path: out, Hash: hash}
	if _, err := os.Stat(out); err == nil {
		return image, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return Cached{}, fmt.Errorf("%w: %v", ErrImage, err)
	}
	bin := fmt.Sprintf("%s.tmp%d.bin", out, os.Getpid())
	defer os.Remove(bin)
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"build"}, raceFlags...), "-o", bin, pkg)...)
	cmd.Env = append(os.Environ(), raceEnv...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return Cached{}, fmt.Errorf("%w: go build -race %s (needs gcc and libc6-dev): %v: %s", ErrImage, pkg, err, strings.TrimSpace(string(b)))
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return Cached{}, fmt.Errorf("%w: %v", ErrImage, err)
	}
	if !isStatic(data) {
		return Cached{}, fmt.Errorf("%w: the race build of %s is dynamically linked: the image has no libc", ErrImage, pkg)
	}
	tmp := fmt.Sprintf("%s.tmp%d", out, os.Getpid())
	defer os.Remove(tmp)
	if err := WriteArchiveFile(tmp, ref, []File{{Path: "bin/" + name, Mode: 0o755, Data: data}},
		Config{Entrypoint: append([]string{"/bin/" + name}, args...)}); err != nil {
		return Cached{}, err
	}
	if err := os.Rename(tmp, out); err != nil {
		return Cached{}, fmt.Errorf("%w: %v", ErrImage, err)
	}
	prune(cacheDir, "race-"+name+"-", out)
	image.Built = true
	return image, nil
}
