package main

import (
	"go/build/constraint"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestRequiresLinux: a constraint requires linux only when it is false on
// every other system, whatever its other tags.
func TestRequiresLinux(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want bool
	}{
		{"linux", true},
		{"linux && amd64", true},
		{"(linux && cgo) || (linux && !cgo)", true},
		{"!windows", false},
		{"linux || darwin", false},
		{"!linux", false},
		{"cgo", false},
	} {
		e, err := constraint.Parse("//go:build " + tc.expr)
		if err != nil {
			t.Fatal(err)
		}
		if got := requiresLinux(e); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.expr, got, tc.want)
		}
	}
}

// TestTouches: the spellings of a sysfs or procfs read are found, and a
// message or a flag that names a root is not one.
func TestTouches(t *testing.T) {
	for _, tc := range []struct {
		code string
		want string // "" for none
	}{
		{`os.ReadFile("/sys/devices/system/cpu/online")`, `"/sys/devices/system/cpu/online"`},
		{`os.ReadFile("/proc")`, `"/proc"`},
		{`filepath.Join(cfg.SysRoot, "devices/system/cpu/online")`, `"devices/system/cpu/online"`},
		{`filepath.Join(root, "devices/system/node")`, `"devices/system/node"`},
		{`os.ReadFile(procRoot + "/self/mountinfo")`, `procRoot + "/self/mountinfo"`},
		{`filepath.Join(sysfs, "block/nvme0n1/mq")`, `sysfs joined with "block/nvme0n1/mq"`},
		{`fmt.Sprintf("topology " + cfg.SysRoot)`, ""},
		{`flag.String("path.sysfs", def.SysRoot, "sysfs mount point")`, ""},
		{`fmt.Println("/system is not /sys")`, ""},
	} {
		src := "package p\n\nfunc f() {\n\t_ = " + tc.code + "\n}\n"
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "x.go", src, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := touches(fset, f)
		if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.code, got, tc.want)
		}
	}
	f, _ := parser.ParseFile(token.NewFileSet(), "x.go", "package p\n\nimport _ \"github.com/prometheus/procfs\"\n", 0)
	if got := touches(token.NewFileSet(), f); !strings.Contains(got, "procfs") {
		t.Errorf("a procfs import: %q", got)
	}
}

// TestNamesFile: a doc names a file only as a word of its own.
func TestNamesFile(t *testing.T) {
	for _, tc := range []struct {
		text string
		want bool
	}{
		{"cpu.go reads cpu.stat", true},
		{"the stat files (cpu.go).", true},
		{"ends with cpu.go.", true},
		{"see cgroup/cpu.go for it", true},
		{"parsecpu.go reads it", false},
		{"cpu_cpu.go", false},
		{"cpu.gox", false},
		{"x.cpu.go", false},
		{"", false},
	} {
		if got := namesFile(tc.text, "cpu.go"); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.text, got, tc.want)
		}
	}
}
