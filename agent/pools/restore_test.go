package pools

import (
	"strings"
	"testing"
	"time"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
)

// TestRestoreTrustsOnlyConfirmedClaims: without a checkpoint, the
// annotations (which any user who may edit the pod can write) give CPUs
// back only where both of the agent's annotations agree, the set matches
// the pod's demand, and no older pod holds them; the forged claims are
// dropped with their reason and the legitimate pod keeps its core.
func TestRestoreTrustsOnlyConfirmedClaims(t *testing.T) {
	f := newPoolsFixture(t)
	t0 := time.Unix(1e9, 0)
	excl := map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "1"}
	claim := func(cpus string, confirmed bool) Claim {
		c := Claim{AllocatedCPUs: cpus}
		if confirmed {
			c.Status = local.Status{Pool: local.PoolExclusive, CPUs: cpus, State: local.StateAllocated}.Encode()
		}
		return c
	}
	pods := map[string]struct {
		created time.Duration
		claim   Claim
		dropped string // "" when kept
	}{
		"legit":       {0, claim("2", true), ""},
		"greedy":      {time.Minute, claim("1-6", true), "does not match the pod's demand of 1 cpus"},
		"steal":       {2 * time.Minute, claim("2", true), "cpus 2"},
		"unconfirmed": {3 * time.Minute, claim("3", false), "is not confirmed by"},
		"garbage":     {4 * time.Minute, Claim{AllocatedCPUs: strings.Repeat("0-8191,", 1000), Status: "{}"}, "does not parse"},
	}
	claims := map[string]Claim{}
	for uid, p := range pods {
		pod := f.add(uid, cgroup.QoSGuaranteed, excl, 1)
		pod.Created = t0.Add(p.created)
		f.pods[uid] = pod
		claims[uid] = p.claim
	}
	rep, err := f.m.Restore(f.all(), claims, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Source != "pods" || len(rep.Kept) != 1 || rep.Kept[0].UID != "legit" || rep.Kept[0].CPUs.String() != "2" {
		t.Fatalf("kept %+v (source %s), want only legit on cpu 2; dropped %v", rep.Kept, rep.Source, rep.Dropped)
	}
	for uid, p := range pods {
		why, dropped := rep.Dropped[uid]
		switch {
		case p.dropped == "" && dropped:
			t.Errorf("%s dropped: %s", uid, why)
		case p.dropped != "" && !strings.Contains(why, p.dropped):
			t.Errorf("%s: dropped because %q, want %q", uid, why, p.dropped)
		}
	}
	if st := f.m.State(); st.Exclusive().String() != "2" || st.SharedPool().String() != "1,3-7" {
		t.Fatalf("after restore: exclusive %s, shared %s", st.Exclusive(), st.SharedPool())
	}
}

// TestReleaseIsolationNeverReachesOtherTenants: a pod that releases its
// isolation runs on the shared pool and its own cores, never on another
// pod's exclusive cores.
func TestReleaseIsolationNeverReachesOtherTenants(t *testing.T) {
	f := newPoolsFixture(t)
	a := f.add("a", cgroup.QoSGuaranteed, map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "2"}, 2)
	b := f.add("b", cgroup.QoSGuaranteed, map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "2"}, 2)
	f.m.Sync(a, f.all)
	rb := f.m.Sync(b, f.all)
	if rb.Status.State != local.StateAllocated {
		t.Fatalf("b: %+v", rb.Status)
	}
	bCPUs := f.cpusOf("b")
	a.Req.ReleaseIsolation = true
	ra := f.m.Sync(a, f.all)
	if ra.Status.State != local.StateReleased {
		t.Fatalf("a: %+v", ra.Status)
	}
	aNow, bSet := mustSet(t, f.cpusOf("a")), mustSet(t, bCPUs)
	if !aNow.Intersection(bSet).IsEmpty() {
		t.Fatalf("a released onto %s, which holds b's exclusive cores %s", aNow, bSet)
	}
	if want := f.m.State().SharedPool().Union(mustSet(t, ra.AllocatedCPUs)); !aNow.Equals(want) {
		t.Fatalf("a runs on %s, want the shared pool and its own cores %s", aNow, want)
	}
	if f.cpusOf("b") != bCPUs {
		t.Fatalf("b moved from %s to %s", bCPUs, f.cpusOf("b"))
	}
}
