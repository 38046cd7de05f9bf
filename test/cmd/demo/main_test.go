//go:build linux

package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunArguments(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		args    []string
		wantErr string // "" = success
		wantOut string
	}{
		{args: nil, wantErr: "usage: demo up|down"},
		{args: []string{"sideways"}, wantErr: `unknown command "sideways"`},
		{args: []string{"up", "extra"}, wantErr: `unexpected arguments ["extra"]`},
		{args: []string{"down", "--nope"}, wantErr: "flag provided but not defined"},
		{args: []string{"down", "--dir", dir}, wantOut: "no demo in " + dir + ": nothing to stop"},
	} {
		var out bytes.Buffer
		err := run(tc.args, &out)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("run(%q) = %v, want success", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.wantErr)
		case !strings.Contains(out.String(), tc.wantOut):
			t.Errorf("run(%q) printed %q, want %q", tc.args, out.String(), tc.wantOut)
		}
	}
}
