//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cgpilot/cgpilot/test/demo"
	"github.com/cgpilot/cgpilot/test/images"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if !errors.Is(err, demo.ErrDemo) { // those already start with "demo:"
			err = fmt.Errorf("demo: %w", err)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	dir := fs.String("dir", envOr("CGPILOT_DEMO_DIR", "/tmp/cgpilot-demo"), "test bed directory")
	bins := fs.String("bins", os.Getenv("CGPILOT_K8S_BINS"), "directory of the Kubernetes binaries")
	runtime := fs.String("runtime-bins", os.Getenv("CGPILOT_RUNTIME_BINS"), "directory of the node's container runtime (containerd 2, its shim, ctr, runc)")
	if len(args) > 0 {
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	switch {
	case len(args) == 0:
		return errors.New("usage: demo up|down|images [--dir DIR] [--bins DIR] [--runtime-bins DIR]")
	case args[0] == "down":
		return demo.Down(abs, out)
	case args[0] == "images":
		// make demo-v2: the VM has no Go toolchain, so the images are
		// built here and packed into it (test/v2node/run.sh).
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return err
		}
		cache, err := images.DefaultCacheDir()
		if err != nil {
			return err
		}
		if err := demo.WriteImages(context.Background(), cache, abs); err != nil {
			return err
		}
		fmt.Fprintf(out, "the agent and aggregator images and cgpilotctl in %s\n", abs)
		return nil
	case args[0] != "up":
		return fmt.Errorf("unknown command %q: want up, down or images", args[0])
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if *bins == "" {
		b, err := exec.Command(filepath.Join(root, "test/k8sbins/build.sh"), "--check").Output()
		if err != nil {
			return errors.New("the Kubernetes binaries are not built: run make demo (or test/k8sbins/build.sh), or set CGPILOT_K8S_BINS")
		}
		*bins = strings.TrimSpace(string(b))
	}
	if *runtime == "" {
		b, err := exec.Command(filepath.Join(root, "test/runtimebins/build.sh"), "--check").Output()
		if err != nil {
			return errors.New("the node's container runtime is not built: run make demo (or test/runtimebins/build.sh), or set CGPILOT_RUNTIME_BINS")
		}
		*runtime = strings.TrimSpace(string(b))
	}
	// Ctrl-C ends the demo; Up then tears down what it started.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err = demo.Up(ctx, demo.Options{Dir: abs, BinDir: *bins, RuntimeBinDir: *runtime, RepoRoot: root, Out: out})
	return err
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// repoRoot is the directory of the cgpilot go.mod at or above the working
// directory.
func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/cgpilot/cgpilot\n") {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", errors.New("run the demo inside the cgpilot checkout (no cgpilot go.mod found above the working directory)")
		}
		d = parent
	}
}
