package runner

import (
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/cgpilot/cgpilot/agent/collector"
	"github.com/cgpilot/cgpilot/agent/rightsize"
	"github.com/cgpilot/cgpilot/api/report"
)

// TestForgetGone: the histograms of a workload container no pod of the
// node runs are dropped after ForgetAfter, those of running ones never, and
// a workload whose pod comes back within ForgetAfter keeps its history.
func TestForgetGone(t *testing.T) {
	e, _, err := rightsize.NewEngine(rightsize.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.UsePresets([]string{"cgpilot-balanced"}); err != nil {
		t.Fatal(err)
	}
	after := 24 * time.Hour // the agent's default forgetAfter
	r := &Runner{cfg: Options{ForgetAfter: after}, log: logr.Discard(), engine: e, pods: map[string]*rsPod{}, running: map[string]time.Time{}}
	t0 := time.Unix(1_800_000_000, 0)
	keys := []string{"shop/Deployment/web/app", "shop/Pod/once/app", "shop/Deployment/api/app"}
	for i, k := range keys {
		e.Round(t0, []collector.Sample{{Target: &collector.Target{Key: k}, CPUCores: 0.1 * float64(i+1), MemoryWorkingSet: 64 << 20}})
	}
	r.pods["uid-web"] = &rsPod{workload: report.Workload{Namespace: "shop", Kind: "Deployment", Name: "web"}, containers: map[string]rsContainer{"app": {}}}

	r.forgetGone(t0) // first sight of every key: all kept
	r.forgetGone(t0.Add(after / 2))
	r.pods["uid-api"] = &rsPod{workload: report.Workload{Namespace: "shop", Kind: "Deployment", Name: "api"}, containers: map[string]rsContainer{"app": {}}} // back in time
	r.forgetGone(t0.Add(after + time.Minute))
	if got, want := e.Keys(), []string{"shop/Deployment/api/app", "shop/Deployment/web/app"}; !equal(got, want) {
		t.Fatalf("after ForgetAfter: keys %v, want %v", got, want)
	}
	if _, ok := r.running["shop/Pod/once/app"]; ok {
		t.Fatal("the forgotten key is still tracked")
	}
	delete(r.pods, "uid-web")
	r.forgetGone(t0.Add(3 * after))
	r.forgetGone(t0.Add(5 * after))
	if got, want := e.Keys(), []string{"shop/Deployment/api/app"}; !equal(got, want) {
		t.Fatalf("web gone for longer than ForgetAfter: keys %v, want %v", got, want)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
