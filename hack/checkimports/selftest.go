package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// selftest.go: make lint's proof that the walls check what they say. Each
// case is one kind of violation that once passed lint (issue 20), added
// to a temporary copy of the checkout; the check of the copy must report
// each of them.

type violation struct {
	name string
	file string // relative to the checkout
	body string
	// want are substrings of the report that prove it was caught.
	want []string
}

const mod = "github.com/cgpilot/cgpilot"

var violations = []violation{
	{"agent/collector imports recommend and topology (its doc forbids every cgpilot package but cgroup)",
		"agent/collector/zz_selftest.go", "package collector\n\nimport (\n\t_ \"" + mod + "/recommend\"\n\t_ \"" + mod + "/topology\"\n)\n",
		[]string{"agent/collector must not depend on " + mod + "/recommend", "agent/collector must not depend on " + mod + "/topology"}},
	{"agent/history imports agent/rightsize (its doc: agent/collector and the standard library only)",
		"agent/history/zz_selftest.go", "package history\n\nimport _ \"" + mod + "/agent/rightsize\"\n",
		[]string{"agent/history must not depend on " + mod + "/agent/rightsize"}},
	{"a test in agent/pools imports client-go (its doc: no k8s.io package but cpuset, tests included)",
		"agent/pools/zz_selftest_test.go", "package pools\n\nimport _ \"k8s.io/client-go/kubernetes\"\n",
		[]string{"agent/pools must not depend on k8s.io/client-go/kubernetes (its tests"}},
	{"cmd/cgpilotctl imports agent/pools (the pools' doc: only package agent imports it)",
		"cmd/cgpilotctl/zz_selftest.go", "package main\n\nimport _ \"" + mod + "/agent/pools\"\n",
		[]string{mod + "/cmd/cgpilotctl must not import " + mod + "/agent/pools (production code)"}},
	{"agent/kube imports client-go's clientset (its doc forbids it)",
		"agent/kube/zz_selftest.go", "package kube\n\nimport _ \"k8s.io/client-go/kubernetes\"\n",
		[]string{mod + "/agent/kube must not depend on k8s.io/client-go/kubernetes"}},
	{"a sysfs read without a linux build tag, the path joined onto a root",
		"agent/collector/zz_selftest_sysfs.go", "package collector\n\nimport (\n\t\"os\"\n\t\"path/filepath\"\n)\n\n" +
			"func online(cfg struct{ SysRoot string }) ([]byte, error) {\n\treturn os.ReadFile(filepath.Join(cfg.SysRoot, \"devices/system/cpu/online\"))\n}\n",
		[]string{"agent/collector/zz_selftest_sysfs.go reads sysfs", "SysRoot joined with \"devices/system/cpu/online\""}},
	{"a procfs read without a linux build tag, a literal path under a root",
		"recommend/zz_selftest_procfs.go", "//go:build !windows\n\npackage recommend\n\nimport \"os\"\n\n" +
			"func mounts(procRoot string) ([]byte, error) { return os.ReadFile(procRoot + \"/self/mountinfo\") }\n",
		[]string{"recommend/zz_selftest_procfs.go reads sysfs", "procRoot +"}},
	{"a package without a doc comment",
		"internal/zzselftest/x.go", "package zzselftest\n",
		[]string{mod + "/internal/zzselftest has no package doc comment"}},
	{"a file its package's doc.go does not name",
		"agent/pools/zz_selftest_unnamed.go", "package pools\n",
		[]string{mod + "/agent/pools/doc.go does not name zz_selftest_unnamed.go"}},
	{"a second file beside a one-file package's doc, and no doc.go",
		"cmd/cgpilot-agent/zz_selftest.go", "package main\n",
		[]string{mod + "/cmd/cgpilot-agent has 2 files and no doc.go"}},
}

// selftest copies the checkout at root, adds the violations and checks
// that each is reported.
func selftest(root string, out io.Writer) error {
	t0 := time.Now()
	tmp, err := os.MkdirTemp("", "cgpilot-checkimports-selftest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := copyCheckout(root, tmp); err != nil {
		return err
	}
	for _, v := range violations {
		p := filepath.Join(tmp, v.file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%s exists in the checkout: the self-test would overwrite it", v.file)
		}
		if err := os.WriteFile(p, []byte(v.body), 0o644); err != nil {
			return err
		}
	}
	vs, err := check(tmp)
	if err != nil {
		return err
	}
	report := strings.Join(vs, "\n")
	missed := 0
	for _, v := range violations {
		caught := true
		for _, w := range v.want {
			caught = caught && strings.Contains(report, w)
		}
		status := "caught"
		if !caught {
			status, missed = "MISSED", missed+1
		}
		fmt.Fprintf(out, "check-imports -selftest: %s: %s\n", status, v.name)
	}
	if missed > 0 {
		return fmt.Errorf("%d of %d violations passed the walls; the check of the copy reported:\n%s", missed, len(violations), report)
	}
	fmt.Fprintf(out, "check-imports -selftest: ok, %d of %d violations caught in %.1fs\n", len(violations), len(violations), time.Since(t0).Seconds())
	return nil
}

// copyCheckout copies the files git knows (tracked, and new ones not
// ignored) from root to dst.
func copyCheckout(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	list, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %v", err)
	}
	for _, rel := range bytes.Split(bytes.TrimRight(list, "\x00"), []byte{0}) {
		src := filepath.Join(root, string(rel))
		fi, err := os.Lstat(src)
		if err != nil {
			continue // listed but deleted in the work tree
		}
		to := filepath.Join(dst, string(rel))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			link, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, to); err != nil {
				return err
			}
			continue
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(to, b, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}
