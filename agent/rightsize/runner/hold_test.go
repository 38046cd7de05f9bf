//go:build linux

package runner

import (
	"encoding/json"
	"testing"

	"github.com/cgpilot/cgpilot/agent/podspec"
	local "github.com/cgpilot/cgpilot/api/local"
)

// TestResizedAnnotationHeld: the annotation of a resize pods/resize
// accepted is not queued at once, nor by a decision while it is held (the
// kubelet syncs every pod update, and one right after pods/resize took its
// time while it applied the resize); the hold's timer queues it, saying
// Resized. A later state (verify's Applied, a failure) is queued at once,
// and an earlier hold's timer does not end a later hold.
func TestResizedAnnotationHeld(t *testing.T) {
	r, h := unitRightsizer(t)
	var timers []func()
	r.afterQuiet = func(f func()) { timers = append(timers, f) }
	p := r.addPod(t, "web")
	uid, key := string(p.UID), RecKeyPrefix+podspec.Key(p.Namespace, p.Name)
	queued := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		n := 0
		for _, k := range h.queued {
			if k == key {
				n++
			}
		}
		return n
	}
	state := func() string {
		pr, ok := r.pendingRec.get(podspec.Key(p.Namespace, p.Name))
		if !ok {
			return ""
		}
		var rec local.Recommendation
		if err := json.Unmarshal([]byte(pr.value), &rec); err != nil {
			t.Fatal(err)
		}
		return rec.State
	}

	r.holdAnnotation(uid, "pods/resize accepted")
	r.annotate(p) // a decision within the hold
	if n, s := queued(), state(); n != 0 || s != "" {
		t.Fatalf("the annotation was queued %d times (%q) while held", n, s)
	}
	if len(timers) != 1 {
		t.Fatalf("%d timers, want 1", len(timers))
	}
	timers[0]()
	if n, s := queued(), state(); n != 1 || s != stateResized {
		t.Fatalf("after the hold: queued %d times, state %q; want once, %q", n, s, stateResized)
	}

	r.holdAnnotation(uid, "pods/resize accepted again")
	r.holdAnnotation(uid, "pods/resize accepted a third time")
	timers[1]() // the second hold's timer: the third still holds
	r.annotate(p)
	if n := queued(); n != 1 {
		t.Fatalf("queued %d times, want still once: a later hold was ended by an earlier timer", n)
	}
	r.setState(uid, stateApplied, "the kubelet applied the resize", false)
	if n, s := queued(), state(); n != 2 || s != stateApplied {
		t.Fatalf("verified: queued %d times, state %q; want twice, %q at once", n, s, stateApplied)
	}
}
