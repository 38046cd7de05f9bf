//go:build linux

package main

import (
	"errors"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseManifest(t *testing.T) {
	good := []struct {
		name, in string
		want     []testPackage
	}{
		{"one", "example.com/a\t/v2vm/p0\n", []testPackage{{"example.com/a", "/v2vm/p0"}}},
		{"two, blank lines, no final newline", "\nexample.com/a\t/v2vm/p0\n\nexample.com/b\t/v2vm/p1",
			[]testPackage{{"example.com/a", "/v2vm/p0"}, {"example.com/b", "/v2vm/p1"}}},
		{"dir with spaces", "x\t/v2vm/p 0\n", []testPackage{{"x", "/v2vm/p 0"}}},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseManifest(strings.NewReader(tc.in))
			if err != nil {
				t.Fatalf("parseManifest(%q): %v", tc.in, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseManifest(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	bad := []struct{ name, in string }{
		{"empty", ""},
		{"only blank lines", "\n\n"},
		{"no tab", "example.com/a /v2vm/p0\n"},
		{"empty import path", "\t/v2vm/p0\n"},
		{"empty dir", "example.com/a\t\n"},
		{"three fields", "a\tb\tc\n"},
	}
	for _, tc := range bad {
		t.Run("bad "+tc.name, func(t *testing.T) {
			got, err := parseManifest(strings.NewReader(tc.in))
			if !errors.Is(err, errManifest) {
				t.Fatalf("parseManifest(%q) = %v, %v; want errManifest", tc.in, got, err)
			}
		})
	}
}

func TestParseLines(t *testing.T) {
	got, err := parseLines(strings.NewReader("-test.v\n\n-test.run\nTest A|B\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-test.v", "-test.run", "Test A|B"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseLines = %q, want %q", got, want)
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  *exec.Cmd
		want int
	}{
		{"success", exec.Command("/bin/sh", "-c", "exit 0"), 0},
		{"exit 3", exec.Command("/bin/sh", "-c", "exit 3"), 3},
		{"killed by SIGKILL", exec.Command("/bin/sh", "-c", "kill -KILL $$"), 128 + 9},
		{"not found", exec.Command("/nonexistent/test.bin"), 127},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := exitCode(tc.cmd.Run()); got != tc.want {
				t.Errorf("exitCode = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestSummaryLine(t *testing.T) {
	if got, want := summaryLine("example.com/a", 0, 1500*time.Millisecond), "ok  \texample.com/a\t1.500s"; got != want {
		t.Errorf("pass: got %q, want %q", got, want)
	}
	if got, want := summaryLine("example.com/a", 1, 2*time.Second), "FAIL\texample.com/a\t2.000s (exit status 1)"; got != want {
		t.Errorf("fail: got %q, want %q", got, want)
	}
}

func TestOverallCode(t *testing.T) {
	for _, tc := range []struct {
		codes []int
		want  int
	}{
		{nil, 0},
		{[]int{0, 0}, 0},
		{[]int{0, 1, 2}, 1},
		{[]int{137, 1}, 137},
	} {
		if got := overallCode(tc.codes); got != tc.want {
			t.Errorf("overallCode(%v) = %d, want %d", tc.codes, got, tc.want)
		}
	}
}

// FuzzParseManifest checks that any input either fails with errManifest or
// yields entries that survive a write/parse round trip unchanged.
func FuzzParseManifest(f *testing.F) {
	f.Add("example.com/a\t/v2vm/p0\nexample.com/b\t/v2vm/p1\n")
	f.Add("a\tb\tc")
	f.Add("\n\n\t\n")
	f.Fuzz(func(t *testing.T, in string) {
		pkgs, err := parseManifest(strings.NewReader(in))
		if err != nil {
			if !errors.Is(err, errManifest) {
				t.Fatalf("error %v does not wrap errManifest", err)
			}
			return
		}
		var b strings.Builder
		for _, p := range pkgs {
			if p.importPath == "" || p.dir == "" || strings.ContainsAny(p.importPath+p.dir, "\t\n") {
				t.Fatalf("bad entry %+v from %q", p, in)
			}
			b.WriteString(p.importPath + "\t" + p.dir + "\n")
		}
		again, err := parseManifest(strings.NewReader(b.String()))
		if err != nil || !reflect.DeepEqual(again, pkgs) {
			t.Fatalf("round trip of %q: %v, %v; want %v", in, again, err, pkgs)
		}
	})
}
