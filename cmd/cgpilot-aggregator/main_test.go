package main

import (
	"bytes"
	"strings"
	"testing"
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
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
