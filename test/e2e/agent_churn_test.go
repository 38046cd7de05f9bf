//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/cgpilot/cgpilot/agent/pools"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/test/deploy"
	"github.com/cgpilot/cgpilot/test/images"
)

// The churn soak (issue 19): the real agent, built with the race detector
// and deployed as users deploy it (deploy/kustomize through
// test/deploy.TestBed, as a DaemonSet pod), on the test bed's real kubelet
// + containerd node, while pods under two InPlace RightsizePolicies with
// short steps come and go at random: Deployments created, scaled and
// deleted, bare pods created and deleted (a third of them force-deleted),
// memory hogs OOM-killed until the agent raises their limits (the demo's
// hog), now and then an exclusive-CPU pod. A few steady pods live through
// it all. It ends with
//
//   - 0 restarts of the agent: the same pod, restartCount 0, the same
//     process start time;
//   - 0 recovered panics (cgpilot_recovered_panics_total, every loop) and
//     0 data races reported by the race detector in the agent's log;
//   - no leaked state: once the churn's pods are gone, every table of the
//     agent (cgpilot_state_entries) holds what the steady pods need and no
//     more, the allocation checkpoint holds only live pods, and the
//     histograms of the deleted workloads are forgotten after forgetAfter
//     (the long run waits for it; the short one checks that none older
//     than forgetAfter remains).
//
// How many pods a soak churns is bounded by how fast the kubelet starts and
// removes them on two shared cores (0.3-0.5 pods a second measured here
// under other sessions' load), not by the agent. make test-e2e runs
// TestNodeChurnSoak: 90 seconds of churn, up to 200 pods
// (CGPILOT_CHURN_PODS), at least 20. The long run, the README's figures,
// 1,000 pods with a JSON summary (and the agent's log beside it):
//
//	CGPILOT_K8S_BINS=$(test/k8sbins/build.sh) CGPILOT_RUNTIME_BINS=$(test/runtimebins/build.sh) CGPILOT_TEST_E2E=1 CGPILOT_TEST_NODE=1 CGPILOT_TEST_KERNEL=1 \
//	  CGPILOT_CHURN_SOAK_JSON=/tmp/churn-soak.json go test ./test/e2e -run '^$' -bench BenchmarkNodeChurnSoak -benchtime 1x -timeout 90m

const (
	churnNS = "churn"
	// churnForgetAfter is the agent's rightsizing.forgetAfter in the soak
	// (the smallest it takes).
	churnForgetAfter = time.Minute
	churnSweep       = 2 * time.Second
	// churnRaceImage is the agent image built with -race.
	churnRaceImage = "docker.io/local/cgpilot-agent:race"
)

// churnOptions size one soak.
type churnOptions struct {
	pods     int           // pod lifecycles to start (pods created by the API server)
	minPods  int           // fewer within budget fails the soak as not exercising the agent
	maxAlive int           // churn pods at once, at most (the node's maxPods is 110)
	budget   time.Duration // the churn phase stops creating after this
	// waitForget waits for the histograms of every deleted workload to be
	// forgotten (forgetAfter after its last pod); otherwise only those
	// gone for longer than forgetAfter must be.
	waitForget bool
}

// churnReport is the soak's JSON summary.
type churnReport struct {
	Seed               uint64             `json:"seed"`
	PodsCreated        int                `json:"podsCreated"`        // churn pods the API server created (bare and by ReplicaSets)
	PodsRan            int                `json:"podsRan"`            // of them, pods whose container ran
	PodsDeleted        int                `json:"podsDeleted"`        // churn pods gone from the API server
	ForceDeleted       int                `json:"forceDeleted"`       // bare pods deleted with grace 0
	Actions            map[string]int     `json:"actions"`            // churn actions by kind
	MaxAlive           int                `json:"maxAlive"`           // churn pods at once (not being deleted), most
	MeanAlive          float64            `json:"meanAlive"`          // churn pods at once (not being deleted), mean over the churn
	ChurnSeconds       float64            `json:"churnSeconds"`       // the churn phase
	DrainSeconds       float64            `json:"drainSeconds"`       // its pods deleted -> the agent's state back to the live set
	TotalSeconds       float64            `json:"totalSeconds"`       // the whole soak, set-up included
	PodsPerSecond      float64            `json:"podsPerSecond"`      // pods created per second of churn
	OOMKills           float64            `json:"oomKills"`           // cgpilot_oom_kills_total{cgroup="container"}
	OOMBumps           float64            `json:"oomBumps"`           // cgpilot_oom_bumps_total{result="written"}
	ResizesAccepted    float64            `json:"resizesAccepted"`    // cgpilot_resizes_total{result="accepted"}
	Decisions          float64            `json:"decisions"`          // cgpilot_rightsize_decisions_total, all states
	AgentCPUPercent    float64            `json:"agentCPUPercent"`    // of one core, over the churn
	AgentRSSMiB        float64            `json:"agentRSSMiB"`        // at the end (race detector on: ~5-10x a normal build)
	AgentPeakRSSMiB    float64            `json:"agentPeakRSSMiB"`    // VmHWM
	AgentRestarts      int32              `json:"agentRestarts"`      // the agent container's restartCount
	AgentReplaced      bool               `json:"agentReplaced"`      // another agent pod or process start time at the end
	RecoveredPanics    float64            `json:"recoveredPanics"`    // cgpilot_recovered_panics_total, all loops
	DataRaces          int                `json:"dataRaces"`          // "WARNING: DATA RACE" in the agent's log
	StatePeak          map[string]float64 `json:"statePeak"`          // cgpilot_state_entries, most during the churn (read every 5s)
	StateAfter         map[string]float64 `json:"stateAfter"`         // cgpilot_state_entries once drained
	HistogramKeysAfter float64            `json:"histogramKeysAfter"` // after forgetAfter (waitForget) or at the end
	Leaks              []string           `json:"leaks"`              // tables not back to the live set
	RunningNotSampled  []string           `json:"runningNotSampled"`  // churn pods running for 30s or more at the churn's end, in the API server and then in the agent's view, that the agent did not sample
	InformerLagSeconds float64            `json:"informerLagSeconds"` // most, of those the agent had not sampled at the churn's end: the API server had the container running -> the agent's view had it
}

func TestNodeChurnSoak(t *testing.T) {
	r := churnSoak(t, churnOptions{pods: envInt(t, "CGPILOT_CHURN_PODS", 200), minPods: 20, maxAlive: 40, budget: 90 * time.Second})
	t.Logf("churn soak: %d pods created (%d ran) in %.0fs (%.2f/s), up to %d at once; %v OOM kills, %v bumps, %v resizes; agent %.1f%% of a core, RSS %.0f MiB (peak %.0f), %d restarts, %v panics, %d races; the agent's pod watch behind by %.1fs at most; %.0fs in all",
		r.PodsCreated, r.PodsRan, r.ChurnSeconds, r.PodsPerSecond, r.MaxAlive, r.OOMKills, r.OOMBumps, r.ResizesAccepted,
		r.AgentCPUPercent, r.AgentRSSMiB, r.AgentPeakRSSMiB, r.AgentRestarts, r.RecoveredPanics, r.DataRaces, r.InformerLagSeconds, r.TotalSeconds)
}

func BenchmarkNodeChurnSoak(b *testing.B) {
	for i := 0; i < b.N; i++ {
		pods := envInt(b, "CGPILOT_CHURN_PODS", 1000)
		r := churnSoak(b, churnOptions{pods: pods, minPods: pods, maxAlive: 60, budget: 60 * time.Minute, waitForget: true})
		b.ReportMetric(float64(r.PodsCreated), "pods")
		b.ReportMetric(r.PodsPerSecond, "pods/s")
		b.ReportMetric(float64(r.AgentRestarts), "restarts")
		b.ReportMetric(r.RecoveredPanics, "panics")
		b.ReportMetric(float64(r.DataRaces), "races")
		b.ReportMetric(float64(len(r.Leaks)), "leaked-tables")
		b.ReportMetric(r.AgentCPUPercent, "agent-cpu-%")
		b.ReportMetric(r.AgentPeakRSSMiB, "agent-peak-rss-MiB")
		b.ReportMetric(0, "ns/op")
	}
}

// churnBed is the soak's cluster, agent and bookkeeping.
type churnBed struct {
	*deployBed
	tb     testing.TB
	health string // the agent's health address
	rng    *rand.Rand

	mu          sync.Mutex
	created     map[types.UID]string    // churn pod -> name
	ran         map[types.UID]bool      // churn pods whose container ran
	terminating map[types.UID]bool      // churn pods being deleted
	gone        map[types.UID]time.Time // churn pods deleted from the API server, when
	podKeys     map[types.UID][]string  // the workload keys a pod's histograms may be under
	// seenRunning is when this test's watch first saw each container
	// (by runtime ID) running: the agent cannot learn it sooner, and a
	// loaded kubelet reports a start well after StartedAt.
	seenRunning map[string]time.Time
}

// steady are the pods that live through the soak.
var steadyPods = []string{"steady-hog"}

const steadyDeployment, steadyReplicas = "steady", 2

func churnSoak(tb testing.TB, o churnOptions) churnReport {
	start := time.Now()
	ctx := context.Background()
	d := startDeployBedWith(tb, true)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("CGPILOT_CHURN_SEED"); v != "" { // replays a logged run's moves
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			tb.Fatalf("CGPILOT_CHURN_SEED=%q: %v", v, err)
		}
		seed = n
	}
	rep := churnReport{Seed: seed, Actions: map[string]int{}, StatePeak: map[string]float64{}}
	b := &churnBed{deployBed: d, tb: tb, rng: rand.New(rand.NewPCG(seed, 19)),
		created: map[types.UID]string{}, ran: map[types.UID]bool{}, terminating: map[types.UID]bool{}, gone: map[types.UID]time.Time{}, podKeys: map[types.UID][]string{},
		seenRunning: map[string]time.Time{}}
	b.health = fmt.Sprintf("127.0.0.1:%d", d.bed.HealthPort)
	tb.Logf("churn soak: seed %d, %d pods, at most %d at once", seed, o.pods, o.maxAlive)

	// The agent, built with -race, from the manifests users apply.
	d.kubectl(tb, "apply", "-k", b.overlay())
	agent := d.agentPod(tb)
	pid := podProcess(tb, string(agent.UID), "/bin/cgpilot-agent")
	started := metric(tb, b.health, "process_start_time_seconds")
	within(tb, time.Minute, "the RightsizePolicy CRD served", func() (bool, string) {
		_, err := d.dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource("rightsizepolicies")).List(ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
	if _, err := d.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: churnNS}}, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	b.policy("churn-web", "web", "5s", "10s")
	b.policy("churn-hog", "hog", "10s", "30s")
	stop := b.watchPods()
	defer stop()

	// The steady pods, before the churn and after it.
	b.createDeployment(steadyDeployment, steadyReplicas)
	b.createPod("steady-hog", "hog")
	within(tb, 3*time.Minute, "the steady pods running and tracked", func() (bool, string) {
		n := b.trackedNames()
		return len(n) == steadyReplicas+len(steadyPods), fmt.Sprint(n)
	})

	// The churn.
	cpu0, t0 := cpuSeconds(tb, pid), time.Now()
	deps := map[string]int{}  // churn Deployments and their replicas
	bare := map[string]bool{} // churn bare pods
	exclusive := ""           // the exclusive pod, when one lives (the cap is one core here)
	seq, samples, aliveSum := 0, 0, 0
	nextState, nextProgress := time.Now(), time.Now().Add(time.Minute)
	for b.count() < o.pods && time.Since(t0) < o.budget {
		exist, alive := b.alive()
		samples++
		aliveSum += alive
		rep.MaxAlive = max(rep.MaxAlive, alive)
		if time.Now().After(nextState) {
			for table, v := range b.state() {
				rep.StatePeak[table] = max(rep.StatePeak[table], v)
			}
			nextState = time.Now().Add(5 * time.Second)
		}
		if time.Now().After(nextProgress) {
			msg := fmt.Sprintf("churn: %d of %d pods created in %v, %d alive, %d existing", b.count(), o.pods, time.Since(t0).Round(time.Second), alive, exist)
			if _, bench := tb.(*testing.B); bench {
				fmt.Fprintln(os.Stderr, msg) // a benchmark's log shows only at its end
			} else {
				tb.Log(msg)
			}
			nextProgress = time.Now().Add(time.Minute)
		}
		type move struct {
			name   string
			weight float64
		}
		var moves []move
		// Terminating pods still hold the kubelet's pod slots (maxPods
		// 110): the churn leaves room for the steady pods and the agent.
		if alive < o.maxAlive && exist < 100 {
			moves = append(moves, move{"deployment-create", 2}, move{"bare-create", 3}, move{"hog-create", 1.5})
			if len(deps) > 0 {
				moves = append(moves, move{"deployment-scale", 3})
			}
			if exclusive == "" {
				moves = append(moves, move{"exclusive-create", 0.3})
			}
		}
		if len(deps) > 0 {
			moves = append(moves, move{"deployment-delete", 1}, move{"deployment-scale-down", 1.5})
		}
		if len(bare) > 0 {
			moves = append(moves, move{"bare-delete", 3})
		}
		if len(moves) == 0 { // at the limits: wait for deletions to finish
			rep.Actions["wait"]++
			time.Sleep(200 * time.Millisecond)
			continue
		}
		total := 0.0
		for _, m := range moves {
			total += m.weight
		}
		x := b.rng.Float64() * total
		var mv string
		for _, m := range moves {
			if x -= m.weight; x <= 0 {
				mv = m.name
				break
			}
		}
		rep.Actions[mv]++
		seq++
		actStart := time.Now()
		switch mv {
		case "deployment-create":
			name := fmt.Sprintf("d%d", seq)
			deps[name] = 1 + b.rng.IntN(3)
			b.createDeployment(name, deps[name])
		case "deployment-scale", "deployment-scale-down":
			name := pickKey(b.rng, deps)
			n := b.rng.IntN(5)
			if mv == "deployment-scale-down" {
				n = b.rng.IntN(deps[name] + 1)
			}
			deps[name] = n
			b.scale(name, n)
		case "deployment-delete":
			name := pickKey(b.rng, deps)
			delete(deps, name)
			b.deleteDeployment(name)
		case "bare-create", "hog-create", "exclusive-create":
			name := fmt.Sprintf("p%d", seq)
			class := map[string]string{"bare-create": "web", "hog-create": "hog", "exclusive-create": "exclusive"}[mv]
			if class == "exclusive" {
				exclusive = name
			}
			bare[name] = true
			b.createPod(name, class)
		case "bare-delete":
			name := pickKey(b.rng, bare)
			delete(bare, name)
			if name == exclusive {
				exclusive = ""
			}
			force := b.rng.IntN(3) == 0
			if force {
				rep.ForceDeleted++
			}
			b.deletePod(name, force)
		}
		if d := time.Since(actStart); d > 2*time.Second {
			tb.Logf("slow: %s took %v (the API server on a loaded machine)", mv, d.Round(time.Millisecond))
		}
		time.Sleep(time.Duration(100+b.rng.IntN(200)) * time.Millisecond)
	}
	rep.ChurnSeconds = time.Since(t0).Seconds()
	rep.AgentCPUPercent = 100 * (cpuSeconds(tb, pid) - cpu0) / rep.ChurnSeconds
	if samples > 0 {
		rep.MeanAlive = float64(aliveSum) / float64(samples)
	}

	tb.Logf("churn ended after %.0fs: %d pods created; the agent's tables: %v", rep.ChurnSeconds, b.count(), b.state())
	tb.Logf("the agent's work queues: %s", b.queues())
	rep.RunningNotSampled = b.runningNotSampled(30*time.Second, &rep)

	// Drain: every churn workload and pod deleted; then the agent's state
	// must return to the steady pods.
	t1 := time.Now()
	for name := range deps {
		b.deleteDeployment(name)
	}
	for name := range bare {
		b.deletePod(name, false)
	}
	within(tb, 3*time.Minute, "the churn pods gone", func() (bool, string) {
		pods, err := d.cs.CoreV1().Pods(churnNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var left []string
		for _, p := range pods.Items {
			if !strings.HasPrefix(p.Name, "steady") || p.DeletionTimestamp != nil {
				left = append(left, p.Name)
			}
		}
		return len(left) == 0, fmt.Sprintf("%d left: %v", len(left), left[:min(len(left), 10)])
	})
	var leaks []string
	func() {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			leaks = b.leaks()
			if len(leaks) == 0 || time.Now().After(deadline) {
				return
			}
			time.Sleep(time.Second)
		}
	}()
	rep.DrainSeconds = time.Since(t1).Seconds()
	rep.StateAfter = b.state()
	tb.Logf("drained in %.0fs: %v", rep.DrainSeconds, rep.StateAfter)

	// Histograms: forgotten forgetAfter after their workload's last pod.
	if o.waitForget {
		within(tb, churnForgetAfter+time.Minute, "the deleted workloads' histograms forgotten", func() (bool, string) {
			n := b.state()["histogram-keys"]
			return n == float64(1+len(steadyPods)), fmt.Sprintf("%v keys, want %d (the steady workloads')", n, 1+len(steadyPods))
		})
	} else if n, most := b.state()["histogram-keys"], b.recentKeys(time.Now().Add(-churnForgetAfter-4*churnSweep)); n > float64(most) {
		leaks = append(leaks, fmt.Sprintf("histogram-keys %v, at most %d (the steady workloads and those with a pod within forgetAfter)", n, most))
	}
	rep.HistogramKeysAfter = b.state()["histogram-keys"]
	rep.Leaks = leaks

	// The agent: the same pod and process, no restart, no panic, no race.
	now := d.agentPod(tb)
	rep.AgentRestarts = now.Status.ContainerStatuses[0].RestartCount
	rep.AgentReplaced = now.UID != agent.UID || metric(tb, b.health, "process_start_time_seconds") != started
	rep.RecoveredPanics = b.sum("cgpilot_recovered_panics_total")
	rep.AgentRSSMiB, rep.AgentPeakRSSMiB = statusMiB(tb, pid, "VmRSS"), statusMiB(tb, pid, "VmHWM")
	rep.DataRaces = b.logCount(now.Name, "WARNING: DATA RACE")
	rep.OOMKills = metric(tb, b.health, `cgpilot_oom_kills_total{cgroup="container"}`)
	rep.OOMBumps = metric(tb, b.health, `cgpilot_oom_bumps_total{result="written"}`)
	rep.ResizesAccepted = metric(tb, b.health, `cgpilot_resizes_total{result="accepted"}`)
	rep.Decisions = b.sum("cgpilot_rightsize_decisions_total")
	b.mu.Lock()
	rep.PodsCreated, rep.PodsRan, rep.PodsDeleted = len(b.created), len(b.ran), len(b.gone)
	b.mu.Unlock()
	rep.PodsPerSecond = float64(rep.PodsCreated) / rep.ChurnSeconds
	rep.TotalSeconds = time.Since(start).Seconds()
	if out := os.Getenv("CGPILOT_CHURN_SOAK_JSON"); out != "" {
		body, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(out, append(body, '\n'), 0o644); err != nil {
			tb.Fatal(err)
		}
		b.saveLog(now.Name, out+".agent.log")
	}

	switch {
	case rep.AgentRestarts != 0 || rep.AgentReplaced:
		tb.Errorf("the agent restarted (%d restarts, replaced %v): %+v", rep.AgentRestarts, rep.AgentReplaced, rep)
	case rep.RecoveredPanics != 0:
		tb.Errorf("the agent recovered %v panics (its log says where): %+v", rep.RecoveredPanics, rep)
	case rep.DataRaces != 0:
		tb.Errorf("the race detector reported %d data races in the agent's log: %+v", rep.DataRaces, rep)
	case len(rep.Leaks) > 0:
		tb.Errorf("state not back to the live set: %s", strings.Join(rep.Leaks, "; "))
	case len(rep.RunningNotSampled) > 0:
		tb.Errorf("pods running for 30s or more (in the agent's view, or in the API server with the agent's view more than %v behind) that the agent did not sample: %v", informerCatchUp, rep.RunningNotSampled)
	case rep.PodsCreated < o.minPods:
		tb.Errorf("only %d pods created within %v, want %d or more", rep.PodsCreated, o.budget, o.minPods)
	case rep.PodsRan == 0 || rep.OOMKills == 0 || rep.ResizesAccepted == 0:
		tb.Errorf("the soak did not exercise the agent (pods ran %d, OOM kills %v, resizes %v)", rep.PodsRan, rep.OOMKills, rep.ResizesAccepted)
	}
	return rep
}

// overlay writes the test bed's kustomize overlay with the soak's own
// patch: the race-enabled image, room for the race detector (about 5-10x
// the memory), and the config's short windows (sampling every second,
// sweeps every 2s, histograms forgotten a minute after their workload).
func (b *churnBed) overlay() string {
	tb, d := b.tb, b.deployBed
	dir := filepath.Join(d.dir, "overlay")
	bed := d.bed
	bed.Image = churnRaceImage
	bed.ExtraArgs = []string{"--profiling"} // a failing soak logs the agent's goroutines
	if err := bed.WriteOverlay(dir, d.root); err != nil {
		tb.Fatal(err)
	}
	rendered, err := deploy.Kustomize(d.root)
	if err != nil {
		tb.Fatal(err)
	}
	objs, err := deploy.Decode(rendered)
	if err != nil {
		tb.Fatal(err)
	}
	cm := deploy.Find(objs, "ConfigMap", deploy.AgentName)
	if cm == nil {
		tb.Fatal("no agent ConfigMap in deploy/kustomize")
	}
	data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(data), &cfg); err != nil {
		tb.Fatal(err)
	}
	cfg["sweepInterval"] = churnSweep.String()
	rs, _ := cfg["rightsizing"].(map[string]any)
	rs["sampleInterval"], rs["forgetAfter"], rs["checkpointInterval"] = "1s", churnForgetAfter.String(), "10s"
	cfgYAML, err := yaml.Marshal(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	docs := []any{
		map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": map[string]any{"name": deploy.AgentName, "namespace": deploy.Namespace},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
				"name": "agent", "resources": map[string]any{"limits": map[string]any{"cpu": "2", "memory": "2Gi"}}}}}}}},
		map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": deploy.AgentName, "namespace": deploy.Namespace},
			"data": map[string]any{"config.yaml": string(cfgYAML)}},
	}
	var patch strings.Builder
	patch.WriteString("# The churn soak's changes (test/e2e/agent_churn_test.go).\n")
	for _, doc := range docs {
		y, err := yaml.Marshal(doc)
		if err != nil {
			tb.Fatal(err)
		}
		patch.WriteString("---\n")
		patch.Write(y)
	}
	if err := os.WriteFile(filepath.Join(dir, "churn-patch.yaml"), []byte(patch.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
	k := filepath.Join(dir, "kustomization.yaml")
	raw, err := os.ReadFile(k)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(k, append(raw, []byte("  - path: churn-patch.yaml\n")...), 0o644); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// policy creates an InPlace policy for the pods of class. Its CPU
// requests are capped at 25m: the preset's 100m floor would otherwise
// raise every sleeping container to 100m and leave room for only about
// twenty pods on two cores, the rest Pending.
func (b *churnBed) policy(name, class, step, minHistory string) {
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "RightsizePolicy",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"mode": "InPlace", "step": step, "minHistory": minHistory,
			"cpu":               map[string]any{"minAllowed": "5m", "maxAllowed": "25m"},
			"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": churnNS}},
			"podSelector":       map[string]any{"matchLabels": map[string]any{"class": class}}}}}
	if _, err := b.dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource("rightsizepolicies")).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		b.tb.Fatal(err)
	}
}

// churnPodSpec is a churn pod of class web (a sleeping container), hog (the
// demo's memory hog: dd asks for 64 MiB under a 48 MiB limit, retried
// every second, until the agent's OOM bumps let it through) or exclusive
// (a whole core of the exclusive pool).
func churnPodSpec(class string) corev1.PodSpec {
	grace := int64(1)
	cmd, req, lim := "exec sleep 3600", rl("10m", "16Mi"), corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	switch class {
	case "hog":
		cmd = `until dd if=/dev/zero of=/dev/null bs=64M count=1 2>/dev/null; do sleep 1; done; exec sleep 3600`
		req, lim = rl("10m", "32Mi"), corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("48Mi")}
	case "exclusive":
		req, lim = rl("1", "32Mi"), rl("1", "32Mi")
	}
	s := busyboxPod("", nil, cmd, req, lim).Spec
	s.TerminationGracePeriodSeconds = &grace
	return s
}

func (b *churnBed) createPod(name, class string) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: churnNS, Labels: map[string]string{"class": class}}, Spec: churnPodSpec(class)}
	if class == "exclusive" {
		p.Labels["class"] = "web"
		p.Annotations = map[string]string{local.AnnotationCPUPool: "exclusive"}
	}
	if _, err := b.cs.CoreV1().Pods(churnNS).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		b.tb.Fatal(err)
	}
}

func (b *churnBed) deletePod(name string, force bool) {
	var opts metav1.DeleteOptions
	if force {
		opts.GracePeriodSeconds = new(int64)
	}
	if err := b.cs.CoreV1().Pods(churnNS).Delete(context.Background(), name, opts); err != nil && !apierrors.IsNotFound(err) {
		b.tb.Fatal(err)
	}
}

func (b *churnBed) createDeployment(name string, replicas int) {
	n := int32(replicas)
	labels := map[string]string{"class": "web", "app": name}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: churnNS},
		Spec: appsv1.DeploymentSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: churnPodSpec("web")}}}
	if _, err := b.cs.AppsV1().Deployments(churnNS).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		b.tb.Fatal(err)
	}
}

func (b *churnBed) scale(name string, replicas int) {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := b.cs.AppsV1().Deployments(churnNS).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		b.tb.Fatal(err)
	}
}

func (b *churnBed) deleteDeployment(name string) {
	bg := metav1.DeletePropagationBackground
	if err := b.cs.AppsV1().Deployments(churnNS).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
		b.tb.Fatal(err)
	}
}

// watchPods keeps the books on the churn namespace's pods: which were
// created, which ran, which are gone and when.
func (b *churnBed) watchPods() (stop func()) {
	f := informers.NewSharedInformerFactoryWithOptions(b.cs, 0, informers.WithNamespace(churnNS))
	inf := f.Core().V1().Pods().Informer()
	note := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || strings.HasPrefix(p.Name, "steady") {
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		b.created[p.UID] = p.Name
		keys := []string{"Pod/" + p.Name}
		for _, o := range p.OwnerReferences {
			keys = append(keys, "ReplicaSet/"+o.Name, "Deployment/"+p.Labels["app"])
		}
		b.podKeys[p.UID] = keys
		if p.DeletionTimestamp != nil {
			b.terminating[p.UID] = true
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Running != nil || c.State.Terminated != nil {
				b.ran[p.UID] = true
			}
			if _, seen := b.seenRunning[c.ContainerID]; !seen && c.State.Running != nil && c.ContainerID != "" {
				b.seenRunning[c.ContainerID] = time.Now()
			}
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    note,
		UpdateFunc: func(_, obj any) { note(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok && !strings.HasPrefix(p.Name, "steady") {
				b.mu.Lock()
				b.gone[p.UID] = time.Now()
				b.mu.Unlock()
			}
		},
	})
	if err != nil {
		b.tb.Fatal(err)
	}
	ch := make(chan struct{})
	f.Start(ch)
	f.WaitForCacheSync(ch)
	return func() { close(ch); f.Shutdown() }
}

// count is how many churn pods were created so far.
func (b *churnBed) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.created)
}

// alive is how many churn pods exist now and, of them, how many are not
// being deleted.
func (b *churnBed) alive() (exist, live int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	exist = len(b.created) - len(b.gone)
	live = exist
	for uid := range b.terminating {
		if _, gone := b.gone[uid]; !gone {
			live--
		}
	}
	return exist, live
}

// recentKeys bounds the histogram keys that may remain: the steady
// workloads', and those of every workload with a pod after since.
func (b *churnBed) recentKeys(since time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	keys := map[string]bool{}
	for uid, ks := range b.podKeys {
		if at, gone := b.gone[uid]; !gone || at.After(since) {
			for _, k := range ks {
				keys[k] = true
			}
		}
	}
	return len(keys) + 1 + len(steadyPods) // the steady Deployment and pods
}

// trackedNames are the pods the agent right-sizes, from its local API.
func (b *churnBed) trackedNames() []string {
	var recs []local.RecView
	if err := local.NewClient(b.bed.Socket()).Get(context.Background(), local.PathRecs, nil, &recs); err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, r := range recs {
		if !slices.Contains(out, r.Pod) {
			out = append(out, r.Pod)
		}
	}
	sort.Strings(out)
	return out
}

// runningNotSampled lists the churn pods whose container has run for at
// least d, counted from when the API server said so (this test's watch
// saw it), that the agent does not sample (its recs list only sampled
// containers). The agent cannot sample a container before its own pod
// watch has it running, so each one found is asked of the agent:
//   - its view has the container running: a sampling fault, listed;
//   - its view does not (the pod unknown, or its container not yet
//     running): the agent's watch is behind the API server's. The soak
//     then waits, at most informerCatchUp, for the agent's view to have it
//     running, and gives right-sizing d from that moment; a container the
//     agent never sees running, or does not sample within d of seeing it,
//     is listed. The lag is logged and kept in the report.
func (b *churnBed) runningNotSampled(d time.Duration, rep *churnReport) []string {
	pods, err := b.cs.CoreV1().Pods(churnNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return []string{err.Error()}
	}
	sampled := b.trackedNames()
	var out []string
	behind := map[string]time.Time{} // "pod/container" -> when the API server had it running
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			r := c.State.Running
			if r == nil || p.DeletionTimestamp != nil || slices.Contains(sampled, p.Name) {
				continue
			}
			b.mu.Lock()
			seen, ok := b.seenRunning[c.ContainerID]
			b.mu.Unlock()
			if !ok || time.Since(r.StartedAt.Time) < d || time.Since(seen) < d {
				continue
			}
			v := b.agentContainer(p.Name, c.Name)
			if v.Sampled {
				continue // sampled since the recs were read
			}
			if v.State != local.ContainerRunning {
				b.tb.Logf("%s: running in the API server since %s, not in the agent's view (%s): its pod watch is behind", p.Name, seen.Format(time.TimeOnly+".000"), v.State)
				behind[p.Name+"/"+c.Name] = seen
				continue
			}
			out = append(out, fmt.Sprintf("%s (running since %s, in the API since %s, in the agent's view: %+v)", p.Name, r.StartedAt.Format(time.TimeOnly), seen.Format(time.TimeOnly+".000"), v))
		}
	}
	if len(out) > 0 {
		b.tb.Logf("running for %v or more but not sampled by the agent: %v (sampled: %v)", d, out, sampled)
	}
	if len(behind) > 0 {
		b.apiserverWatchLog()
		out = append(out, b.catchUp(behind, d, rep)...)
	}
	if len(out) > 0 {
		b.dumpGoroutines()
	}
	return out
}

// informerCatchUp bounds how far behind the API server the agent's pod
// watch may be before the soak fails on it.
const informerCatchUp = 90 * time.Second

// catchUp follows the containers the agent's pod watch had not yet seen
// running (key "pod/container", value when the API server had it): each
// must appear running in the agent's view within informerCatchUp and be
// sampled within d of that. It returns those that were not, and keeps the
// largest lag in rep.
func (b *churnBed) catchUp(behind map[string]time.Time, d time.Duration, rep *churnReport) []string {
	seenByAgent := map[string]time.Time{}
	var out []string
	deadline := time.Now().Add(informerCatchUp)
	for len(behind) > 0 {
		for key, apiAt := range behind {
			pod, ctr, _ := strings.Cut(key, "/")
			v := b.agentContainer(pod, ctr)
			at, saw := seenByAgent[key]
			if !saw && v.State == local.ContainerRunning {
				at, saw = time.Now(), true
				seenByAgent[key] = at
				lag := at.Sub(apiAt)
				rep.InformerLagSeconds = max(rep.InformerLagSeconds, lag.Seconds())
				b.tb.Logf("%s: running in the agent's view %v after the API server had it", pod, lag.Round(100*time.Millisecond))
			}
			switch {
			case v.Sampled:
				b.tb.Logf("%s: sampled %v after the API server had it running", pod, time.Since(apiAt).Round(100*time.Millisecond))
				delete(behind, key)
			case !saw && b.gonePod(pod):
				b.tb.Logf("%s: deleted before the agent's view had it running", pod)
				delete(behind, key)
			case !saw && time.Now().After(deadline):
				out = append(out, fmt.Sprintf("%s (in the API since %s, never running in the agent's view within %v: %+v)", pod, apiAt.Format(time.TimeOnly+".000"), informerCatchUp, v))
				delete(behind, key)
			case saw && time.Since(at) > d:
				out = append(out, fmt.Sprintf("%s (running in the agent's view since %s, not sampled within %v: %+v)", pod, at.Format(time.TimeOnly+".000"), d, v))
				delete(behind, key)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return out
}

// gonePod says whether the API server no longer has the churn pod.
func (b *churnBed) gonePod(name string) bool {
	_, err := b.cs.CoreV1().Pods(churnNS).Get(context.Background(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// apiserverWatchLog logs what kube-apiserver said of slow or ended
// watches (a watch behind has no other trace).
func (b *churnBed) apiserverWatchLog() {
	lines := grepLog(b.cp.LogPath("kube-apiserver"), func(l string) bool {
		l = strings.ToLower(l)
		return strings.Contains(l, "watch") && (strings.Contains(l, "unresponsive") || strings.Contains(l, "forcing") ||
			strings.Contains(l, "terminat") || strings.Contains(l, "slow") || strings.Contains(l, "timeout"))
	})
	n := len(lines)
	if n > 20 {
		lines = lines[n-20:]
	}
	b.tb.Logf("kube-apiserver on slow or ended watches (%d lines, the last 20):\n%s", n, strings.Join(lines, "\n"))
}

// grepLog returns the lines of a component's log that match, or the read
// error as its one line (a log is only a failure's diagnostic).
func grepLog(path string, match func(string) bool) []string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return []string{fmt.Sprintf("(%v)", err)}
	}
	var out []string
	for l := range strings.SplitSeq(string(raw), "\n") {
		if match(l) {
			out = append(out, l)
		}
	}
	return out
}

// agentContainer is the agent's view of one container of a churn pod, by
// name (a container restarted after an OOM kill has a new runtime ID):
// State says why when the agent does not know the pod or the container.
func (b *churnBed) agentContainer(pod, name string) local.ContainerView {
	var v local.ExplainView
	if err := local.NewClient(b.bed.Socket()).Get(context.Background(), local.PathExplain, url.Values{"pod": {churnNS + "/" + pod}}, &v); err != nil {
		return local.ContainerView{State: "unknown to the agent: " + err.Error()}
	}
	for _, c := range v.Containers {
		if c.Name == name {
			return c
		}
	}
	return local.ContainerView{State: fmt.Sprintf("not among the agent's containers %+v", v.Containers)}
}

// queues sums up the agent's work queues: depth, mean wait, mean work
// time and the longest-held key, by queue.
func (b *churnBed) queues() string {
	depth := b.series("cgpilot_workqueue_depth")
	waitSum, waitN := b.series("cgpilot_workqueue_queue_duration_seconds_sum"), b.series("cgpilot_workqueue_queue_duration_seconds_count")
	workSum, workN := b.series("cgpilot_workqueue_work_duration_seconds_sum"), b.series("cgpilot_workqueue_work_duration_seconds_count")
	longest := b.series("cgpilot_workqueue_longest_running_processor_seconds")
	var out []string
	for _, q := range []string{"cgpilot-pods", "cgpilot-status"} {
		l := `{name="` + q + `"}`
		mean := func(sum, n map[string]float64, name string) float64 {
			if c := n[name+"_count"+l]; c > 0 {
				return 1000 * sum[name+"_sum"+l] / c
			}
			return 0
		}
		out = append(out, fmt.Sprintf("%s depth %v, wait %.1f ms mean over %v keys, work %.1f ms mean, longest held %.1fs", q,
			depth["cgpilot_workqueue_depth"+l], mean(waitSum, waitN, "cgpilot_workqueue_queue_duration_seconds"),
			waitN["cgpilot_workqueue_queue_duration_seconds_count"+l], mean(workSum, workN, "cgpilot_workqueue_work_duration_seconds"),
			longest["cgpilot_workqueue_longest_running_processor_seconds"+l]))
	}
	// A read of the kubelet's view in a reconcile is a PodResources call
	// holding a worker: the reconciles wait on a loaded kubelet.
	reads := b.series("cgpilot_kubelet_view_reads_total")
	out = append(out, fmt.Sprintf("the kubelet's view read %v times at a pod's reconcile, %v at sweeps",
		reads[`cgpilot_kubelet_view_reads_total{why="pod"}`], reads[`cgpilot_kubelet_view_reads_total{why="sweep"}`]))
	return strings.Join(out, "; ")
}

// state is cgpilot_state_entries by table.
func (b *churnBed) state() map[string]float64 {
	out := map[string]float64{}
	for name, v := range b.series("cgpilot_state_entries") {
		table := strings.TrimSuffix(strings.TrimPrefix(name, `cgpilot_state_entries{table="`), `"}`)
		out[table] = v
	}
	return out
}

// sum adds every series of a metric.
func (b *churnBed) sum(metric string) float64 {
	s := 0.0
	for _, v := range b.series(metric) {
		s += v
	}
	return s
}

// series are the samples of one metric by their full name.
func (b *churnBed) series(name string) map[string]float64 {
	resp, err := http.Get("http://" + b.health + "/metrics")
	if err != nil {
		b.tb.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && (f[0] == name || strings.HasPrefix(f[0], name+"{")) {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				b.tb.Fatal(err)
			}
			out[f[0]] = v
		}
	}
	return out
}

// leaks lists the tables of the agent that do not match the pods that
// live now: the steady pods (one container each) and the node's pods.
func (b *churnBed) leaks() []string {
	ctx := context.Background()
	steady := float64(steadyReplicas + len(steadyPods))
	nodePods, err := b.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + b.node.Name()})
	if err != nil {
		return []string{err.Error()}
	}
	st := b.state()
	var out []string
	want := func(table string, ok func(float64) bool, what string) {
		if v, have := st[table]; !have || !ok(v) {
			out = append(out, fmt.Sprintf("%s %v, want %s", table, v, what))
		}
	}
	is := func(n float64) func(float64) bool { return func(v float64) bool { return v == n } }
	atMost := func(n float64) func(float64) bool { return func(v float64) bool { return v <= n } }
	for _, table := range []string{"tracked-pods", "oom-watched-cgroups", "oom-watcher-cgroups", "sampled-containers"} {
		want(table, is(steady), fmt.Sprintf("%v (the steady pods' containers)", steady))
	}
	want("last-samples", atMost(steady), fmt.Sprintf("at most %v", steady))
	want("known-pods", is(float64(len(nodePods.Items))), fmt.Sprintf("%d (the node's pods)", len(nodePods.Items)))
	for _, table := range []string{"pending-status", "change-times", "late-containers", "pending-recommendations", "resizes-wanted", "cgroup-values", "exclusive-allocations"} {
		want(table, is(0), "0 once quiet")
	}
	for _, table := range []string{"resizes-decided", "resizes-accepted"} {
		want(table, atMost(steady), fmt.Sprintf("at most %v (resizes of steady pods not verified yet)", steady))
	}
	names := b.trackedNames()
	for _, n := range names {
		if !strings.HasPrefix(n, "steady") {
			out = append(out, fmt.Sprintf("tracked pods %v, want the steady pods", names))
			break
		}
	}
	cp, err := pools.ReadCheckpoint(filepath.Join(b.bed.StateDir, "lib", "cpu_pools.checkpoint"))
	if err != nil {
		out = append(out, "allocation checkpoint: "+err.Error())
	}
	if len(cp) > 0 {
		out = append(out, fmt.Sprintf("allocation checkpoint holds %d entries, want none (no exclusive pod lives)", len(cp)))
	}
	return out
}

// logCount counts the lines of the agent's log that contain s.
func (b *churnBed) logCount(pod, s string) int {
	rc, err := b.cs.CoreV1().Pods(deploy.Namespace).GetLogs(pod, &corev1.PodLogOptions{}).Stream(context.Background())
	if err != nil {
		b.tb.Fatalf("the agent's log: %v", err)
	}
	defer rc.Close()
	n := 0
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		b.tb.Fatalf("the agent's log: %v", err)
	}
	return n
}

// dumpGoroutines writes the agent's goroutines (its pprof, on in the
// soak) to a file in the test's directory and logs where.
func (b *churnBed) dumpGoroutines() {
	resp, err := http.Get("http://" + b.health + "/debug/pprof/goroutine?debug=2")
	if err != nil {
		b.tb.Logf("the agent's goroutines: %v", err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		b.tb.Logf("the agent's goroutines: %v", err)
		return
	}
	stamp := time.Now().Unix()
	file := filepath.Join(os.TempDir(), fmt.Sprintf("cgpilot-churn-goroutines-%d.txt", stamp))
	if err := os.WriteFile(file, body, 0o644); err != nil {
		b.tb.Logf("the agent's goroutines: %v", err)
		return
	}
	logFile := filepath.Join(os.TempDir(), fmt.Sprintf("cgpilot-churn-agent-%d.log", stamp))
	b.saveLog(b.agentPod(b.tb).Name, logFile)
	b.tb.Logf("the agent's goroutines (%d bytes): %s; its log: %s", len(body), file, logFile)
}

// saveLog writes the agent's log to file.
func (b *churnBed) saveLog(pod, file string) {
	rc, err := b.cs.CoreV1().Pods(deploy.Namespace).GetLogs(pod, &corev1.PodLogOptions{}).Stream(context.Background())
	if err != nil {
		b.tb.Errorf("the agent's log: %v", err)
		return
	}
	defer rc.Close()
	f, err := os.Create(file)
	if err != nil {
		b.tb.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, rc); err != nil {
		b.tb.Errorf("the agent's log: %v", err)
	}
}

func pickKey[V any](rng *rand.Rand, m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys[rng.IntN(len(keys))]
}

// churnImage is the agent built with the race detector, cached.
func churnImage(tb testing.TB, ctx context.Context, cacheDir string) images.Cached {
	tb.Helper()
	img, err := images.CachedRaceImage(ctx, churnRaceImage, "github.com/cgpilot/cgpilot/cmd/cgpilot-agent", cacheDir)
	if err != nil {
		tb.Fatal(err)
	}
	return img
}
