//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/agent"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

// Fault tests on the real node (node tier: kubelet, containerd, runc):
// an API server outage, and the kubelet's own static CPU manager beside
// the agent. Run them under flock /tmp/cgpilot-node-tier.flock: the node
// is a host singleton.

// apiOutage is how long TestNodeAPIServerOutage keeps the API server
// stopped: a minute, the kind of outage an upgrade of the control plane or
// an etcd restore causes, long enough for every client-go backoff to
// reach its ceiling (30 s).
const apiOutage = 60 * time.Second

// ctrCgroup is the cgroup of a pod's first container, from its status.
func ctrCgroup(ctx context.Context, cs kubernetes.Interface, kp *cgroup.Kubepods, name string) (string, error) {
	p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
		return "", fmt.Errorf("no container yet (%v)", err)
	}
	return kp.ContainerPath(string(p.UID), cgroup.QoS(p.Status.QOSClass), p.Status.ContainerStatuses[0].ContainerID)
}

func kubepodsCPUs(kp *cgroup.Kubepods, rel string) string {
	s, err := kp.ReadCPUs(rel)
	if err != nil {
		return err.Error()
	}
	return s.String()
}

// TestNodeAPIServerOutage stops the API server for a minute under a
// running agent and node. Meanwhile the pools keep being enforced from the
// node alone: the exclusive and shared cpusets do not change, drift is set
// back, and the exclusive container the kubelet restarts is pinned to the
// pod's core; readiness reports the outage, liveness does not. After the
// restart the agent is ready again, the Event about the drift reaches the
// API server, and a pod created and a pod deleted afterwards are handled.
// (A pod cannot be created while the API server is down; the first pod
// created after it has come back, while the agent's watch is still in
// its backoff, stands for one.)
func TestNodeAPIServerOutage(t *testing.T) {
	bins := tier.Node(t)
	cp := harness.MustStart(t, bins, harness.Options{Controllers: true})
	n := harness.MustStartNode(t, cp, harness.NodeOptions{})
	na := startAgentOn(t, cp, n, func(cfg *agent.Config) { cfg.SweepInterval = metav1.Duration{Duration: 2 * time.Second} })
	cs, kp, all := cp.Client, na.kp, na.all
	ctx := context.Background()
	health := "http://" + na.cfg.HealthAddr
	for _, p := range []*corev1.Pod{nodePod("web", n.Name(), "500m", false, nil), nodePod("db", n.Name(), "1", true, map[string]string{local.AnnotationCPUPool: "exclusive"})} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var excl, dbRel, webRel string
	eventually(t, "db pinned, web off its core", func() (bool, string) {
		_, ann := statusOf(t, cs, "db")
		excl = ann[local.AnnotationAllocatedCPUs]
		var err1, err2 error
		dbRel, err1 = ctrCgroup(ctx, cs, kp, "db")
		webRel, err2 = ctrCgroup(ctx, cs, kp, "web")
		if excl == "" || err1 != nil || err2 != nil {
			return false, fmt.Sprint(excl, err1, err2)
		}
		return kubepodsCPUs(kp, dbRel) == excl && kubepodsCPUs(kp, webRel) == all.Difference(mustSet(t, excl)).String(), kubepodsCPUs(kp, dbRel) + " " + kubepodsCPUs(kp, webRel)
	})
	shared := all.Difference(mustSet(t, excl)).String()
	dbPod := filepath.Dir(dbRel)
	dbDirs, err := kp.Layout().DirsAt(dbRel)
	if err != nil {
		t.Fatal(err)
	}
	webDirs, err := kp.Layout().DirsAt(webRel)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := kp.Children(dbPod)
	driftBefore := metric(t, na.cfg.HealthAddr, "cgpilot_drift_corrections_total")

	stopped := time.Now()
	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server stopped for %v", apiOutage)
	waitUntil(t, "readiness reports the outage", 30*time.Second, func() (bool, string) {
		code, body := httpStatus(t, health+"/readyz")
		return code == 503 && strings.Contains(body, "API server has not answered"), fmt.Sprint(code, " ", body)
	})
	t.Logf("readiness failed %v into the outage", time.Since(stopped).Round(time.Millisecond))

	// The pools hold through the outage; check every second.
	drifted, restarted := false, false
	var newCtr string
	for time.Since(stopped) < apiOutage {
		if code, body := httpStatus(t, health+"/healthz"); code != 200 {
			t.Fatalf("/healthz %d during the outage: %s (an API outage must not restart the agent)", code, body)
		}
		dbNow := dbRel
		if newCtr != "" {
			dbNow = newCtr
		}
		if got := kubepodsCPUs(kp, dbNow); got != excl {
			t.Fatalf("db's container on %s during the outage, want %s", got, excl)
		}
		if got := kubepodsCPUs(kp, webRel); got != shared {
			t.Fatalf("web's container on %s during the outage, want %s", got, shared)
		}
		switch {
		case !drifted && time.Since(stopped) > 10*time.Second:
			// Someone widens the shared pod onto db's core (its cgroup:
			// a v1 container cannot be wider than its pod's).
			if err := os.WriteFile(filepath.Join(filepath.Dir(webDirs.CPUSet), "cpuset.cpus"), []byte(all.String()), 0); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "drift set back without the API server", 20*time.Second, func() (bool, string) {
				got := kubepodsCPUs(kp, filepath.Dir(webRel))
				return got == shared, got
			})
			drifted = true
		case drifted && !restarted && time.Since(stopped) > 20*time.Second:
			// db's container dies; the kubelet restarts it, with no API
			// server, and the agent pins the new container.
			procs, err := os.ReadFile(filepath.Join(dbDirs.CPUSet, "cgroup.procs"))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range strings.Fields(string(procs)) {
				pid, _ := strconv.Atoi(f)
				syscall.Kill(pid, syscall.SIGKILL)
			}
			waitUntil(t, "the restarted container pinned", 30*time.Second, func() (bool, string) {
				now, _ := kp.Children(dbPod)
				for _, c := range now {
					if !slices.Contains(before, c) {
						newCtr = c
						break
					}
				}
				if newCtr == "" {
					return false, fmt.Sprint("no new container cgroup in ", now)
				}
				got := kubepodsCPUs(kp, newCtr)
				return got == excl, newCtr + " on " + got
			})
			restarted = true
			t.Logf("db's container restarted by the kubelet during the outage, pinned to %s: %s", excl, newCtr)
		}
		time.Sleep(time.Second)
	}
	if !drifted || !restarted {
		t.Fatalf("outage too short for the checks (drift %v, restart %v)", drifted, restarted)
	}

	back := time.Now()
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server back after %v", back.Sub(stopped).Round(time.Second))
	if _, err := cs.CoreV1().Pods("default").Create(ctx, nodePod("late", n.Name(), "500m", false, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "ready again", 60*time.Second, func() (bool, string) {
		code, body := httpStatus(t, health+"/readyz")
		return code == 200, fmt.Sprint(code, " ", body)
	})
	t.Logf("ready %v after the API server came back", time.Since(back).Round(time.Millisecond))
	waitUntil(t, "the pod created after the outage on the shared pool", 2*time.Minute, func() (bool, string) {
		rel, err := ctrCgroup(ctx, cs, kp, "late")
		if err != nil {
			return false, err.Error()
		}
		got := kubepodsCPUs(kp, rel)
		return got == shared, got
	})
	if err := cs.CoreV1().Pods("default").Delete(ctx, "db", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "db deleted after the outage: its core back to the shared pods", time.Minute, func() (bool, string) {
		got := kubepodsCPUs(kp, webRel)
		return got == all.String(), got
	})
	if d := metric(t, na.cfg.HealthAddr, "cgpilot_drift_corrections_total") - driftBefore; d < 1 {
		t.Errorf("drift corrections during the outage: %v, want at least 1", d)
	}
	waitUntil(t, "the DriftCorrected Event from the outage delivered", 2*time.Minute, func() (bool, string) {
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web,reason=DriftCorrected"})
		return err == nil && len(evs.Items) > 0, fmt.Sprint(err)
	})
}

// waitUntil polls cond every 100 ms until it holds or d passes.
func waitUntil(t testing.TB, what string, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	last := ""
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
	}
	t.Fatalf("%s: not reached in %v; last: %s", what, d, last)
}

// TestNodeStaticCPUManagerNoWriteWar runs the agent beside the kubelet's
// real static CPU manager (reserved CPU 0), which owns a Guaranteed pod's
// core and rewrites every container's cpuset in its reconcile loop (every
// 10 s), created once the agent runs. Over 60 s there is no write war: no DriftCorrected Event, no
// drift counted, the kubelet's pod keeps the kubelet's core, the agent
// reports it as the kubelet's and leaves it alone, and the shared pod runs
// on the rest, as both the agent and the kubelet want.
func TestNodeStaticCPUManagerNoWriteWar(t *testing.T) {
	const watch = 60 * time.Second
	bins := tier.Node(t)
	cp := harness.MustStart(t, bins, harness.Options{Controllers: true})
	n := harness.MustStartNode(t, cp, harness.NodeOptions{Name: "cgpilot-static-agent", StaticCPUManager: true, ReservedCPUs: "0"})
	na := startAgentOn(t, cp, n, func(cfg *agent.Config) {
		cfg.KubeletPodResources = filepath.Join(n.KubeletRootDir(), "pod-resources", "kubelet.sock")
		// Sweeps (which re-read the kubelet's view too) far apart: the
		// agent must learn of the kubelet's new pod when it sees it.
		cfg.SweepInterval = metav1.Duration{Duration: 20 * time.Second}
	})
	cs, kp, all := cp.Client, na.kp, na.all
	ctx := context.Background()
	waitUntil(t, "agent ready", time.Minute, func() (bool, string) {
		code, body := httpStatus(t, "http://"+na.cfg.HealthAddr+"/readyz")
		return code == 200, body
	})
	kube := nodePod("kube", n.Name(), "1", true, nil) // the kubelet's: Guaranteed, integer CPUs
	web := nodePod("web", n.Name(), "500m", false, nil)
	web.Spec.Containers[0].Resources = corev1.ResourceRequirements{ // no CPU: 1 CPU is allocatable, and kube takes it
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	for _, p := range []*corev1.Pod{kube, web} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var owned cpuset.CPUSet
	var kubeRel, webRel string
	waitUntil(t, "the kubelet's pod on its core, the agent aware", 40*time.Second, func() (bool, string) {
		st := readCPUManagerState(t, n.CPUManagerStateFile())
		p, err := cs.CoreV1().Pods("default").Get(ctx, "kube", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		owned, err = cpuset.Parse(st.Entries[string(p.UID)]["c"])
		if err != nil || owned.IsEmpty() {
			return false, fmt.Sprintf("kubelet checkpoint %+v", st)
		}
		if kubeRel, err = ctrCgroup(ctx, cs, kp, "kube"); err != nil {
			return false, err.Error()
		}
		if webRel, err = ctrCgroup(ctx, cs, kp, "web"); err != nil {
			return false, err.Error()
		}
		ex, err := local.NewClient(na.cfg.SocketPath).Explain(ctx, "default/kube")
		if err != nil || !ex.KubeletStatic {
			return false, fmt.Sprintf("agent explain: %+v %v", ex, err)
		}
		return kubepodsCPUs(kp, kubeRel) == owned.String() && kubepodsCPUs(kp, webRel) == all.Difference(owned).String(),
			kubepodsCPUs(kp, kubeRel) + " " + kubepodsCPUs(kp, webRel)
	})
	if n := metric(t, na.cfg.HealthAddr, `cgpilot_kubelet_view_reads_total{why="pod"}`); n == 0 {
		t.Errorf("the agent learned of the kubelet's pod without reading the kubelet's view at its reconcile (static policy, read as such from PodResources)")
	}
	rest := all.Difference(owned).String()
	t.Logf("the kubelet holds %s for kube; web on %s; watching %v", owned, rest, watch)
	driftBefore := metric(t, na.cfg.HealthAddr, "cgpilot_drift_corrections_total")
	for start := time.Now(); time.Since(start) < watch; time.Sleep(time.Second) {
		if got := kubepodsCPUs(kp, kubeRel); got != owned.String() {
			t.Fatalf("kube's container on %s after %v, want the kubelet's %s", got, time.Since(start).Round(time.Second), owned)
		}
		if got := kubepodsCPUs(kp, webRel); got != rest {
			t.Fatalf("web's container on %s after %v, want %s", got, time.Since(start).Round(time.Second), rest)
		}
	}
	evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=DriftCorrected"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		t.Errorf("DriftCorrected on %s x%d: %s (a write war with the kubelet)", ev.InvolvedObject.Name, ev.Count, ev.Message)
	}
	if d := metric(t, na.cfg.HealthAddr, "cgpilot_drift_corrections_total") - driftBefore; d != 0 {
		t.Errorf("%v drift corrections in %v beside the kubelet's static CPU manager, want 0", d, watch)
	}
	pods, err := local.NewClient(na.cfg.SocketPath).Pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Name == "kube" && (p.State != "Untouched" || p.Reason != "KubeletStatic") {
			t.Errorf("agent's view of the kubelet's pod: %+v, want Untouched/KubeletStatic", p)
		}
	}
}
