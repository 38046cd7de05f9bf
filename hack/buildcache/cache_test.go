//go:build linux

package buildcache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeBuild is a build.sh in the real ones' shape whose build is two tiny
// scripts, a and b, made by fakeStep. Every build appends a line to
// FAKE_COUNT. FAKE_NAME prefixes the pin's directory name and is the
// siblings' prefix (as hack/tool.sh's "<tool>-").
const fakeBuild = `#!/usr/bin/env bash
set -euo pipefail
. "$CACHE_SH"
cache_who=fake
cache_need_go
cache_dir=$cache_root/fake/${FAKE_NAME:-}v1
cache_bins="a b"
cache_out=$cache_dir
cache_siblings=${FAKE_NAME:-}
cache_reuse "$@"
cache_begin "fake v1" "no time"
echo build >> "$FAKE_COUNT"
for b in a b; do cache_step "$b" "example.com/$b" "$FAKE_STEP" "$b" "$cache_tmp/$b"; done
cache_commit
`

// fakeStep BIN OUT stands for a go build. For b, FAKE_GATE makes it
// announce itself (FAKE_GATE.started) and wait until that file exists (for
// at most a minute, so a failed test leaves nothing behind), and FAKE_FAIL
// makes it fail with that exit code.
const fakeStep = `#!/bin/sh
if [ "$1" = b ] && [ -n "${FAKE_GATE:-}" ]; then
  : > "$FAKE_GATE.started"
  n=0
  while [ ! -e "$FAKE_GATE" ] && [ $n -lt 3000 ]; do sleep 0.02; n=$((n + 1)); done
fi
if [ "$1" = b ] && [ -n "${FAKE_FAIL:-}" ]; then exit "$FAKE_FAIL"; fi
printf '#!/bin/sh\n' > "$2"
chmod +x "$2"
`

type fake struct {
	t      *testing.T
	tmp    string // scratch files
	cache  string // XDG_CACHE_HOME
	script string
	count  string
	gate   string
	dir    string // the fake pin's cache directory
}

func needTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"bash", "flock", "sha256sum", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("cache.sh needs %s: %v", tool, err)
		}
	}
}

func newFake(t *testing.T) *fake {
	t.Helper()
	needTools(t)
	tmp := t.TempDir()
	f := &fake{t: t, tmp: tmp, cache: filepath.Join(tmp, "xdg"),
		script: filepath.Join(tmp, "build.sh"), count: filepath.Join(tmp, "count"), gate: filepath.Join(tmp, "gate")}
	f.dir = filepath.Join(f.cache, "cgpilot", "fake", "v1")
	for name, body := range map[string]string{"build.sh": fakeBuild, "step.sh": fakeStep} {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// result is one finished run of a script.
type result struct {
	stdout, stderr string
	code           int
}

// proc is a running script; its output goes to files, so the test can read
// it while the script runs.
type proc struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdout, stderr string
	cancel         context.CancelFunc
	waited         bool
}

func (f *fake) start(env []string, args ...string) *proc {
	f.t.Helper()
	cacheSH, err := filepath.Abs("cache.sh")
	if err != nil {
		f.t.Fatal(err)
	}
	env = append([]string{"XDG_CACHE_HOME=" + f.cache, "CACHE_SH=" + cacheSH, "FAKE_COUNT=" + f.count,
		"FAKE_STEP=" + filepath.Join(f.tmp, "step.sh")}, env...)
	return startCmd(f.t, f.tmp, env, append([]string{f.script}, args...)...)
}

func startCmd(t *testing.T, scratch string, env []string, argv ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	out, err := os.CreateTemp(scratch, "stdout")
	if err != nil {
		t.Fatal(err)
	}
	errf, err := os.CreateTemp(scratch, "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	defer errf.Close()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bash, argv...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, errf
	// Its own process group, so that a failed test ends the script and
	// its build step too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, stdout: out.Name(), stderr: errf.Name(), cancel: cancel}
	t.Cleanup(func() {
		if !p.waited {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			cancel()
		}
	})
	return p
}

func (p *proc) wait() result {
	p.t.Helper()
	defer p.cancel()
	err := p.cmd.Wait()
	p.waited = true
	var r result
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		p.t.Fatal(err)
	}
	r.stdout, r.stderr = p.read(p.stdout), p.read(p.stderr)
	return r
}

func (p *proc) read(name string) string {
	b, err := os.ReadFile(name)
	if err != nil {
		p.t.Fatal(err)
	}
	return string(b)
}

func (f *fake) run(env []string, args ...string) result {
	f.t.Helper()
	return f.start(env, args...).wait()
}

// builds is how many times the fake build ran.
func (f *fake) builds() int {
	b, err := os.ReadFile(f.count)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// waitFor polls until cond holds, for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (f *fake) wantHit(r result, what string) {
	f.t.Helper()
	if r.code != 0 || r.stdout != f.dir+"\n" {
		f.t.Fatalf("%s: exit %d, stdout %q, want 0 and %q; stderr:\n%s", what, r.code, r.stdout, f.dir+"\n", r.stderr)
	}
	for _, b := range []string{"a", "b"} {
		if st, err := os.Stat(filepath.Join(f.dir, b)); err != nil || st.Mode()&0o111 == 0 {
			f.t.Fatalf("%s: %s/%s is not an executable: %v", what, f.dir, b, err)
		}
	}
	if exists(f.t, f.dir+".tmp") {
		f.t.Fatalf("%s: %s.tmp is left", what, f.dir)
	}
}

func TestBuildThenReuse(t *testing.T) {
	f := newFake(t)
	r := f.run(nil)
	f.wantHit(r, "cold")
	for _, want := range []string{"fake: building fake v1 into " + f.dir, "fake: [a] building example.com/a ...", "fake: [b] done in", "fake: fake v1 built in"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("cold build's stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	for _, args := range [][]string{nil, {"--check"}} {
		r := f.run(nil, args...)
		f.wantHit(r, "warm "+strings.Join(args, " "))
		if r.stderr != "" {
			t.Errorf("warm %v: a hit says nothing on stderr, got:\n%s", args, r.stderr)
		}
	}
	if n := f.builds(); n != 1 {
		t.Errorf("%d builds, want 1", n)
	}
}

func TestCheckOnAMissBuildsNothing(t *testing.T) {
	f := newFake(t)
	r := f.run(nil, "--check")
	if r.code != 1 || r.stdout != "" || r.stderr != "" {
		t.Fatalf("--check on an empty cache: exit %d, stdout %q, stderr %q; want 1 and nothing", r.code, r.stdout, r.stderr)
	}
	if f.builds() != 0 || exists(t, filepath.Dir(f.dir)) {
		t.Fatal("--check built or created something")
	}
}

// An interrupted build leaves <dir>.tmp, complete or not: never a hit; the
// next build starts afresh.
func TestLeftoverTmpIsNoHit(t *testing.T) {
	f := newFake(t)
	if err := os.MkdirAll(f.dir+".tmp", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "stale"} {
		if err := os.WriteFile(filepath.Join(f.dir+".tmp", name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if r := f.run(nil, "--check"); r.code != 1 || r.stdout != "" {
		t.Fatalf("--check with only a leftover .tmp: exit %d, stdout %q; want a miss", r.code, r.stdout)
	}
	f.wantHit(f.run(nil), "build over a leftover .tmp")
	if exists(t, filepath.Join(f.dir, "stale")) {
		t.Error("the leftover .tmp's file made it into the cache")
	}
	if n := f.builds(); n != 1 {
		t.Errorf("%d builds, want 1", n)
	}
}

func TestIncompleteDirIsNoHit(t *testing.T) {
	f := newFake(t)
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "a"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "b"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := f.run(nil, "--check"); r.code != 1 {
		t.Fatalf("--check with b not executable: exit %d, want 1", r.code)
	}
	f.wantHit(f.run(nil), "build over an incomplete dir")
}

// A failed build exits with the build's code, prints nothing on stdout and
// leaves no hit.
func TestFailedBuild(t *testing.T) {
	f := newFake(t)
	r := f.run([]string{"FAKE_FAIL=3"})
	if r.code != 3 || r.stdout != "" {
		t.Fatalf("failed build: exit %d, stdout %q; want 3 and nothing", r.code, r.stdout)
	}
	if !strings.Contains(r.stderr, "fake: [b] building example.com/b ...") {
		t.Errorf("stderr does not say which build failed:\n%s", r.stderr)
	}
	if exists(t, f.dir) {
		t.Fatal("a failed build left the cache directory")
	}
	if r := f.run(nil, "--check"); r.code != 1 {
		t.Fatalf("--check after a failed build: exit %d, want 1", r.code)
	}
	f.wantHit(f.run(nil), "rebuild")
}

// The directory appears complete or not at all: while b builds, only the
// .tmp exists and --check (which takes no lock) misses.
func TestRenameIsAtomic(t *testing.T) {
	f := newFake(t)
	p := f.start([]string{"FAKE_GATE=" + f.gate})
	waitFor(t, "the build to reach b", func() bool { return exists(t, f.gate+".started") })
	if exists(t, f.dir) {
		t.Fatal("the cache directory exists mid-build")
	}
	if !exists(t, filepath.Join(f.dir+".tmp", "a")) {
		t.Fatal("a is not in the .tmp mid-build")
	}
	if r := f.run(nil, "--check"); r.code != 1 || r.stdout != "" {
		t.Fatalf("--check mid-build: exit %d, stdout %q; want a miss", r.code, r.stdout)
	}
	if err := os.WriteFile(f.gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.wantHit(p.wait(), "after the gate")
}

// Two builders of one pin: the second waits for the first's lock, says so,
// and then reuses its build instead of building again.
func TestLockSerializesBuilders(t *testing.T) {
	f := newFake(t)
	first := f.start([]string{"FAKE_GATE=" + f.gate})
	waitFor(t, "the first build to reach b", func() bool { return exists(t, f.gate+".started") })
	second := f.start(nil)
	waitFor(t, "the second to say it waits", func() bool {
		return strings.Contains(second.read(second.stderr), "fake: another build is running; waiting for it")
	})
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(second.read(second.stderr), "building") || second.read(second.stdout) != "" {
		t.Fatal("the second builder did not wait for the lock")
	}
	if err := os.WriteFile(f.gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.wantHit(first.wait(), "first")
	f.wantHit(second.wait(), "second")
	if n := f.builds(); n != 1 {
		t.Errorf("%d builds, want 1 (the second must reuse the first's)", n)
	}
}

// A finished build deletes its own other pins (and their leftovers), and
// only those: not a dot directory, not another tool's pins.
func TestCommitDeletesOtherPins(t *testing.T) {
	for _, tc := range []struct {
		name       string
		gone, kept []string
	}{
		{"", []string{"old", "old.tmp"}, []string{".hidden"}},
		{"helm-", []string{"helm-v0", "helm-v0.tmp"}, []string{".hidden", "kubectl-v0"}},
	} {
		f := newFake(t)
		f.dir = filepath.Join(f.cache, "cgpilot", "fake", tc.name+"v1")
		kind := filepath.Dir(f.dir)
		for _, d := range append(append([]string{}, tc.gone...), tc.kept...) {
			if err := os.MkdirAll(filepath.Join(kind, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		f.wantHit(f.run([]string{"FAKE_NAME=" + tc.name}), "build "+tc.name)
		for _, d := range tc.gone {
			if exists(t, filepath.Join(kind, d)) {
				t.Errorf("FAKE_NAME=%q: %s is left", tc.name, d)
			}
		}
		for _, d := range tc.kept {
			if !exists(t, filepath.Join(kind, d)) {
				t.Errorf("FAKE_NAME=%q: %s was deleted", tc.name, d)
			}
		}
	}
}

func TestNoGo(t *testing.T) {
	f := newFake(t)
	r := f.run([]string{"PATH=" + t.TempDir()})
	if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "fake: go not found") {
		t.Fatalf("without go: exit %d, stdout %q, stderr %q; want 2 and a message", r.code, r.stdout, r.stderr)
	}
}

// lib runs a bash snippet with cache.sh sourced, in dir.
func lib(t *testing.T, dir, snippet string) result {
	t.Helper()
	needTools(t)
	cacheSH, err := filepath.Abs("cache.sh")
	if err != nil {
		t.Fatal(err)
	}
	p := startCmd(t, t.TempDir(), []string{"CACHE_SH=" + cacheSH}, "-c", `set -euo pipefail; cd "$1"; . "$CACHE_SH"; cache_who=lib; `+snippet, "lib", dir)
	return p.wait()
}

func TestPin(t *testing.T) {
	dir := t.TempDir()
	gomod := "module example.com/w\n\ngo 1.26\n\nrequire (\n\texample.com/a v1.2.3 // indirect\n\texample.com/b v0.1.0\n)\n\nreplace example.com/c => example.com/c2 v1.0.0\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	for mod, want := range map[string]string{"example.com/a": "v1.2.3", "example.com/b": "v0.1.0"} {
		if r := lib(t, dir, `v=$(cache_pin "`+mod+`"); echo "$v"`); r.code != 0 || r.stdout != want+"\n" {
			t.Errorf("cache_pin %s: exit %d, stdout %q; want %s", mod, r.code, r.stdout, want)
		}
	}
	// A module that is only replaced has no pin, nor has an absent one.
	for _, mod := range []string{"example.com/c", "example.com/none"} {
		r := lib(t, dir, `v=$(cache_pin "`+mod+`"); echo "$v"`)
		if r.code != 2 || r.stdout != "" || r.stderr != "lib: no "+mod+" pin in "+dir+"/go.mod\n" {
			t.Errorf("cache_pin %s: exit %d, stdout %q, stderr %q; want 2 and a message", mod, r.code, r.stdout, r.stderr)
		}
	}
}

func TestKey(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"go.mod": "module m\n", "build.sh": "echo\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gover := lib(t, dir, "go env GOVERSION").stdout
	sum := sha256.Sum256([]byte("module m\necho\n"))
	want := hex.EncodeToString(sum[:])[:16] + "-" + gover
	if r := lib(t, dir, "cache_key go.mod build.sh"); r.code != 0 || r.stdout != want {
		t.Fatalf("cache_key: exit %d, stdout %q; want %q", r.code, r.stdout, want)
	}
}

// The real build.sh scripts find a cache at their key, print what their
// callers read (hack/deps.sh, the Makefile) and, on a miss, --check exits
// 1. Each is run without --check only once --check found the fake cache,
// so nothing is ever built here.
func TestScriptsFindTheirCache(t *testing.T) {
	needTools(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dir, kind, out string }{
		{"test/k8sbins", "k8s-bins", ""},
		{"test/runtimebins", "runtime-bins", ""},
		{"test/deschedbin", "descheduler", "descheduler"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			here := filepath.Join(root, tc.dir)
			// The script's own binaries and key, as it computes them.
			r := lib(t, here, `eval "$(grep '^cache_bins=' build.sh)"; echo "$cache_bins"; cache_key go.mod go.sum build.sh`)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if r.code != 0 || len(lines) != 2 || lines[0] == "" {
				t.Fatalf("reading %s/build.sh's binaries and key: exit %d, stdout %q, stderr %q", tc.dir, r.code, r.stdout, r.stderr)
			}
			cache := t.TempDir()
			dir := filepath.Join(cache, "cgpilot", tc.kind, lines[1])
			want := filepath.Join(dir, tc.out) + "\n"
			script := filepath.Join(here, "build.sh")
			env := []string{"XDG_CACHE_HOME=" + cache}

			if r := startCmd(t, t.TempDir(), env, script, "--check").wait(); r.code != 1 || r.stdout != "" {
				t.Fatalf("--check on an empty cache: exit %d, stdout %q, stderr %q; want 1", r.code, r.stdout, r.stderr)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, b := range strings.Fields(lines[0]) {
				if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if r := startCmd(t, t.TempDir(), env, script, "--check").wait(); r.code != 0 || r.stdout != want {
				t.Fatalf("--check on the fake cache: exit %d, stdout %q, stderr %q; want 0 and %q", r.code, r.stdout, r.stderr, want)
			}
			if r := startCmd(t, t.TempDir(), env, script).wait(); r.code != 0 || r.stdout != want || r.stderr != "" {
				t.Fatalf("on the fake cache: exit %d, stdout %q, stderr %q; want 0, %q and nothing", r.code, r.stdout, r.stderr, want)
			}
		})
	}
}
