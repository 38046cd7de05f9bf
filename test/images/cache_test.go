package images

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/test/tier"
)

// TestCachedGoImage: the first call builds, the second reuses the same
// files without running the compiler, and a change to a source file of
// the package yields a new hash (and a rebuild), a change elsewhere does
// not.
func TestCachedGoImage(t *testing.T) {
	ctx := context.Background()
	cache := t.TempDir()
	img, bin, err := CachedGoImage(ctx, PauseRef, PausePackage, cache)
	if err != nil {
		t.Fatal(err)
	}
	if !img.Built || !bin.Built {
		t.Fatalf("first call: image built %v, binary built %v, want both built", img.Built, bin.Built)
	}
	st, _ := os.Stat(img.Path)
	t0 := time.Now()
	img2, bin2, err := CachedGoImage(ctx, PauseRef, PausePackage, cache)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cache hit in %v", time.Since(t0))
	if img2.Built || bin2.Built || img2.Path != img.Path || bin2.Path != bin.Path {
		t.Fatalf("second call: %+v %+v, want the first call's files reused", img2, bin2)
	}
	if st2, _ := os.Stat(img.Path); !st2.ModTime().Equal(st.ModTime()) {
		t.Error("the cached image was rewritten")
	}
	// Another reference is another image of the same binary. The first
	// stays while it is new (another checkout may be importing it), and is
	// pruned once it is an hour old.
	img3, bin3, err := CachedGoImage(ctx, "docker.io/local/pause:other", PausePackage, cache)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(img.Path); err != nil {
		t.Errorf("an image built a moment ago was pruned: %v", err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(img.Path, old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(img3.Path); err != nil {
		t.Fatal(err)
	}
	img3, bin3, err = CachedGoImage(ctx, "docker.io/local/pause:other", PausePackage, cache)
	if err != nil {
		t.Fatal(err)
	}
	if !img3.Built || bin3.Built || img3.Path == img.Path {
		t.Errorf("other ref: %+v %+v, want a new image from the cached binary", img3, bin3)
	}
	if _, err := os.Stat(img.Path); !os.IsNotExist(err) {
		t.Errorf("the replaced image %s was not pruned (%v)", img.Path, err)
	}

	// The hash follows the package's sources: copy the module's inputs for
	// pause into a scratch module and change a file.
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum", "test/images/pause/main.go", "test/images/pause/doc.go", "README.md"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(mod, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mod, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hashIn := func() string {
		t.Helper()
		wd, _ := os.Getwd()
		if err := os.Chdir(mod); err != nil {
			t.Fatal(err)
		}
		defer os.Chdir(wd)
		h, err := InputHash(ctx, "./test/images/pause")
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h1 := hashIn()
	if h1 != bin.Hash {
		t.Errorf("the same inputs elsewhere hash to %s, here %s", h1, bin.Hash)
	}
	if err := os.WriteFile(filepath.Join(mod, "README.md"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if h := hashIn(); h != h1 {
		t.Errorf("a file outside the package changed the hash")
	}
	appendTo(t, filepath.Join(mod, "test/images/pause/main.go"), "\n// changed\n")
	h2 := hashIn()
	if h2 == h1 {
		t.Error("a changed source file kept the hash")
	}
	appendTo(t, filepath.Join(mod, "go.sum"), "\n")
	if h := hashIn(); h == h2 {
		t.Error("a changed go.sum kept the hash")
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// TestDockerfileBuildsLikeTheDemo: the user-facing Dockerfile builds the
// agent with the same flags and environment as BuildGo, onto a base with no
// shell, as root (the cgroup files are root's).
func TestDockerfileBuildsLikeTheDemo(t *testing.T) {
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := strings.ReplaceAll(string(b), "\\\n", " ")
	var builds []string
	for _, l := range strings.Split(df, "\n") {
		if strings.HasPrefix(l, "RUN ") && strings.Contains(l, "go build") {
			builds = append(builds, l)
		}
	}
	if len(builds) == 0 || !strings.Contains(strings.Join(builds, " "), "./cmd/cgpilot-agent") {
		t.Fatalf("no RUN go build of ./cmd/cgpilot-agent in the Dockerfile")
	}
	norm := func(s string) string { return strings.ReplaceAll(s, `"`, "") }
	for _, f := range buildFlags {
		for _, l := range builds {
			if !strings.Contains(norm(l), norm(f)) {
				t.Errorf("Dockerfile %q lacks build flag %s", l, f)
			}
		}
	}
	if !strings.Contains(df, "ENV CGO_ENABLED=0") || !strings.Contains(strings.Join(buildEnv, " "), "CGO_ENABLED=0") {
		t.Error("the Dockerfile and BuildGo do not both build without cgo")
	}
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(df, -1)
	if last := froms[len(froms)-1][1]; !strings.HasPrefix(last, "gcr.io/distroless/static") && last != "scratch" {
		t.Errorf("final stage FROM %s, want distroless static or scratch", last)
	}
	if !regexp.MustCompile(`(?m)^USER 0(:0)?$`).MatchString(df) || !strings.Contains(df, `ENTRYPOINT ["/bin/cgpilot-agent"]`) {
		t.Error("the image must run /bin/cgpilot-agent as root (USER 0)")
	}
}

func TestCachedBinaryErrors(t *testing.T) {
	if _, err := CachedBinary(context.Background(), "./no/such/package", t.TempDir()); err == nil || !strings.Contains(err.Error(), "no/such/package") {
		t.Errorf("missing package: %v, want an error naming it", err)
	}
}
