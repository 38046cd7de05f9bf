//go:build linux

package harness

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func TestParseMountInfo(t *testing.T) {
	in := strings.Join([]string{
		`22 1 0:21 / /proc rw,nosuid - proc proc rw`,
		`30 22 0:26 / /sys/fs/cgroup/cpu rw shared:9 - cgroup cgroup rw,cpu`,
		`31 22 0:27 / /sys/fs/cgroup/unified rw shared:10 master:3 - cgroup2 cgroup2 rw`,
		`40 1 0:50 / /tmp/with\040space rw - tmpfs tmpfs rw`,
		`garbage line`,
		`41 1 0:51 / /no/separator rw tmpfs`,
	}, "\n")
	got, err := parseMountInfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []mountInfo{
		{"/proc", "proc", "proc"},
		{"/sys/fs/cgroup/cpu", "cgroup", "cgroup"},
		{"/sys/fs/cgroup/unified", "cgroup2", "cgroup2"},
		{"/tmp/with space", "tmpfs", "tmpfs"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/a`:             `/a`,
		`/a\040b`:        `/a b`,
		`/tab\011x\134y`: "/tab\tx\\y",
		`/trailing\04`:   `/trailing\04`,
		`/bad\09x`:       `/bad\09x`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnder(t *testing.T) {
	for _, c := range []struct {
		p, root string
		want    bool
	}{
		{"/run/netns", "/run/netns", true},
		{"/run/netns/cni-1", "/run/netns", true},
		{"/run/netns2", "/run/netns", false},
		{"/run", "/run/netns", false},
		{"/tmp/x/y", "/tmp/x/", true},
	} {
		if got := under(c.p, c.root); got != c.want {
			t.Errorf("under(%q, %q) = %v", c.p, c.root, got)
		}
	}
}

func TestPathMarkRestoreRemovesOnlyNewEntries(t *testing.T) {
	root := t.TempDir()
	existing := filepath.Join(root, "existing")
	mustMkdir(t, existing, "keep/deep/deeper", "keep2")
	mustWrite(t, filepath.Join(existing, "keep", "file"))
	fresh := filepath.Join(root, "fresh") // does not exist yet
	marks := []PathMark{markPath(existing), markPath(fresh)}
	if !marks[0].Existed || marks[1].Existed {
		t.Fatalf("marks = %+v", marks)
	}

	mustMkdir(t, existing, "new/sub", "keep/newdir")
	mustWrite(t, filepath.Join(existing, "keep", "newfile"))
	mustWrite(t, filepath.Join(existing, "keep", "deep", "newfile"))
	mustMkdir(t, fresh, "a/b")
	if err := os.Symlink("/etc", filepath.Join(existing, "newlink")); err != nil {
		t.Fatal(err)
	}
	never := func(string) bool { return false }
	for _, m := range marks {
		if err := m.restore(never); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := listTree(t, existing), []string{"keep", "keep/deep", "keep/deep/deeper", "keep/file", "keep2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after restore %v, want %v", got, want)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("%s created after the mark still exists", fresh)
	}
	if _, err := os.Stat("/etc"); err != nil {
		t.Fatal("restore followed a symlink")
	}
}

func TestPathMarkRestoreRefusesMounted(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "x")
	m := markPath(p)
	mustMkdir(t, p, "sub")
	err := m.restore(func(q string) bool { return under(p, q) || under(q, p) })
	if err == nil || !strings.Contains(err.Error(), "still has mounts") {
		t.Fatalf("err = %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(p, "sub")); err != nil {
		t.Fatal("a path with mounts under it was removed")
	}
}

func TestCgroupTreeDeepestFirst(t *testing.T) {
	root := t.TempDir()
	mustMkdir(t, root, "a/b/c", "d")
	got := cgroupTree(root)
	if len(got) != 5 || got[0] != filepath.Join(root, "a/b/c") || got[len(got)-1] != root {
		t.Fatalf("cgroupTree = %v", got)
	}
}

func mustMkdir(t *testing.T, base string, rels ...string) {
	t.Helper()
	for _, r := range rels {
		if err := os.MkdirAll(filepath.Join(base, r), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func mustWrite(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func listTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err == nil && p != root {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out
}
