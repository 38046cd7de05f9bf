package report

import "testing"

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"ns/Deployment/web/app", true},
		{"ns/Pod/web-1/app", true},
		{"ns/Deployment/web", false},
		{"ns//web/app", false},
		{"", false},
	} {
		k, ok := ParseKey(tc.in)
		if ok != tc.ok || (ok && k.String() != tc.in) {
			t.Errorf("ParseKey(%q) = %v %v", tc.in, k, ok)
		}
	}
}
