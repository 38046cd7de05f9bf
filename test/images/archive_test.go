package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readArchive returns the outer entries and the layer's entries (name -> header).
func readArchive(t *testing.T, b []byte) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	outer := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		outer[h.Name] = data
	}
	layer := map[string]*tar.Header{}
	lr := tar.NewReader(bytes.NewReader(outer["layer.tar"]))
	for {
		h, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		layer[h.Name] = h
	}
	return outer, layer
}

func TestWriteArchiveLayout(t *testing.T) {
	var buf bytes.Buffer
	files := []File{{Path: "bin/busybox", Mode: 0o755, Data: []byte("ELF")}, {Path: "bin/sh", Link: "busybox"}, {Path: "etc/app/conf", Data: []byte("x")}}
	if err := WriteArchive(&buf, "docker.io/local/t:1", files, Config{Entrypoint: []string{"/bin/sh"}}); err != nil {
		t.Fatal(err)
	}
	outer, layer := readArchive(t, buf.Bytes())
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(outer["manifest.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 || manifest[0].RepoTags[0] != "docker.io/local/t:1" || manifest[0].Layers[0] != "layer.tar" || manifest[0].Config != "config.json" {
		t.Fatalf("manifest = %+v", manifest)
	}
	var cfg struct {
		Config struct{ Entrypoint, Env []string }
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(outer["config.json"], &cfg); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(outer["layer.tar"])
	if got, want := cfg.RootFS.DiffIDs, "sha256:"+hex.EncodeToString(sum[:]); len(got) != 1 || got[0] != want {
		t.Errorf("diff_ids = %v, want [%s]", got, want)
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != "/bin/sh" || strings.Join(cfg.Config.Env, " ") != "PATH=/bin" {
		t.Errorf("config = %+v", cfg.Config)
	}
	for name, typ := range map[string]byte{"bin/": tar.TypeDir, "etc/": tar.TypeDir, "etc/app/": tar.TypeDir, "proc/": tar.TypeDir, "tmp/": tar.TypeDir,
		"bin/busybox": tar.TypeReg, "bin/sh": tar.TypeSymlink, "etc/app/conf": tar.TypeReg} {
		h, ok := layer[name]
		if !ok || h.Typeflag != typ {
			t.Errorf("layer entry %s: present=%v type=%v, want type %v", name, ok, h, typ)
		}
	}
	if layer["bin/busybox"].Mode != 0o755 || layer["etc/app/conf"].Mode != 0o644 || layer["tmp/"].Mode != 0o1777 {
		t.Errorf("modes: busybox %o conf %o tmp %o", layer["bin/busybox"].Mode, layer["etc/app/conf"].Mode, layer["tmp/"].Mode)
	}
	if layer["bin/sh"].Linkname != "busybox" || layer["bin/busybox"].Uid != 0 || !layer["bin/busybox"].ModTime.Equal(layer["bin/sh"].ModTime) {
		t.Errorf("symlink/owner/mtime wrong: %+v", layer["bin/sh"])
	}
}

func TestWriteArchiveDeterministic(t *testing.T) {
	files := []File{{Path: "b", Data: []byte("2")}, {Path: "a", Data: []byte("1")}}
	var x, y bytes.Buffer
	if err := WriteArchive(&x, "r:1", files, Config{}); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(&y, "r:1", []File{files[1], files[0]}, Config{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x.Bytes(), y.Bytes()) {
		t.Fatal("same files in another order gave a different archive")
	}
}

func TestWriteArchiveRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		ref   string
		files []File
	}{
		"empty ref":          {"", nil},
		"ref with space":     {"a b", nil},
		"absolute path":      {"r:1", []File{{Path: "/bin/x"}}},
		"escaping path":      {"r:1", []File{{Path: "../x"}}},
		"dot":                {"r:1", []File{{Path: "."}}},
		"empty path":         {"r:1", []File{{Path: ""}}},
		"duplicate":          {"r:1", []File{{Path: "a"}, {Path: "./a"}}},
		"file and directory": {"r:1", []File{{Path: "a"}, {Path: "a/b"}}},
		"file over base dir": {"r:1", []File{{Path: "bin"}}},
	} {
		t.Run(name, func(t *testing.T) {
			err := WriteArchive(io.Discard, tc.ref, tc.files, Config{})
			if !errors.Is(err, ErrImage) {
				t.Fatalf("err = %v, want ErrImage", err)
			}
		})
	}
}

func TestWriteArchiveFileRemovesPartialOutput(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.tar")
	if err := WriteArchiveFile(out, "r:1", []File{{Path: "/abs"}}, Config{}); !errors.Is(err, ErrImage) {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("partial archive left: %v", err)
	}
}

// TestPauseAndBusybox builds both real images (needs the go tool and
// busybox-static) and checks their layers hold static binaries.
func TestPauseAndBusybox(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	if err := Pause(ctx, filepath.Join(dir, "pause.tar")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "pause.tar"))
	outer, layer := readArchive(t, b)
	if h := layer["bin/pause"]; h == nil || h.Size < 100_000 {
		t.Fatalf("pause binary missing or tiny: %+v", h)
	}
	if !strings.Contains(string(outer["manifest.json"]), PauseRef) {
		t.Errorf("manifest %s lacks %s", outer["manifest.json"], PauseRef)
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("busybox-static not installed (make deps)")
	}
	if err := Busybox(ctx, "/bin/busybox", filepath.Join(dir, "busybox.tar")); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(filepath.Join(dir, "busybox.tar"))
	_, layer = readArchive(t, b)
	for _, n := range []string{"bin/busybox", "bin/sh", "bin/sleep", "bin/cat"} {
		if layer[n] == nil {
			t.Errorf("busybox image lacks %s", n)
		}
	}
}

func TestBusyboxRejectsDynamicBinary(t *testing.T) {
	err := Busybox(context.Background(), "/bin/ls", filepath.Join(t.TempDir(), "b.tar"))
	if !errors.Is(err, ErrImage) || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("err = %v, want a dynamically-linked error", err)
	}
}
