package agent

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestParseKubeletState(t *testing.T) {
	for _, tc := range []struct {
		name, in, taken string
		pods            int
		wantErr         bool
	}{
		{"none policy", `{"policyName":"none","defaultCpuSet":"","checksum":1}`, "", 0, false},
		{"static empty", `{"policyName":"static","defaultCpuSet":"0-7","checksum":1}`, "", 0, false},
		{"static two pods", `{"policyName":"static","defaultCpuSet":"0,5-7","entries":{"u1":{"app":"1-2"},"u2":{"db":"3","side":"4"}},"checksum":1}`, "1-4", 2, false},
		{"garbage", `{"policyName":`, "", 0, true},
		{"bad list", `{"policyName":"static","entries":{"u1":{"app":"x"}}}`, "", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ks, err := parseKubeletState("f", []byte(tc.in))
			if tc.wantErr {
				if !errors.Is(err, ErrKubeletState) || ks.Taken.Size() != 0 || len(ks.Pods) != 0 {
					t.Fatalf("want ErrKubeletState and nothing taken, got %v %+v", err, ks)
				}
				return
			}
			if err != nil || ks.Taken.String() != tc.taken || len(ks.Pods) != tc.pods {
				t.Fatalf("got %+v, %v", ks, err)
			}
		})
	}
	// A missing file (no static policy ever ran) is not an error.
	ks, err := readKubeletState(filepath.Join(t.TempDir(), "cpu_manager_state"))
	if err != nil || ks.Taken.Size() != 0 {
		t.Fatalf("missing file: %+v %v", ks, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "s"), []byte(`{"policyName":"static","entries":{"u":{"c":"2"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if ks, err := readKubeletState(filepath.Join(dir, "s")); err != nil || !ks.Pods["u"] {
		t.Fatalf("file: %+v %v", ks, err)
	}
}

func FuzzParseKubeletState(f *testing.F) {
	f.Add([]byte(`{"policyName":"static","entries":{"u1":{"app":"1-2"}}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ks, err := parseKubeletState("fuzz", b)
		if err != nil && (ks.Taken.Size() != 0 || len(ks.Pods) != 0) {
			t.Fatal("partial state with an error")
		}
	})
}
