//go:build linux

package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/test/cgtest"
)

// TestEveryLoopRecovers injects a panic into the first iteration of every
// long-lived loop of the whole agent (on real cgroups: kills by the OOM
// watcher, sampling, HTTP servers, informers), then drives the agent until
// each loop has run again: no loop died, each panic was counted once in
// cgpilot_recovered_panics_total{loop} and logged, the reconcile's on its
// pod too, and the agent kept working (a pod tracked after the panics, a
// kill raised).
func TestEveryLoopRecovers(t *testing.T) {
	for _, backend := range []string{"auto", "counters"} {
		t.Run(backend, func(t *testing.T) { testEveryLoopRecovers(t, backend) })
	}
}

func testEveryLoopRecovers(t *testing.T, backend string) {
	var mu sync.Mutex
	calls := map[string]int{}
	armed := map[string]bool{}
	for _, l := range loops {
		armed[l] = true
	}
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg Config
	b := newBed(t, backend, bedOptions{setup: func(c *Config, _ *fake.Clientset) {
		c.HealthAddr, c.MetricsAddr = freeLoopback(t), freeLoopback(t)
		c.SocketPath = filepath.Join(dir, "agent.sock")
		c.Rightsizing.CheckpointInterval = metav1.Duration{Duration: time.Second}
		// An aggregator that is not there: the reports are cut and their
		// sends fail, which is enough to run both loops.
		c.Aggregator.URL = "https://" + freeLoopback(t)
		c.Aggregator.TokenFile = token
		c.Aggregator.ReportPeriod = metav1.Duration{Duration: 10 * time.Second}
		cfg = *c
	}, prepare: func(a *Agent) {
		a.c.guard.Inject = func(loop string) {
			mu.Lock()
			defer mu.Unlock()
			calls[loop]++
			if armed[loop] {
				armed[loop] = false
				panic("injected into " + loop)
			}
		}
	}})
	if got := b.a.c.rs.OOMWatcher().Backend().String(); backend == "counters" && got != "counters" {
		t.Fatalf("OOM watcher backend %s, want counters", got)
	}
	api := local.NewClient(cfg.SocketPath)
	pending := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, l := range loops {
			if calls[l] < 2 || testutil.ToFloat64(b.a.c.metrics.recovered.WithLabelValues(l)) < 1 {
				out = append(out, fmt.Sprintf("%s (%d iterations)", l, calls[l]))
			}
		}
		return out
	}
	// The pods belong to a ReplicaSet, so that the owner lookups run (the
	// fake API server does not know it: the lookup ends in NotFound).
	controller := true
	b.owner = &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-6d4b9c7f8", UID: "7f1c2d3e-0000-4000-8000-000000000001", Controller: &controller}
	// The first pod's informer event is the one the pod-informer loop
	// loses to its panic; the agent hears of it again from the next change.
	b.startPod(t, "first")
	var hogs []string
	deadline := time.Now().Add(90 * time.Second)
	for i := 0; len(pending()) > 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("loops that did not recover and run again within 90s: %s", strings.Join(pending(), ", "))
		}
		// Work for every loop: a pod (informers, cgroup watch, reconcile,
		// status), a kill (OOM watcher, OOM bump, resize), requests (the
		// three servers), a policy change (policy informer); the round
		// loops tick on their own.
		name := fmt.Sprintf("p%d", i)
		_, _, ctr := b.startPod(t, name)
		hogs = append(hogs, name)
		p := b.k.SB.Start(ctr, cgtest.Hog, 512)
		for _, u := range []string{"http://" + cfg.HealthAddr + "/healthz", "http://" + cfg.MetricsAddr + "/metrics"} {
			if resp, err := http.Get(u); err == nil {
				resp.Body.Close()
			}
		}
		_, _ = api.Pools(context.Background())
		b.touchPolicy(t, i)
		p.Wait(5 * time.Second)
		time.Sleep(500 * time.Millisecond)
	}
	for _, l := range loops {
		if n := testutil.ToFloat64(b.a.c.metrics.recovered.WithLabelValues(l)); n != 1 {
			t.Errorf("cgpilot_recovered_panics_total{loop=%q} = %v, want 1 (one panic injected)", l, n)
		}
	}
	if m := b.scrape(t, cfg.MetricsAddr); !strings.Contains(m, `cgpilot_recovered_panics_total{loop="decide"} 1`) {
		t.Errorf("/metrics does not show the decide loop's panic:\n%s", m)
	}
	// The agent still works after every loop lost an iteration: a new pod
	// is tracked and its kill raises its limit.
	_, _, ctr := b.pod(t, "after")
	before := b.limit(t, ctr)
	b.k.SB.Start(ctr, cgtest.Hog, 512).Wait(10 * time.Second)
	waitFor(t, "the raised limit after the panics", 20*time.Second, func() bool { return b.limit(t, ctr) > before })
	reconcilePanicked := false
	for _, name := range append(hogs, "first") {
		reconcilePanicked = reconcilePanicked || slices.Contains(b.eventReasons(name), local.EventReconcilePanic)
	}
	if !reconcilePanicked {
		t.Errorf("no %s Event on any pod after the reconcile loop's panic", local.EventReconcilePanic)
	}
	mu.Lock()
	defer mu.Unlock()
	names := make([]string, 0, len(calls))
	for l, n := range calls {
		names = append(names, fmt.Sprintf("%s=%d", l, n))
	}
	sort.Strings(names)
	t.Logf("iterations per loop: %s", strings.Join(names, " "))
}

// touchPolicy changes the bed's policy (a label), an event for the policy
// informer.
func (b *oomBed) touchPolicy(t *testing.T, i int) {
	t.Helper()
	res := b.dyn.Resource(v1alpha1.RightsizePolicies)
	u, err := res.Get(context.Background(), "oom", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u = u.DeepCopy()
	unstructured.SetNestedField(u.Object, fmt.Sprint(i), "metadata", "labels", "touched")
	if _, err := res.Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (b *oomBed) scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// freeLoopback is a 127.0.0.1 address nothing listens on now.
func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
