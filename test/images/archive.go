package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// ErrImage wraps every failure of this package.
var ErrImage = errors.New("images")

// Image references the test bed imports.
const (
	PauseRef   = "docker.io/local/pause:1"
	BusyboxRef = "docker.io/local/busybox:1"
)

// File is one entry of an image's single layer. Exactly one of Data or
// Link is used; directories are created for every parent automatically.
type File struct {
	Path string // relative to the root, e.g. "bin/busybox"
	Mode int64  // permission bits, e.g. 0o755
	Data []byte
	Link string // symlink target when not empty
}

// Config is the part of an image's configuration the test bed needs.
type Config struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
}

// baseDirs exist in every image: runc and the CRI mount over them.
var baseDirs = []string{"bin", "dev", "etc", "proc", "sys", "tmp", "var", "root", "run"}

// WriteArchive writes a docker-archive (as `docker save` makes) holding
// one image named ref with files as its only layer. The output is
// deterministic: same input, same bytes, same image ID.
func WriteArchive(w io.Writer, ref string, files []File, cfg Config) error {
	if ref == "" || strings.ContainsAny(ref, " \t\n\"") {
		return fmt.Errorf("%w: bad image reference %q", ErrImage, ref)
	}
	layer, err := layerTar(files)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(layer)
	diffID := "sha256:" + hex.EncodeToString(sum[:])
	env := cfg.Env
	if env == nil {
		env = []string{"PATH=/bin"}
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": cfg.Entrypoint, "Cmd": cfg.Cmd, "Env": env},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	if err != nil {
		return fmt.Errorf("%w: config for %s: %v", ErrImage, ref, err)
	}
	manifest, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{ref}, "Layers": []string{"layer.tar"}}})
	if err != nil {
		return fmt.Errorf("%w: manifest for %s: %v", ErrImage, ref, err)
	}
	tw := tar.NewWriter(w)
	for _, e := range []struct {
		name string
		data []byte
	}{{"manifest.json", manifest}, {"config.json", config}, {"layer.tar", layer}} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
			return fmt.Errorf("%w: write %s of %s: %v", ErrImage, e.name, ref, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return fmt.Errorf("%w: write %s of %s: %v", ErrImage, e.name, ref, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("%w: close archive of %s: %v", ErrImage, ref, err)
	}
	return nil
}

// layerTar packs files (plus base and parent directories) in path order.
func layerTar(files []File) ([]byte, error) {
	dirs := map[string]bool{}
	for _, d := range baseDirs {
		dirs[d] = true
	}
	seen := map[string]bool{}
	for _, f := range files {
		p := path.Clean(f.Path)
		if f.Path == "" || path.IsAbs(f.Path) || p == "." || strings.HasPrefix(p, "../") || p == ".." {
			return nil, fmt.Errorf("%w: layer path %q must be relative and inside the root", ErrImage, f.Path)
		}
		if seen[p] {
			return nil, fmt.Errorf("%w: layer path %q given twice", ErrImage, f.Path)
		}
		seen[p] = true
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	sorted := make([]File, 0, len(files))
	for _, f := range files {
		f.Path = path.Clean(f.Path)
		sorted = append(sorted, f)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	dirList := make([]string, 0, len(dirs))
	for d := range dirs {
		if seen[d] {
			return nil, fmt.Errorf("%w: layer path %q is both a file and a directory", ErrImage, d)
		}
		dirList = append(dirList, d)
	}
	sort.Strings(dirList)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(h *tar.Header) error {
		h.ModTime, h.Format = time.Unix(0, 0), tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%w: layer entry %s: %v", ErrImage, h.Name, err)
		}
		return nil
	}
	for _, d := range dirList {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode}); err != nil {
			return nil, err
		}
	}
	for _, f := range sorted {
		if f.Link != "" {
			if err := hdr(&tar.Header{Typeflag: tar.TypeSymlink, Name: f.Path, Linkname: f.Link, Mode: 0o777}); err != nil {
				return nil, err
			}
			continue
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err := hdr(&tar.Header{Typeflag: tar.TypeReg, Name: f.Path, Mode: mode, Size: int64(len(f.Data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("%w: layer entry %s: %v", ErrImage, f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("%w: close layer: %v", ErrImage, err)
	}
	return buf.Bytes(), nil
}

// WriteArchiveFile is WriteArchive to a new file at out; on error no file
// is left.
func WriteArchiveFile(out, ref string, files []File, cfg Config) (err error) {
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("%w: create %s: %v", ErrImage, out, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("%w: close %s: %v", ErrImage, out, cerr)
		}
		if err != nil {
			os.Remove(out)
		}
	}()
	return WriteArchive(f, ref, files, cfg)
}
