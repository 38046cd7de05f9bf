//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// errManifest marks a malformed /v2vm/manifest; run.sh wrote it, so this is
// a runner bug, reported as a setup failure rather than a test failure.
var errManifest = errors.New("bad manifest")

// testPackage is one packed test binary: the package's import path and the
// directory in the initramfs that holds test.bin and a copy of its testdata.
type testPackage struct {
	importPath string
	dir        string
}

// parseManifest reads "<import path>\t<dir>" lines. Empty lines are ignored;
// anything else that does not have exactly two non-empty fields is an error
// naming the line, so a runner/init mismatch cannot silently run nothing.
func parseManifest(r io.Reader) ([]testPackage, error) {
	var pkgs []testPackage
	s := bufio.NewScanner(r)
	for n := 1; s.Scan(); n++ {
		line := s.Text()
		if line == "" {
			continue
		}
		ip, dir, ok := strings.Cut(line, "\t")
		if !ok || ip == "" || dir == "" || strings.Contains(dir, "\t") {
			return nil, fmt.Errorf("%w: line %d %q: want <import path>TAB<dir>", errManifest, n, line)
		}
		pkgs = append(pkgs, testPackage{importPath: ip, dir: dir})
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", errManifest, err)
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("%w: no packages listed", errManifest)
	}
	return pkgs, nil
}

// parseLines returns the non-empty lines of r: test flags and environment
// entries are passed one per line so that values may contain spaces.
func parseLines(r io.Reader) ([]string, error) {
	var out []string
	s := bufio.NewScanner(r)
	for s.Scan() {
		if l := s.Text(); l != "" {
			out = append(out, l)
		}
	}
	return out, s.Err()
}

// exitCode turns the result of exec.Cmd.Run into a shell-style status:
// the exit code, 128+signal for a killed binary, 127 when it could not run.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 127
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// summaryLine mimics go test's per-package line so that the console log of a
// VM run reads like a local `go test` run.
func summaryLine(importPath string, code int, d time.Duration) string {
	secs := fmt.Sprintf("%.3fs", d.Seconds())
	if code == 0 {
		return "ok  \t" + importPath + "\t" + secs
	}
	return fmt.Sprintf("FAIL\t%s\t%s (exit status %d)", importPath, secs, code)
}

// overallCode is the VM's exit status: the first failing package's status,
// so that a single-package run returns exactly that binary's status.
func overallCode(codes []int) int {
	for _, c := range codes {
		if c != 0 {
			return c
		}
	}
	return 0
}
