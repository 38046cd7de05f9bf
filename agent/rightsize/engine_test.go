package rightsize

import (
	"testing"
	"time"
)

// TestExpireKills: kills past their window leave the engine, recent ones
// stay and still count.
func TestExpireKills(t *testing.T) {
	e, _, err := NewEngine(EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	e.Kills("gone/app", t0, OOMWindow)
	e.Kills("recent/app", t0.Add(OOMWindow), OOMWindow)
	e.ExpireKills(t0.Add(OOMWindow+time.Hour), OOMWindow)
	if _, ok := e.ooms["gone/app"]; ok || len(e.ooms) != 1 {
		t.Fatalf("kills kept: %v", e.ooms)
	}
	if n := e.Kills("recent/app", t0.Add(OOMWindow+2*time.Hour), OOMWindow); n != 2 {
		t.Fatalf("recent kill lost: %d kills", n)
	}
}
