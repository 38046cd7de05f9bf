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
