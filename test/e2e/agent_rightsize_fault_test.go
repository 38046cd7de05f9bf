//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgpilot/cgpilot/agent"
	local "github.com/cgpilot/cgpilot/api/local"
)

// TestNodeRightsizeAPIServerOutage: with the API server away, the agent
// goes on sampling, checkpointing its recommenders and raising the memory
// of an OOM-looping container in the cgroup, so that the container stops
// being killed; once the API server is back, the raise it could not send
// reaches the pod's spec through pods/resize (the kubelet agrees with the
// cgroup) and the OOM Events arrive, with no restart of the container.
func TestNodeRightsizeAPIServerOutage(t *testing.T) {
	b := startRightsizeNode(t, func(cfg *agent.Config) {
		cfg.Rightsizing.CheckpointInterval = metav1.Duration{Duration: 5 * time.Second}
	})
	ctx := context.Background()
	b.policy(t, "hog", map[string]any{"mode": "InPlace", "step": "1h", "minHistory": "24h",
		"podSelector": map[string]any{"matchLabels": map[string]any{"app": "hog"}}})
	// The loop waits for /tmp/go (the test creates it through the
	// container's root once the API server is down), then holds 150 MB
	// until that succeeds: each attempt over the limit is an OOM kill of
	// tail, not of the container.
	cmd := `until [ -e /tmp/go ]; do sleep 0.2; done; n=0; until head -c 157286400 /dev/zero | tail >/dev/null; do n=$((n+1)); sleep 1; done; exec sleep 3600`
	p := busyboxPod("hog", map[string]string{"app": "hog"}, cmd, rl("100m", "64Mi"), rl("500m", "100Mi"))
	p.Spec.NodeName = b.node.Name()
	if _, err := b.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	recs := func() []local.RecView {
		var v []local.RecView
		_ = local.NewClient(b.na.cfg.SocketPath).Get(ctx, local.PathRecs, nil, &v)
		return v
	}
	var path string
	within(t, 2*time.Minute, "the hog container sampled by the agent", func() (bool, string) {
		pod := b.pod(t, "hog")
		var ok bool
		if path, ok = b.containerCgroup(t, pod); !ok {
			return false, "no container yet"
		}
		for _, v := range recs() {
			if v.Pod == "hog" && v.MemMax > 0 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("recs: %+v", recs())
	})
	dirs, err := b.na.kp.Layout().DirsAt(path)
	if err != nil {
		t.Fatal(err)
	}
	procs, err := os.ReadFile(filepath.Join(dirs.Memory, "cgroup.procs"))
	if err != nil || len(strings.Fields(string(procs))) == 0 {
		t.Fatalf("hog's processes: %q (%v)", procs, err)
	}
	root := filepath.Join("/proc", strings.Fields(string(procs))[0], "root")
	checkpoint := filepath.Join(b.na.cfg.Rightsizing.StateDir, "recommend-cgpilot-balanced.checkpoint")

	if err := b.cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Log("API server stopped")
	if err := os.WriteFile(filepath.Join(root, "tmp", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	within(t, time.Minute, "the memory limit raised above 150 MB in the cgroup with no API server", func() (bool, string) {
		cur, err := b.na.kp.ReadCurrent(path)
		if err != nil {
			return false, err.Error()
		}
		return cur.MemoryLimit >= 150<<20, fmt.Sprintf("cgroup limit %d", cur.MemoryLimit)
	})
	raised := time.Since(stopped)
	// It stops being killed, and sampling and checkpoints go on.
	kills := oomKills(t, dirs.Memory)
	st0, err := os.Stat(checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	rounds := metric(t, b.na.cfg.HealthAddr, "cgpilot_collector_round_seconds_count")
	time.Sleep(15 * time.Second)
	if now := oomKills(t, dirs.Memory); now != kills || kills < 1 {
		t.Fatalf("oom_kill counter %d then %d during the outage: still being killed (or never was)", kills, now)
	}
	st1, err := os.Stat(checkpoint)
	if err != nil || !st1.ModTime().After(st0.ModTime()) {
		t.Fatalf("the recommender's checkpoint not written during the outage: %v then %v (%v)", st0.ModTime(), st1.ModTime(), err)
	}
	// Sampling goes on (1 s rounds here): at least half the rounds of
	// those 15 s, so that a stalled collector fails.
	if n := metric(t, b.na.cfg.HealthAddr, "cgpilot_collector_round_seconds_count") - rounds; n < 7 {
		t.Fatalf("%v collection rounds in 15 s of the outage", n)
	}

	// Minutes, not seconds: past the default client backoff's reach.
	time.Sleep(time.Until(stopped.Add(apiOutage)))
	if err := b.cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	t.Logf("API server back after %v (the cgroup raised %v into the outage, %d kill(s))", back.Sub(stopped).Round(time.Second), raised.Round(time.Millisecond), kills)
	within(t, time.Minute, "the raise sent through pods/resize after the outage (retried every 30 s at most)", func() (bool, string) {
		pod := b.pod(t, "hog")
		lim := milli(pod.Spec.Containers[0].Resources.Limits, corev1.ResourceMemory)
		return lim >= 150<<20, fmt.Sprintf("spec limit %d; annotation %s", lim, pod.Annotations["cgpilot.io/recommendation"])
	})
	t.Logf("pods/resize caught up %v after the API server came back", time.Since(back).Round(time.Millisecond))
	pod := b.pod(t, "hog")
	if rc := pod.Status.ContainerStatuses[0].RestartCount; rc != 0 {
		t.Fatalf("the container restarted %d times", rc)
	}
	within(t, 2*time.Minute, "the OOMKilled and MemoryRaised Events recorded during the outage arrive", func() (bool, string) {
		evs, err := b.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=hog"})
		if err != nil {
			return false, err.Error()
		}
		seen := map[string]bool{}
		for _, e := range evs.Items {
			seen[e.Reason] = true
		}
		return seen["OOMKilled"] && seen["MemoryRaised"], fmt.Sprint(seen)
	})
	if now := oomKills(t, dirs.Memory); now != kills {
		t.Fatalf("oom_kill counter %d, %d at the outage: killed again after the API server came back", now, kills)
	}
}

// oomKills is the memory cgroup's oom_kill counter (v1 memory.oom_control,
// v2 memory.events).
func oomKills(t testing.TB, memDir string) int {
	t.Helper()
	for _, f := range []string{"memory.events", "memory.oom_control"} {
		raw, err := os.ReadFile(filepath.Join(memDir, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				return n
			}
		}
	}
	t.Fatalf("no oom_kill counter in %s", memDir)
	return -1
}
