package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/test/deploy"
)

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nope"}, "flag provided but not defined"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--standalone", "--secure-addr="}, "standalone needs static tokens"},
		{[]string{"--secure-addr=127.0.0.1:0"}, "needs --tls-cert-file"},
		{[]string{"--report-period=7s", "--secure-addr="}, "report period"},
		{[]string{"--hot-watermark=2", "--secure-addr="}, "hot watermark"},
		{[]string{"--placement-watermark-memory=0", "--secure-addr="}, "placement watermarks"},
		{[]string{"--reschedule-hours=25"}, "--reschedule-hours"},
		{[]string{"--reschedule", "--standalone", "--insecure-static-tokens=x", "--secure-addr="}, "rescheduling needs the API server"},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestManifestFlags: every flag the manifests pass (deploy.AggregatorFlags)
// is one the command takes, with the value it means.
func TestManifestFlags(t *testing.T) {
	var args []string
	for name, v := range deploy.AggregatorFlags {
		args = append(args, name+"="+v)
	}
	for name, v := range deploy.AggregatorRescheduleFlags {
		args = append(args, name+"="+v)
	}
	cfg, _, ok := parse(args, io.Discard)
	if !ok {
		t.Fatalf("the manifests' flags do not parse: %v", args)
	}
	if cfg.SecureAddr != ":8443" || cfg.HTTPAddr != ":8080" || cfg.Period != time.Minute || cfg.HotWatermark != 0.8 ||
		cfg.CertFile != deploy.AggregatorFlags["--tls-cert-file"] || !cfg.Reschedule || cfg.RescheduleConfig.PerNode != 2 ||
		cfg.RescheduleConfig.PerWorkload != 1 || cfg.RescheduleConfig.PerHour != 30 || cfg.RescheduleConfig.Emergency != 0.9 {
		t.Errorf("parsed %+v", cfg)
	}
}
