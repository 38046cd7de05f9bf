package policy

import "testing"

func TestQoSOf(t *testing.T) {
	const mi = 1 << 20
	g := Requirements{Requests: Values{CPU: 1, Memory: 64 * mi}, Limits: Values{CPU: 1, Memory: 64 * mi}}
	limitsOnly := Requirements{Limits: Values{CPU: 1, Memory: 64 * mi}}
	cpuOnly := Requirements{Requests: Values{CPU: 0.5}}
	noCPULimit := Requirements{Requests: Values{CPU: 1, Memory: 64 * mi}, Limits: Values{Memory: 64 * mi}}
	unequal := Requirements{Requests: Values{CPU: 0.5, Memory: 64 * mi}, Limits: Values{CPU: 1, Memory: 64 * mi}}
	for _, tc := range []struct {
		name string
		cs   []Requirements
		want string
	}{
		{"no containers", nil, QoSBestEffort},
		{"nothing set", []Requirements{{}, {}}, QoSBestEffort},
		{"requests equal limits", []Requirements{g, g}, QoSGuaranteed},
		{"limits only (requests default to them)", []Requirements{limitsOnly}, QoSGuaranteed},
		{"a request only", []Requirements{cpuOnly}, QoSBurstable},
		{"one container without a cpu limit", []Requirements{g, noCPULimit}, QoSBurstable},
		{"request below limit", []Requirements{unequal}, QoSBurstable},
		{"one container with nothing", []Requirements{g, {}}, QoSBurstable},
	} {
		if got := QoSOf(tc.cs); got != tc.want {
			t.Errorf("%s: QoSOf = %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestQoSClass: the rule over set/unset flags, as agent/podspec reads a
// pod's resource lists (a present key is set whatever its value).
func TestQoSClass(t *testing.T) {
	pinned := QoSResource{Request: true, Limit: true, Equal: true}
	limitOnly := QoSResource{Limit: true}
	for _, tc := range []struct {
		name string
		rs   []QoSResource
		want string
	}{
		{"nothing", []QoSResource{{}, {}}, QoSBestEffort},
		{"all pinned", []QoSResource{pinned, pinned, limitOnly, pinned}, QoSGuaranteed},
		{"a request without a limit", []QoSResource{pinned, {Request: true}}, QoSBurstable},
		{"request and limit differ", []QoSResource{pinned, {Request: true, Limit: true}}, QoSBurstable},
		{"one resource unset", []QoSResource{pinned, {}}, QoSBurstable},
	} {
		if got := QoSClass(tc.rs); got != tc.want {
			t.Errorf("%s: QoSClass = %s, want %s", tc.name, got, tc.want)
		}
	}
}
