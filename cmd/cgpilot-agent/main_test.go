package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cgpilot/cgpilot/agent"
)

func TestRunRejectsBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(bad, []byte("exclusiveCap: 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NODE_NAME", "")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"--config", bad}, 2, "exclusiveCap=7"},
		{[]string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}, 2, "missing.yaml"},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
	// No node name: a clear error and exit 1 (logged through zap to stderr).
	if code := run([]string{"--health-addr", "", "--socket", ""}, &bytes.Buffer{}); code != 1 {
		t.Errorf("no node name: exit %d, want 1", code)
	}
}

func TestExampleConfigLoads(t *testing.T) {
	cfg, err := agent.LoadConfigFile("config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ReservedCPUs != "0" || cfg.CgroupParent != "/kubepods" || cfg.IgnoredNamespaces[0] != "kube-system" {
		t.Fatalf("example config parsed as %+v", cfg)
	}
}
