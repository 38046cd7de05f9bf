package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cgpilot/cgpilot/agent"
	"github.com/cgpilot/cgpilot/test/deploy"
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

// TestManifestAggregatorFlags: the flags the aggregator component gives
// the agent (deploy.AgentAggregatorFlags) are known to it; a bad value
// stops it with an error naming the setting.
func TestManifestAggregatorFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	var args []string
	for name, v := range deploy.AgentAggregatorFlags {
		args = append(args, name+"="+v)
	}
	var stderr bytes.Buffer
	if code := run(append(args, "--health-addr", "", "--socket", ""), &stderr); code != 1 || strings.Contains(stderr.String(), "not defined") {
		t.Fatalf("exit %d (want 1: no node name), stderr %s", code, stderr.String())
	}
	t.Setenv("NODE_NAME", "n1")
	stderr.Reset()
	if code := run([]string{"--aggregator-url=http://agg", "--aggregator-token-file=/t", "--health-addr", "", "--socket", ""}, &stderr); code != 2 || !strings.Contains(stderr.String(), "aggregator.url") {
		t.Fatalf("an http URL: exit %d, stderr %s", code, stderr.String())
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
