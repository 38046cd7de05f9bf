package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("reservedCPUs: \"0\"\nexclusiveCap: 0.5\novercommitRatio: 1.5\nmanagedNamespaces: [a, b]\nsweepInterval: 2s\ncgroupParent: /x/kubepods\n"), 0o600)
	c, err := LoadConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.ReservedCPUs != "0" || *c.ExclusiveCap != 0.5 || c.OvercommitRatio != 1.5 || c.SweepInterval.Duration != 2*time.Second ||
		len(c.ManagedNamespaces) != 2 || c.CgroupParent != "/x/kubepods" {
		t.Fatalf("parsed %+v", c)
	}
	if c.IgnoredNamespaces[0] != "kube-system" || c.CheckpointPath != DefaultConfig().CheckpointPath {
		t.Fatal("defaults lost")
	}
	if c.manages("kube-system") || !c.manages("a") || c.manages("c") {
		t.Fatal("namespace rules")
	}
	if c.Aggregator.on() || c.Aggregator.ReportPeriod.Duration != time.Minute {
		t.Fatalf("aggregator defaults: %+v", c.Aggregator)
	}
	os.WriteFile(path, []byte("aggregator: {url: \"https://cgpilot-aggregator.cgpilot-system.svc\", tokenFile: /var/run/t, caFile: /etc/ca.crt, reportPeriod: 30s}\n"), 0o600)
	if c, err = LoadConfigFile(path); err != nil || !c.Aggregator.on() || c.Aggregator.ReportPeriod.Duration != 30*time.Second {
		t.Fatalf("aggregator section: %+v %v", c.Aggregator, err)
	}
}

func TestConfigInvalid(t *testing.T) {
	for _, tc := range []struct{ name, yaml, field string }{
		{"unknown field", "reservedCPU: \"0\"\n", "reservedCPU"},
		{"bad reserved", "reservedCPUs: abc\n", "reservedCPUs"},
		{"cap above 1", "exclusiveCap: 1.5\n", "exclusiveCap"},
		{"cap negative", "exclusiveCap: -0.1\n", "exclusiveCap"},
		{"overcommit below 1", "overcommitRatio: 0.5\n", "overcommitRatio"},
		{"relative checkpoint", "checkpointPath: cp\n", "checkpointPath"},
		{"relative cgroup root", "cgroupRoot: sys\n", "cgroupRoot"},
		{"relative parent", "cgroupParent: kubepods\n", "cgroupParent"},
		{"escaping parent", "cgroupParent: /a/../../b\n", "cgroupParent"},
		{"unclean parent", "cgroupParent: /a//b\n", "cgroupParent"},
		{"root parent", "cgroupParent: /\n", "cgroupParent"},
		{"sweep too short", "sweepInterval: 1ms\n", "sweepInterval"},
		{"sweep not a duration", "sweepInterval: soon\n", "soon"},
		{"empty namespace", "ignoredNamespaces: [\"\"]\n", "namespaces"},
		{"reserved outside cpus", "cpus: 0-1\nreservedCPUs: \"2\"\n", "reservedCPUs"},
		{"reserved is everything", "cpus: 0-1\nreservedCPUs: 0-1\n", "reservedCPUs"},
		{"bad cpus", "cpus: x\n", "cpus"},
		{"not yaml", "{{{", ""},
		{"aggregator over http", "aggregator: {url: \"http://agg:80\", tokenFile: /t}\n", "aggregator.url"},
		{"aggregator with a path", "aggregator: {url: \"https://agg/v1\", tokenFile: /t}\n", "aggregator.url"},
		{"aggregator without a token", "aggregator: {url: \"https://agg\"}\n", "aggregator.tokenFile"},
		{"aggregator relative CA", "aggregator: {url: \"https://agg\", tokenFile: /t, caFile: ca.crt}\n", "aggregator.caFile"},
		{"report period not dividing a day", "aggregator: {reportPeriod: 7s}\n", "aggregator.reportPeriod"},
		{"report period too long", "aggregator: {reportPeriod: 2h}\n", "aggregator.reportPeriod"},
		{"report buffer too small", "aggregator: {maxBufferBytes: 10}\n", "aggregator.maxBufferBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			os.WriteFile(path, []byte(tc.yaml), 0o600)
			_, err := LoadConfigFile(path)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name %q and the file", err, tc.field)
			}
		})
	}
	if _, err := LoadConfigFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("missing file: %v", err)
	}
}
