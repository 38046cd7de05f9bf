package tier

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRepoRootFindsMainModule(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "test", "tier", "tier.go")); err != nil {
		t.Fatalf("RepoRoot()=%s does not hold test/tier: %v", root, err)
	}
}

func TestIsMainModule(t *testing.T) {
	for in, want := range map[string]bool{
		"module github.com/cgpilot/cgpilot\n\ngo 1.26\n":   true,
		"module github.com/cgpilot/cgpilot/test/k8sbins\n": false,
		"// comment\nmodule github.com/cgpilot/cgpilot\n":  false,
		"": false,
	} {
		if got := isMainModule([]byte(in)); got != want {
			t.Errorf("isMainModule(%q)=%v, want %v", in, got, want)
		}
	}
}
