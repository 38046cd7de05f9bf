//go:build linux

package agent

import "testing"

func TestPodDirUID(t *testing.T) {
	for _, tc := range []struct {
		name, uid string
		ok        bool
	}{
		{"pod5d1c9a7e-0b7e-4c1e", "5d1c9a7e-0b7e-4c1e", true},
		{"kubepods-burstable-pod5d1c9a7e_0b7e_4c1e.slice", "5d1c9a7e-0b7e-4c1e", true},
		{"kubepods-besteffort-podabc.slice", "abc", true},
		{"kubepods-podabc_def.slice", "abc-def", true},
		{"burstable", "", false},
		{"kubepods-burstable.slice", "", false},
		{"pod", "", false},
		{"kubepods-pod.slice", "", false},
		{"cri-containerd-abc.scope", "", false},
		{"pod.x", "", false},
	} {
		uid, ok := podDirUID(tc.name)
		if uid != tc.uid || ok != tc.ok {
			t.Errorf("podDirUID(%q) = %q, %v; want %q, %v", tc.name, uid, ok, tc.uid, tc.ok)
		}
	}
}
