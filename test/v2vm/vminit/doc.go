//go:build linux

// Command vminit is PID 1 of the throw-away cgroup v2 VM booted by
// test/v2vm/run.sh. It is built statically (CGO_ENABLED=0) and uses only the
// standard library and golang.org/x/sys/unix (for finit_module), so the
// initramfs needs no shell, libc or busybox.
//
// It mounts the pseudo filesystems (cgroup2 alone at /sys/fs/cgroup, since
// the kernel runs with cgroup_no_v1=all), brings the loopback interface up,
// loads the kernel modules run.sh packed, enables every controller in the
// root's cgroup.subtree_control, prints the kernel's facts (release,
// controllers, BTF, PSI, the OOM tracepoint, CPUs), runs each packed test
// binary from /v2vm/manifest in its own directory (which holds a copy of
// the package's testdata), prints go-test-like summary lines and the
// machine-readable marker "V2VM: EXIT_CODE=N" that run.sh turns into its
// exit status, and powers the VM off.
//
// Every line it prints itself starts with "V2VM:" so run.sh can tell them
// from test output (the go-test-like summary lines are its exception). It
// must not import anything beyond the standard library and
// golang.org/x/sys/unix, nor need cgo.
//
// # Files
//
// Both build only on Linux. main.go is the init: the console, the mounts,
// the loopback interface, the modules, the controllers, the report, the
// test runs and the power-off. manifest.go parses what run.sh packed (the
// manifest of test packages, one-per-line flags and environment) and turns
// the test binaries' results into exit codes and summary lines.
package main
