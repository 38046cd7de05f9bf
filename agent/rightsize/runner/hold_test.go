//go:build linux

package runner

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/cgpilot/cgpilot/agent/podspec"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/recommend"
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

	r.holdAnnotation(uid, "pods/resize accepted", func() {})
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

	r.holdAnnotation(uid, "pods/resize accepted again", func() {})
	r.holdAnnotation(uid, "pods/resize accepted a third time", func() {})
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

// TestResizedEventHeld: the Event of a resize pods/resize accepted waits
// with its annotation (sent at acceptance, its write took the API server's
// time while the kubelet applied the resize): the next state sends it
// before its own, or the hold's timer does; each acceptance's Event is
// sent once, in the order of the acceptances, also for a pod gone since.
func TestResizedEventHeld(t *testing.T) {
	r, _ := unitRightsizer(t)
	var timers []func()
	r.afterQuiet = func(f func()) { timers = append(timers, f) }
	p := r.addPod(t, "web")
	uid := string(p.UID)
	var sent []string
	emit := func(name string) func() { return func() { sent = append(sent, name) } }
	want := func(step string, names ...string) {
		t.Helper()
		if !slices.Equal(sent, names) {
			t.Fatalf("%s: Events sent %q, want %q", step, sent, names)
		}
	}

	r.holdAnnotation(uid, "pods/resize accepted", emit("a"))
	want("accepted")
	timers[0]()
	want("the hold's timer", "a")
	timers[0]()
	want("the timer again", "a")

	r.holdAnnotation(uid, "pods/resize accepted", emit("b"))
	r.holdAnnotation(uid, "pods/resize accepted", emit("c"))
	want("a second acceptance while the first is held", "a", "b")
	r.setState(uid, stateApplied, "the kubelet applied the resize", false)
	want("verified", "a", "b", "c")
	timers[1]()
	timers[2]()
	want("the timers after the Events were sent", "a", "b", "c")

	r.holdAnnotation(uid, "pods/resize accepted", emit("d"))
	r.setState(uid, stateFailed, "the kubelet refused", false)
	sent = append(sent, "failure")
	timers[3]()
	want("a failure after acceptance", "a", "b", "c", "d", "failure")

	r.holdAnnotation(uid, "pods/resize accepted", emit("e"))
	r.Untrack(uid)
	want("untracked while held", "a", "b", "c", "d", "failure")
	timers[4]()
	want("the timer of a pod gone", "a", "b", "c", "d", "failure", "e")
	r.holdAnnotation(uid, "pods/resize accepted", emit("f"))
	want("accepted for a pod not tracked", "a", "b", "c", "d", "failure", "e", "f")
	if len(timers) != 5 {
		t.Fatalf("%d timers, want 5: none for a pod not tracked", len(timers))
	}
}

// TestAppliedAnnotationSettled: verify's Applied annotation shows the
// requests the resize put in the spec, with no next change, as the next
// decision will (which then has nothing to rewrite): not the old requests
// and the change, which the next decision rewrote up to a step later, a
// kubelet sync that held back a resize sent within a PLEG relist of it.
func TestAppliedAnnotationSettled(t *testing.T) {
	r, _ := unitRightsizer(t)
	p := r.addPod(t, "web")
	from := rightsize.Requirements{Requests: rightsize.Resources{CPU: 0.1, Memory: 64 << 20}}
	to := rightsize.Requirements{Requests: rightsize.Resources{CPU: 0.2, Memory: 64 << 20}}
	rec := &recommend.Recommendation{CPU: recommend.Estimate{Target: 0.2, Lower: 0.15, Upper: 0.3}, Memory: recommend.Estimate{Target: 64 << 20, Lower: 32 << 20, Upper: 128 << 20}}
	r.mu.Lock()
	rp := r.pods[string(p.UID)]
	rp.decision = rightsize.Decision{Policy: "web", Mode: rightsize.ModeInPlace, Apply: true,
		Containers: []rightsize.ContainerDecision{{Name: "app", Recommendation: rec, From: from, To: to, Changed: true}}}
	rp.state = stateResized
	before := recommendationOf(rp)
	r.mu.Unlock()
	if c := before.Containers[0].CPU; c.Request != "100m" || c.Next != "200m" {
		t.Fatalf("before verify: request %q, next %q; want 100m, 200m", c.Request, c.Next)
	}
	resized := p.DeepCopy()
	resized.Spec.Containers[0].Resources.Requests = rlist("200m", "64Mi")
	r.Verify(resized)
	pr, ok := r.pendingRec.get(podspec.Key(p.Namespace, p.Name))
	if !ok {
		t.Fatal("verify queued no annotation")
	}
	var got local.Recommendation
	if err := json.Unmarshal([]byte(pr.value), &got); err != nil {
		t.Fatal(err)
	}
	if c := got.Containers[0].CPU; got.State != stateApplied || c.Request != "200m" || c.Next != "" || c.Target != "200m" {
		t.Errorf("after verify: state %q, request %q, next %q, target %q; want %q, 200m, none, 200m", got.State, c.Request, c.Next, c.Target, stateApplied)
	}
	if m := got.Containers[0].Memory; m.Request != "64Mi" || m.Next != "" {
		t.Errorf("after verify: memory request %q, next %q; want 64Mi, none", m.Request, m.Next)
	}
}

// TestSettleKeepsANewerDecision: settle decides outside the runner's lock;
// a decision made meanwhile (the decide loop's, which may have sent a
// resize) is newer and stays, neither replaced nor rewritten as settled.
func TestSettleKeepsANewerDecision(t *testing.T) {
	r, _ := unitRightsizer(t)
	p := r.addPod(t, "web")
	uid := string(p.UID)
	from := rightsize.Requirements{Requests: rightsize.Resources{CPU: 0.2, Memory: 64 << 20}}
	to := rightsize.Requirements{Requests: rightsize.Resources{CPU: 0.3, Memory: 64 << 20}}
	newer := rightsize.Decision{Policy: "web", Mode: rightsize.ModeInPlace, Apply: true, Why: "the decide loop's",
		Containers: []rightsize.ContainerDecision{{Name: "app", From: from, To: to, Changed: true}}}
	resized := p.DeepCopy()
	resized.Spec.Containers[0].Resources.Requests = rlist("200m", "64Mi")
	once := false
	r.beforeLookup = func(string) {
		if once {
			return
		}
		once = true
		r.mu.Lock()
		r.pods[uid].decide(newer)
		r.mu.Unlock()
	}
	r.settle(resized)
	if !once {
		t.Fatal("settle made no decision input: the test does not reach the window")
	}
	r.mu.Lock()
	got := r.pods[uid].decision
	r.mu.Unlock()
	if got.Why != newer.Why || !got.Containers[0].Changed || got.Containers[0].To != to {
		t.Errorf("after settle: %+v; want the newer decision kept: %+v", got, newer)
	}

	// Without a decision meanwhile, settle does its work: the change is
	// the spec's now, nothing left to change.
	r.beforeLookup = nil
	r.settle(resized)
	r.mu.Lock()
	got = r.pods[uid].decision
	r.mu.Unlock()
	if len(got.Containers) != 1 || got.Containers[0].Changed || got.Containers[0].From != from {
		t.Errorf("settled: %+v; want app's From %+v, nothing changed", got.Containers, from)
	}
}
