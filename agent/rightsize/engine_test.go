package rightsize

import (
	"math"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/agent/collector"
	"github.com/cgpilot/cgpilot/recommend"
)

// TestEngineSurvivesRestart: an engine saved and opened again from its
// state directory (the agent's restart or upgrade) recommends exactly what
// the one that kept running does, for every container and preset, and
// both go on learning alike; an OOM kill recorded before the save is in
// the restored state.
func TestEngineSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	presets := []string{"cgpilot-balanced", "cgpilot-fleet", "vpa"}
	open := func() *Engine {
		e, warns, err := NewEngine(EngineOptions{CheckpointDir: dir})
		if err != nil || len(warns) > 0 {
			t.Fatal(err, warns)
		}
		if _, err := e.UsePresets(presets); err != nil {
			t.Fatal(err)
		}
		return e
	}
	targets := []*collector.Target{{Key: "shop/web/app"}, {Key: "shop/db/postgres"}, {Key: "batch/etl/worker"}}
	t0 := time.Unix(1_800_000_000, 0)
	feed := func(e *Engine, from, to time.Duration) {
		for d := from; d < to; d += time.Minute {
			now := t0.Add(d)
			var round []collector.Sample
			for i, tg := range targets {
				// A daily wave per container, different shapes.
				phase := float64(d%(24*time.Hour)) / float64(24*time.Hour)
				cpu := 0.1*float64(i+1) + 0.05*float64(i+1)*math.Sin(2*math.Pi*phase)
				mem := uint64(64<<20*(i+1)) + uint64(8<<20*(1+math.Sin(2*math.Pi*phase+float64(i))))
				round = append(round, collector.Sample{Target: tg, Time: now, CPUCores: cpu, MemoryWorkingSet: mem})
			}
			e.Round(now, round)
		}
	}
	running := open()
	feed(running, 0, 30*time.Hour)
	running.RecordOOM("shop/db/postgres", recommend.OOMEvent{Time: t0.Add(29 * time.Hour), UsageBytes: 200 << 20, LimitBytes: 200 << 20, RequestBytes: 128 << 20})
	if err := running.Save(t0.Add(30 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	restarted := open()
	compare := func(at time.Duration) {
		t.Helper()
		for _, p := range presets {
			for _, tg := range targets {
				a, okA, errA := running.Recommendation(p, recommend.Overrides{}, tg.Key, t0.Add(at), time.Hour)
				b, okB, errB := restarted.Recommendation(p, recommend.Overrides{}, tg.Key, t0.Add(at), time.Hour)
				if errA != nil || errB != nil || !okA || okA != okB || !sameRec(a, b) {
					t.Fatalf("%s %s at +%v: running %+v (%v, %v), restarted %+v (%v, %v)", p, tg.Key, at, a, okA, errA, b, okB, errB)
				}
			}
		}
	}
	compare(30 * time.Hour)
	// The OOM kill raised the memory target over what usage alone gives.
	if rec, _, _ := restarted.Recommendation("cgpilot-balanced", recommend.Overrides{}, "shop/db/postgres", t0.Add(30*time.Hour), time.Hour); rec.Memory.Target < 200<<20 {
		t.Fatalf("restored memory target %v: the OOM kill at 200 MiB was lost", rec.Memory.Target)
	}
	feed(running, 30*time.Hour, 36*time.Hour)
	feed(restarted, 30*time.Hour, 36*time.Hour)
	compare(36 * time.Hour)
}
