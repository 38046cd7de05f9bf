//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/agent/pools"
	local "github.com/cgpilot/cgpilot/api/local"
)

// The kill -9 soak: the real agent binary is SIGKILLed at a random moment
// after a random change (an exclusive pod created or deleted, its
// isolation released or restored, a shared pod added or removed), and at
// times again while it starts up (restore); after each restart the node
// must converge to the one consistent state: every exclusive pod holds
// the cores it held before (none lost, none moved), no core is held twice,
// the checkpoint, the annotations and the cgroups agree, and the shared
// pods run on the rest.
//
//	make test-e2e runs TestE2EKillSoak with 12 kills. The long run (the
//	README's figure), 200 kills with a JSON summary:
//	CGPILOT_K8S_BINS=$(test/k8sbins/build.sh) CGPILOT_TEST_E2E=1 CGPILOT_TEST_KERNEL=1 \
//	  CGPILOT_KILL_SOAK_JSON=/tmp/kill-soak.json go test ./test/e2e -run '^$' -bench BenchmarkKillSoak -benchtime 200x

// soakReport is the soak's JSON summary.
type soakReport struct {
	Kills               int            `json:"kills"`               // SIGKILLs after a change
	MidChange           int            `json:"midChange"`           // kills that found the change not yet fully applied (checkpoint, annotations, cgroups)
	StartupKills        int            `json:"startupKills"`        // extra SIGKILLs while the agent started
	Actions             map[string]int `json:"actions"`             // changes made, by kind
	DoubleAllocatedCPUs int            `json:"doubleAllocatedCPUs"` // cores held by two pods (checkpoint, or shared pods on an exclusive core)
	LostAllocations     int            `json:"lostAllocations"`     // exclusive pods that lost their cores
	MovedAllocations    int            `json:"movedAllocations"`    // exclusive pods given other cores
	NotConverged        int            `json:"notConverged"`        // restarts after which the node did not converge in 30 s
	KillDelayMaxMs      int            `json:"killDelayMaxMs"`      // kills came 0..this after the change
	ConvergeMs          map[string]int `json:"convergeMs"`          // restart to consistent: p50, p90, max
}

func (r soakReport) failures() int {
	return r.DoubleAllocatedCPUs + r.LostAllocations + r.MovedAllocations + r.NotConverged
}

// soakPod is a pod of the soak as the test expects it.
type soakPod struct {
	uid      types.UID
	rel      string // its cgroup, from the sandbox
	cpus     string // exclusive: the cores it holds ("" until converged once)
	isolated bool   // exclusive with release-isolation
}

func TestE2EKillSoak(t *testing.T) {
	r := killSoak(t, 12)
	t.Logf("kill soak: %+v", r)
}

func BenchmarkKillSoak(b *testing.B) {
	r := killSoak(b, b.N)
	b.ReportMetric(float64(r.DoubleAllocatedCPUs), "double-allocated-cpus")
	b.ReportMetric(float64(r.LostAllocations+r.MovedAllocations), "lost-allocations")
	b.ReportMetric(float64(r.MidChange), "kills-mid-change")
	b.ReportMetric(float64(r.ConvergeMs["p50"]), "converge-p50-ms")
	b.ReportMetric(0, "ns/op")
}

func killSoak(tb testing.TB, kills int) soakReport {
	b := newBed(tb)
	ctx := context.Background()
	all := mustSet(tb, b.cfg.CPUs)
	capCPUs := int(float64(all.Size()) * 2 / 3) // the default exclusive cap
	a := b.agentProcess(tb)
	a.start()
	a.waitReady(b.cfg.SocketPath)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	// The agent acts within milliseconds of a change: kills come within
	// 0-20 ms of it, most while it is still being applied.
	const maxDelay = 20 * time.Millisecond
	rep := soakReport{Actions: map[string]int{}, KillDelayMaxMs: int(maxDelay / time.Millisecond)}
	excl, shared := map[string]*soakPod{}, map[string]*soakPod{}
	var converge []time.Duration
	seq := 0
	add := func(name string, exclusive bool) {
		seq++
		if exclusive {
			uid, rel := b.emptyPod(tb, name, "Guaranteed", map[string]string{local.AnnotationCPUPool: "exclusive", local.AnnotationCPUs: "1"}, "c")
			excl[name] = &soakPod{uid: uid, rel: rel}
			return
		}
		uid, rel := b.emptyPod(tb, name, "BestEffort", nil, "c")
		shared[name] = &soakPod{uid: uid, rel: rel}
	}
	del := func(name string) {
		if err := b.cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			tb.Fatal(err)
		}
		delete(excl, name)
		delete(shared, name)
	}
	add("web-0", false)

	for i := range kills {
		// A change, picked among those that make sense now.
		var moves []string
		if len(excl) < capCPUs {
			moves = append(moves, "allocate")
		}
		if len(excl) > 0 {
			moves = append(moves, "release", "isolation")
		}
		if len(shared) < 3 {
			moves = append(moves, "shared-add")
		}
		if len(shared) > 1 {
			moves = append(moves, "shared-remove")
		}
		move := moves[rng.IntN(len(moves))]
		rep.Actions[move]++
		switch move {
		case "allocate":
			add(fmt.Sprintf("db-%d", seq), true)
		case "release":
			del(pick(rng, excl))
		case "isolation":
			name := pick(rng, excl)
			p := excl[name]
			p.isolated = !p.isolated
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%v"}}}`, local.AnnotationReleaseIsolation, p.isolated)
			if _, err := b.cs.CoreV1().Pods("default").Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				tb.Fatal(err)
			}
		case "shared-add":
			add(fmt.Sprintf("web-%d", seq), false)
		case "shared-remove":
			del(pick(rng, shared))
		}
		time.Sleep(time.Duration(rng.Int64N(int64(maxDelay))))
		a.kill()
		rep.Kills++
		if ok, _, _ := b.soakConsistent(tb, all, excl, shared); !ok {
			rep.MidChange++
		}
		if rng.IntN(4) == 0 { // once more, somewhere in the restart
			a.start()
			time.Sleep(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
			a.kill()
			rep.StartupKills++
		}
		restarted := time.Now()
		a.start()

		var last string
		converged := false
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var doubles int
			converged, doubles, last = b.soakConsistent(tb, all, excl, shared)
			if converged {
				rep.DoubleAllocatedCPUs += doubles
				break
			}
		}
		if !converged {
			rep.NotConverged++
			tb.Errorf("kill %d (after %s): not consistent 30s after the restart: %s", i, move, last)
			continue
		}
		converge = append(converge, time.Since(restarted))
		// The cores of every exclusive pod that had some stay the same.
		cp, _ := pools.ReadCheckpoint(b.cfg.CheckpointPath)
		for name, p := range excl {
			got, ok := cp[string(p.uid)]
			switch {
			case !ok:
				rep.LostAllocations++
				tb.Errorf("kill %d (after %s): %s lost its cores %s", i, move, name, p.cpus)
			case p.cpus != "" && got.CPUs.String() != p.cpus:
				rep.MovedAllocations++
				tb.Errorf("kill %d (after %s): %s moved from %s to %s", i, move, name, p.cpus, got.CPUs)
			}
			p.cpus = got.CPUs.String()
		}
	}
	slices.Sort(converge)
	q := func(f float64) int {
		if len(converge) == 0 {
			return 0
		}
		return int(converge[min(len(converge)-1, int(f*float64(len(converge))))].Milliseconds())
	}
	rep.ConvergeMs = map[string]int{"p50": q(0.5), "p90": q(0.9), "max": q(1)}
	if out := os.Getenv("CGPILOT_KILL_SOAK_JSON"); out != "" {
		body, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(out, append(body, '\n'), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	if n := rep.failures(); n > 0 {
		tb.Errorf("kill soak: %d failures: %+v", n, rep)
	}
	return rep
}

func pick(rng *rand.Rand, m map[string]*soakPod) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names[rng.IntN(len(names))]
}

// soakConsistent says whether the node is in the one consistent state for
// the pods the test expects, how many cores are held twice, and what
// differs.
func (b *bed) soakConsistent(tb testing.TB, all cpuset.CPUSet, excl, shared map[string]*soakPod) (bool, int, string) {
	cp, err := pools.ReadCheckpoint(b.cfg.CheckpointPath)
	if err != nil {
		return false, 0, err.Error()
	}
	doubles, held := 0, cpuset.New()
	for _, a := range cp {
		doubles += a.CPUs.Intersection(held).Size()
		held = held.Union(a.CPUs)
	}
	if len(cp) != len(excl) {
		return false, doubles, fmt.Sprintf("checkpoint has %d allocations, want %d", len(cp), len(excl))
	}
	pool := all.Difference(held)
	pods, err := b.cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return false, doubles, err.Error()
	}
	ann := map[types.UID]map[string]string{}
	for _, p := range pods.Items {
		ann[p.UID] = p.Annotations
	}
	for name, p := range excl {
		a, ok := cp[string(p.uid)]
		if !ok {
			return false, doubles, name + " not in the checkpoint"
		}
		want := a.CPUs
		if p.isolated {
			want = pool.Union(a.CPUs)
		}
		if a.ReleaseIsolation != p.isolated {
			return false, doubles, fmt.Sprintf("%s release-isolation %v in the checkpoint, want %v", name, a.ReleaseIsolation, p.isolated)
		}
		if got := ann[p.uid][local.AnnotationAllocatedCPUs]; got != a.CPUs.String() {
			return false, doubles, fmt.Sprintf("%s annotation %q, checkpoint %s", name, got, a.CPUs)
		}
		if got := b.k.CPUSet(p.rel + "/c"); got != want.String() {
			return false, doubles, fmt.Sprintf("%s cgroup %s, want %s", name, got, want)
		}
	}
	for name, p := range shared {
		got := b.k.CPUSet(p.rel + "/c")
		if got != pool.String() {
			if s, err := cpuset.Parse(got); err == nil && !s.Intersection(held).IsEmpty() && len(excl) > 0 {
				return false, doubles, fmt.Sprintf("shared %s on %s, over exclusive %s", name, got, held)
			}
			return false, doubles, fmt.Sprintf("shared %s on %s, want %s", name, got, pool)
		}
	}
	return true, doubles, "ok " + strconv.Itoa(len(cp))
}
