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
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cgpilot/cgpilot/test/harness"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testbed:", err)
		os.Exit(1)
	}
}

func defaultDir() string {
	if d := os.Getenv("CGPILOT_DEMO_DIR"); d != "" {
		return d
	}
	return "/tmp/cgpilot-demo"
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: testbed up|status|down [--node] [--dir DIR] [--bins DIR] [--runtime-bins DIR]")
	}
	fs := flag.NewFlagSet("testbed "+args[0], flag.ContinueOnError)
	dir := fs.String("dir", defaultDir(), "state directory of the test bed")
	bins := fs.String("bins", os.Getenv("CGPILOT_K8S_BINS"), "directory of the Kubernetes binaries")
	runtime := fs.String("runtime-bins", os.Getenv(harness.RuntimeBinsEnv), "directory of the node's container runtime (containerd 2, its shim, ctr, runc)")
	node := fs.Bool("node", false, "also start a real node (containerd + kubelet; root)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	switch args[0] {
	case "up":
		return up(abs, *bins, *runtime, *node, out)
	case "status":
		return status(abs, out)
	case "down":
		return down(abs, out)
	default:
		return fmt.Errorf("unknown command %q: want up, status or down", args[0])
	}
}

func findBins(bins string) (string, error) {
	if bins != "" {
		return bins, nil
	}
	out, err := exec.Command("test/k8sbins/build.sh", "--check").Output()
	if err != nil {
		return "", errors.New("the Kubernetes binaries are not built: run make deps (or test/k8sbins/build.sh), or set CGPILOT_K8S_BINS")
	}
	return strings.TrimSpace(string(out)), nil
}

func findRuntimeBins(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	out, err := exec.Command("test/runtimebins/build.sh", "--check").Output()
	if err != nil {
		return "", errors.New("the node's container runtime is not built: run make deps (or test/runtimebins/build.sh), or set " + harness.RuntimeBinsEnv)
	}
	return strings.TrimSpace(string(out)), nil
}

func up(dir, bins, runtime string, withNode bool, out io.Writer) error {
	if _, err := os.Stat(filepath.Join(dir, harness.StateFile)); err == nil {
		fmt.Fprintf(out, "a test bed already runs in %s:\n", dir)
		return status(dir, out)
	}
	bins, err := findBins(bins)
	if err != nil {
		return err
	}
	if withNode && os.Geteuid() != 0 {
		return errors.New("--node needs root (kubelet and containerd)")
	}
	if withNode {
		if runtime, err = findRuntimeBins(runtime); err != nil {
			return err
		}
	}
	ctx := context.Background()
	logf := func(f string, a ...any) { fmt.Fprintf(out, f+"\n", a...) }
	cp, err := harness.StartControlPlane(ctx, harness.Options{BinDir: bins, Dir: dir, Controllers: true, Detach: true, Logf: logf})
	if err != nil {
		return err
	}
	if withNode {
		if _, err := harness.StartNode(ctx, cp, harness.NodeOptions{RuntimeBinDir: runtime}); err != nil {
			if terr := cp.Stop(); terr != nil {
				err = errors.Join(err, terr)
			}
			return err
		}
	}
	cp.Detach()
	fmt.Fprintf(out, "control plane up in %v\n", cp.Started.Round(1e6))
	if err := status(dir, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nexport KUBECONFIG=%s\n%s get nodes,pods -A\nstop it with: make demo-down (go run ./test/cmd/testbed down --dir %s)\n",
		cp.Kubeconfig(), filepath.Join(bins, "kubectl"), dir)
	return nil
}

func status(dir string, out io.Writer) error {
	s, err := harness.LoadState(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(out, "no test bed in %s\n", dir)
			return nil
		}
		return err
	}
	fmt.Fprintf(out, "test bed in %s\n  apiserver  %s\n  kubeconfig %s\n", s.Dir, s.Server, s.Kubeconfig)
	procs := s.Procs
	if s.Node != nil {
		procs = append(append([]harness.ProcRecord{}, procs...), s.Node.Procs...)
	}
	for _, p := range procs {
		state := "running"
		if !p.Alive() {
			state = "NOT RUNNING"
		}
		fmt.Fprintf(out, "  %-24s pid %-7d %-11s log %s\n", p.Name, p.PID, state, p.Log)
	}
	if s.Node == nil {
		return nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	n, err := cs.CoreV1().Nodes().Get(context.Background(), s.Node.Name, metav1.GetOptions{})
	if err != nil {
		fmt.Fprintf(out, "  node %s: %v\n", s.Node.Name, err)
		return nil
	}
	ready := "NotReady"
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = "Ready"
		}
	}
	fmt.Fprintf(out, "  node %s: %s, kubelet %s, runtime %s\n", n.Name, ready, n.Status.NodeInfo.KubeletVersion, n.Status.NodeInfo.ContainerRuntimeVersion)
	return nil
}

func down(dir string, out io.Writer) error {
	if _, err := os.Stat(filepath.Join(dir, harness.StateFile)); os.IsNotExist(err) {
		// A crashed run whose directory is gone leaves only the node lock.
		if b, err := os.ReadFile(harness.NodeLockFile); err == nil && strings.HasPrefix(string(b), dir+"\n") {
			if err := os.Remove(harness.NodeLockFile); err != nil {
				return err
			}
			fmt.Fprintf(out, "no test bed in %s; removed its stale %s\n", dir, harness.NodeLockFile)
			return nil
		}
		fmt.Fprintf(out, "no test bed in %s: nothing to stop\n", dir)
		return nil
	}
	if err := harness.Teardown(dir); err != nil {
		return err
	}
	fmt.Fprintf(out, "test bed in %s stopped and removed\n", dir)
	return nil
}
