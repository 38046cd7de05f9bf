package topology

import (
	"archive/tar"
	"compress/bzip2"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// unpack extracts a .tar.bz2, .tgz/.tar.gz or .tar archive into a fresh
// t.TempDir() and returns the directory holding sys/ (the archive's root or
// its single top directory). Entries escaping the directory, absolute
// symlinks (they would reach the host's /sys) and device files are skipped.
func unpack(t testing.TB, archive string) string {
	t.Helper()
	return unpackInto(t, archive, t.TempDir())
}

func unpackInto(t testing.TB, archive, dst string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	switch {
	case strings.HasSuffix(archive, ".bz2"):
		r = bzip2.NewReader(f)
	case strings.HasSuffix(archive, ".gz"), strings.HasSuffix(archive, ".tgz"):
		gz, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		defer gz.Close()
		r = gz
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		name := filepath.Clean(h.Name)
		if name == "." || filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || !wanted(name) {
			continue
		}
		p := filepath.Join(dst, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				var out *os.File
				if out, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644); err == nil {
					_, err = io.Copy(out, tr)
					if cerr := out.Close(); err == nil {
						err = cerr
					}
				}
			}
		case tar.TypeSymlink:
			if filepath.IsAbs(h.Linkname) {
				continue
			}
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				err = os.Symlink(h.Linkname, p)
			}
		}
		if err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatalf("%s: %s: %v", archive, h.Name, err)
		}
	}
	return treeRoot(t, dst)
}

// skipped are capture parts that discovery never reads; leaving them out
// saves most of the unpacking time on this shared machine.
var skipped = []string{"sys/bus/", "sys/class/", "sys/kernel/", "sys/fs/", "sys/firmware/", "sys/module/",
	"sys/devices/virtual/", "proc/self/", "proc/sys/", "dev/", "run/", "cgroup/", "cpuid/"}

func wanted(name string) bool {
	n := filepath.ToSlash(name) + "/"
	for _, s := range skipped {
		if strings.HasPrefix(n, s) || strings.Contains(n, "/"+s) {
			return false
		}
	}
	return true
}

// unpackShared is unpack for read-only use by several tests: each archive is
// unpacked once per test binary under sharedTmp, removed by TestMain.
func unpackShared(t testing.TB, archive string) string {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if root, ok := sharedRoots[archive]; ok {
		return root
	}
	root := unpackInto(t, archive, filepath.Join(sharedTmp, strconv.Itoa(len(sharedRoots))))
	sharedRoots[archive] = root
	return root
}

var (
	sharedMu    sync.Mutex
	sharedRoots = map[string]string{}
	sharedTmp   string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cgpilot-topology-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sharedTmp = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func treeRoot(t testing.TB, dir string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "sys")); err == nil {
		return dir
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		// hwloc's x86+linux tarballs keep the tree in <name>/fsroot/.
		for _, sub := range []string{e.Name(), filepath.Join(e.Name(), "fsroot")} {
			if _, err := os.Stat(filepath.Join(dir, sub, "sys")); err == nil {
				return filepath.Join(dir, sub)
			}
		}
	}
	t.Fatalf("no sys/ directory in %s", dir)
	return ""
}
