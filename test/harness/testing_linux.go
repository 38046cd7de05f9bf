//go:build linux

package harness

import (
	"context"
	"testing"
)

// MustStart starts a control plane for t (binDir from tier.E2E), logs how
// long the start took, and tears it down in t.Cleanup (and on SIGINT or
// SIGTERM). It fails t on any error, with the component's log tail.
func MustStart(t testing.TB, binDir string, o Options) *ControlPlane {
	t.Helper()
	o.BinDir = binDir
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	cp, err := StartControlPlane(context.Background(), o)
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Logf("timing: control plane (controllers=%v) started in %v", o.Controllers, cp.Started.Round(1e6))
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("tear down control plane: %v", err)
		}
	})
	return cp
}

// MustStartNode starts a node on cp for t (root, tier.Node) and logs how
// long it took. It is torn down with cp, or earlier by Node.Stop.
func MustStartNode(t testing.TB, cp *ControlPlane, o NodeOptions) *Node {
	t.Helper()
	n, err := StartNode(context.Background(), cp, o)
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Logf("timing: node %s Ready in %v", n.Name(), n.Started.Round(1e6))
	return n
}

// Stop tears the node down (pods, kubelet, containerd, mounts, cgroups,
// host paths) and leaves the control plane running.
func (n *Node) Stop() error { return teardownNodeLocked(n.cp.State) }
