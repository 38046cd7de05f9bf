package runner

import (
	"testing"

	"github.com/cgpilot/cgpilot/agent/rightsize"
)

func TestStateAfter(t *testing.T) {
	unchanged := rightsize.Decision{State: rightsize.StateUnchanged, Why: "requests are within the tolerance of the recommendation"}
	resize := rightsize.Decision{State: "Resize", Why: "cpu 300m→150m"}
	dry := rightsize.Decision{State: rightsize.StateDryRun, Why: "dry run"}
	for _, c := range []struct {
		name, state, reason string
		d                   rightsize.Decision
		want                string
	}{
		{"resized waits for verify", stateResized, "pods/resize accepted", unchanged, stateResized},
		{"applied stays applied", stateApplied, "the kubelet applied the resize", unchanged, stateApplied},
		{"a new change replaces applied", stateApplied, "the kubelet applied the resize", resize, "Resize"},
		{"a policy turned to dry run replaces applied", stateApplied, "the kubelet applied the resize", dry, rightsize.StateDryRun},
		{"failed is replaced by unchanged", stateFailed, "refused", unchanged, rightsize.StateUnchanged},
		{"nothing before", "", "", unchanged, rightsize.StateUnchanged},
	} {
		state, reason := stateAfter(c.state, c.reason, c.d)
		if state != c.want {
			t.Errorf("%s: state %q, want %q", c.name, state, c.want)
		}
		if wantReason := c.d.Why; state == c.state && state != c.d.State {
			if reason != c.reason {
				t.Errorf("%s: reason %q, want the kept state's %q", c.name, reason, c.reason)
			}
		} else if reason != wantReason {
			t.Errorf("%s: reason %q, want the decision's %q", c.name, reason, wantReason)
		}
	}
}
