package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// cacheFormat changes when the cache's layout or the image format changes,
// so that old entries are not reused.
const cacheFormat = "cgpilot-images-1"

// DefaultCacheDir is where built binaries and images are kept between
// runs: ${XDG_CACHE_HOME:-~/.cache}/cgpilot/images.
func DefaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%w: cache dir: %v", ErrImage, err)
	}
	return filepath.Join(d, "cgpilot", "images"), nil
}

// InputHash hashes everything a static build of the main package pkg
// depends on: the Go version, the build flags and environment, go.mod and
// go.sum, the source, embedded and assembly files of every package of the
// main module (and of any module replaced by a directory) that pkg imports,
// and the path@version of every other module. The same hash means the same
// binary; `go list -deps` takes about a second, a warm `go build` ten.
func InputHash(ctx context.Context, pkg string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\nflags %q\nenv %q\n", cacheFormat, buildFlags, buildEnv)
	env, err := goOutput(ctx, "env", "GOVERSION", "GOMOD")
	if err != nil {
		return "", err
	}
	lines := strings.Fields(env)
	if len(lines) != 2 {
		return "", fmt.Errorf("%w: go env GOVERSION GOMOD: %q: run inside the cgpilot module", ErrImage, env)
	}
	gomod := lines[1] // where the checkout is does not matter, its content does
	fmt.Fprintf(h, "go %s\n", lines[0])
	for _, f := range []string{gomod, strings.TrimSuffix(gomod, ".mod") + ".sum"} {
		if err := hashFile(h, f); err != nil {
			return "", err
		}
	}
	const tmpl = `{{if not .Standard}}{{.ImportPath}}|{{with .Module}}{{.Path}}@{{.Version}}{{end}}|{{.Dir}}|` +
		`{{join .GoFiles ","}},{{join .CgoFiles ","}},{{join .SFiles ","}},{{join .EmbedFiles ","}},{{join .SysoFiles ","}}` + "\n{{end}}"
	list, err := goOutput(ctx, "list", "-deps", "-f", tmpl, pkg)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 4 {
			return "", fmt.Errorf("%w: go list: unexpected line %q", ErrImage, line)
		}
		fmt.Fprintf(h, "pkg %s %s\n", f[0], f[1])
		if !strings.HasSuffix(f[1], "@") { // a module at a version: go.sum pins its content
			continue
		}
		for _, name := range strings.Split(f[3], ",") {
			if name == "" {
				continue
			}
			fmt.Fprintf(h, "file %s\n", name)
			if err := hashFile(h, filepath.Join(f[2], name)); err != nil {
				return "", err
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:20], nil
}

func hashFile(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: hash %s: %v", ErrImage, path, err)
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("%w: hash %s: %v", ErrImage, path, err)
	}
	return nil
}

func goOutput(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), buildEnv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%w: go %s: %v: %s", ErrImage, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// Cached is one cache lookup's result.
type Cached struct {
	Path  string // the cached file
	Hash  string // InputHash of the package
	Built bool   // false: reused from the cache
}

// CachedBinary returns a static binary of pkg from cacheDir, building it
// (BuildGo) only when no binary with the same InputHash is there. Older
// binaries of the same command are removed.
func CachedBinary(ctx context.Context, pkg, cacheDir string) (Cached, error) {
	hash, err := InputHash(ctx, pkg)
	if err != nil {
		return Cached{}, err
	}
	name := filepath.Base(pkg)
	out := filepath.Join(cacheDir, "bin-"+name+"-"+hash)
	if _, err := os.Stat(out); err == nil {
		return Cached{Path: out, Hash: hash}, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return Cached{}, fmt.Errorf("%w: %v", ErrImage, err)
	}
	tmp := fmt.Sprintf("%s.tmp%d", out, os.Getpid())
	defer os.Remove(tmp)
	if err := BuildGo(ctx, pkg, tmp); err != nil {
		return Cached{}, err
	}
	if err := os.Rename(tmp, out); err != nil {
		return Cached{}, fmt.Errorf("%w: %v", ErrImage, err)
	}
	prune(cacheDir, "bin-"+name+"-", out)
	return Cached{Path: out, Hash: hash, Built: true}, nil
}

// CachedGoImage is GoImage through the cache: the docker-archive of ref
// holding pkg's binary is rebuilt only when the binary's inputs, ref or
// the entrypoint arguments changed. It returns the archive and the binary.
func CachedGoImage(ctx context.Context, ref, pkg, cacheDir string, args ...string) (image, binary Cached, err error) {
	binary, err = CachedBinary(ctx, pkg, cacheDir)
	if err != nil {
		return Cached{}, Cached{}, err
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\n%s\n%q", binary.Hash, ref, args))
	name := filepath.Base(pkg)
	out := filepath.Join(cacheDir, "image-"+name+"-"+hex.EncodeToString(sum[:])[:20]+".tar")
	image = Cached{Path: out, Hash: binary.Hash}
	if _, err := os.Stat(out); err == nil {
		return image, binary, nil
	}
	data, err := os.ReadFile(binary.Path)
	if err != nil {
		return Cached{}, Cached{}, fmt.Errorf("%w: %v", ErrImage, err)
	}
	tmp := fmt.Sprintf("%s.tmp%d", out, os.Getpid())
	defer os.Remove(tmp)
	if err := WriteArchiveFile(tmp, ref, []File{{Path: "bin/" + name, Mode: 0o755, Data: data}},
		Config{Entrypoint: append([]string{"/bin/" + name}, args...)}); err != nil {
		return Cached{}, Cached{}, err
	}
	if err := os.Rename(tmp, out); err != nil {
		return Cached{}, Cached{}, fmt.Errorf("%w: %v", ErrImage, err)
	}
	prune(cacheDir, "image-"+name+"-", out)
	image.Built = true
	return image, binary, nil
}

// prune removes the other cache entries whose names start with prefix:
// a checkout needs only its current build.
//
// A file used in the last hour is kept: another checkout on this machine
// (a branch whose inputs differ) may be importing it right now.
func prune(dir, prefix, keep string) {
	old, _ := filepath.Glob(filepath.Join(dir, prefix+"*"))
	for _, o := range old {
		if o == keep || strings.Contains(o, ".tmp") {
			continue
		}
		if fi, err := os.Stat(o); err == nil && time.Since(fi.ModTime()) < time.Hour {
			continue
		}
		os.Remove(o)
	}
}
