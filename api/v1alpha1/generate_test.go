package v1alpha1_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cgpilot/cgpilot/test/tier"
)

// TestGeneratedUpToDate: the deepcopy code, the CRDs in deploy/crds and the
// chart's copies are what hack/generate.sh makes from the current sources
// (controller-gen pinned in hack/tool.sh, built on first use).
func TestGeneratedUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: regenerating needs controller-gen (hack/tool.sh builds it from the Go module proxy once); unit tier without -short runs it")
	}
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(root, "hack", "generate.sh"), "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("hack/generate.sh --check: %v\n%s", err, out)
	}
}
