//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	"github.com/cgpilot/cgpilot/test/images"
	"github.com/cgpilot/cgpilot/test/tier"
)

func nodePod(name, node string, cpu string, guaranteed bool, ann map[string]string) *corev1.Pod {
	r := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	if guaranteed {
		r.Requests = r.Limits
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: ann},
		Spec: corev1.PodSpec{
			NodeName: node, AutomountServiceAccountToken: new(bool), TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "c", Image: images.BusyboxRef, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "exec sleep 3600"}, Resources: r}},
		},
	}
}

// TestNodeExclusivePool runs the agent against a real kubelet + containerd
// node: the exclusive pod's container (created by runc) gets its core and
// no quota, the shared pod's container moves off it, and deleting the
// exclusive pod gives the core back.
func TestNodeExclusivePool(t *testing.T) {
	n, cs, na := startNodeAgent(t, nil)
	ctx := context.Background()
	all := na.all

	if _, err := cs.CoreV1().Pods("default").Create(ctx, nodePod("web", n.Name(), "500m", false, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, nodePod("db", n.Name(), "1", true, map[string]string{local.AnnotationCPUPool: "exclusive"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctrCPUs := func(name string) (string, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
			return "", "no container yet"
		}
		rel, err := na.kp.ContainerPath(string(p.UID), cgroup.QoS(p.Status.QOSClass), p.Status.ContainerStatuses[0].ContainerID)
		if err != nil {
			return "", err.Error()
		}
		set, err := na.kp.ReadCPUs(rel)
		if err != nil {
			return "", err.Error()
		}
		return set.String(), rel
	}
	var excl string
	eventually(t, "exclusive container pinned", func() (bool, string) {
		_, ann := statusOf(t, cs, "db")
		excl = ann[local.AnnotationAllocatedCPUs]
		got, where := ctrCPUs("db")
		return excl != "" && got == excl, fmt.Sprintf("allocated %q, container %q (%s)", excl, got, where)
	})
	shared := all.Difference(mustSet(t, excl)).String()
	eventually(t, "shared container moved off", func() (bool, string) {
		got, where := ctrCPUs("web")
		return got == shared, got + " " + where
	})
	_, where := ctrCPUs("db")
	d, err := na.kp.Layout().DirsAt(where)
	if err != nil {
		t.Fatal(err)
	}
	// No quota: -1 on v1, "max" on a v2 node.
	quota, unlimited := filepath.Join(d.CPU, "cpu.cfs_quota_us"), "-1"
	if d.Unified {
		quota, unlimited = filepath.Join(d.CPU, "cpu.max"), "max 100000"
	}
	if b, err := os.ReadFile(quota); err != nil || strings.TrimSpace(string(b)) != unlimited {
		t.Fatalf("%s = %q, %v; want %s", quota, b, err, unlimited)
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, "db", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "core given back", func() (bool, string) {
		got, where := ctrCPUs("web")
		return got == all.String(), got + " " + where
	})
	t.Logf("node %s: exclusive %s, shared %s, all %s", n.Name(), excl, shared, all)
}

func statusOf(t testing.TB, cs kubernetes.Interface, name string) (local.Status, map[string]string) {
	t.Helper()
	p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return local.Status{}, nil
	}
	s, _ := local.ParseStatus(p.Annotations[local.AnnotationStatus])
	return s, p.Annotations
}

// TestNodeReleaseOnTerminationAndNoFalseDrift measures, on a real kubelet
// + containerd node, how long after a graceful delete of an exclusive pod
// the shared pods get its core back, and checks the two rules around it:
// the core is never handed back while the old container still runs, and
// the runtime's own first cpuset on a new container is not drift.
func TestNodeReleaseOnTerminationAndNoFalseDrift(t *testing.T) {
	const sweep = 2 * time.Second
	n, cs, na := startNodeAgent(t, func(cfg *agent.Config) { cfg.SweepInterval = metav1.Duration{Duration: sweep} })
	ctx := context.Background()
	all := na.all
	web := nodePod("web", n.Name(), "500m", false, nil)
	db := nodePod("db", n.Name(), "1", true, map[string]string{local.AnnotationCPUPool: "exclusive"})
	grace := int64(30)
	db.Spec.TerminationGracePeriodSeconds = &grace
	for _, p := range []*corev1.Pod{web, db} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctrDir := func(name string) (string, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
			return "", fmt.Errorf("no container yet (%v)", err)
		}
		return na.kp.ContainerPath(string(p.UID), cgroup.QoS(p.Status.QOSClass), p.Status.ContainerStatuses[0].ContainerID)
	}
	ctrCPUs := func(rel string) string {
		set, err := na.kp.ReadCPUs(rel)
		if err != nil {
			return err.Error()
		}
		return set.String()
	}
	var excl, dbRel, webRel string
	eventually(t, "exclusive container pinned, shared moved off", func() (bool, string) {
		_, ann := statusOf(t, cs, "db")
		excl = ann[local.AnnotationAllocatedCPUs]
		var err1, err2 error
		dbRel, err1 = ctrDir("db")
		webRel, err2 = ctrDir("web")
		if excl == "" || err1 != nil || err2 != nil {
			return false, fmt.Sprint(excl, err1, err2)
		}
		shared := all.Difference(mustSet(t, excl)).String()
		return ctrCPUs(dbRel) == excl && ctrCPUs(webRel) == shared, ctrCPUs(dbRel) + " " + ctrCPUs(webRel)
	})
	// Let a sweep pass over the settled containers.
	time.Sleep(sweep + time.Second)
	for _, name := range []string{"db", "web"} {
		evs, _ := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		for _, ev := range evs.Items {
			if ev.Reason == "DriftCorrected" {
				t.Errorf("pod %s: DriftCorrected Event although only the runtime and the agent wrote: %s", name, ev.Message)
			}
		}
	}
	if m := httpGet(t, "http://"+na.cfg.HealthAddr+"/metrics"); !strings.Contains(m, "\ncgpilot_drift_corrections_total 0\n") {
		t.Errorf("cgpilot_drift_corrections_total not 0 after only the runtime and the agent wrote:\n%s", m)
	}

	// The db container ignores SIGTERM (sleep as PID 1): it runs until the
	// kubelet kills it after the grace period given here.
	dd, err := na.kp.Layout().DirsAt(dbRel)
	if err != nil {
		t.Fatal(err)
	}
	procs := filepath.Join(dd.CPUSet, "cgroup.procs")
	gp := int64(2)
	start := time.Now()
	if err := cs.CoreV1().Pods("default").Delete(ctx, "db", metav1.DeleteOptions{GracePeriodSeconds: &gp}); err != nil {
		t.Fatal(err)
	}
	var dbExited time.Duration
	deadline := time.Now().Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("core not given back within 60s; web %s", ctrCPUs(webRel))
		}
		b, err := os.ReadFile(procs)
		running := err == nil && strings.TrimSpace(string(b)) != ""
		if !running && dbExited == 0 {
			dbExited = time.Since(start)
		}
		if ctrCPUs(webRel) == all.String() {
			if running {
				t.Fatalf("shared pool widened onto %s while the db container still runs (pids %q)", excl, b)
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	widened := time.Since(start)
	_, gone := cs.CoreV1().Pods("default").Get(ctx, "db", metav1.GetOptions{})
	t.Logf("delete (grace %ds) -> db container exited %v -> shared widened %v (container exit -> widened %v); pod object gone at widening: %v",
		gp, dbExited.Round(time.Millisecond), widened.Round(time.Millisecond), (widened - dbExited).Round(time.Millisecond), gone != nil)
}

// nodeAgent is the agent under test on the real node: its config, the
// CPUs it manages, and the node's kubepods tree as the test reads it.
type nodeAgent struct {
	cfg  agent.Config
	all  cpuset.CPUSet
	kp   *cgroup.Kubepods
	stop func() error // ends this run of the agent (restart starts another)
}

// startNodeAgent brings up a real control plane and node and runs the agent
// in this process against them until the test ends (stopped before the
// harness tears the node down). It skips on fewer than 2 CPUs.
func startNodeAgent(t *testing.T, tweak func(*agent.Config)) (*harness.Node, kubernetes.Interface, nodeAgent) {
	t.Helper()
	bins := tier.Node(t)
	cp := harness.MustStart(t, bins, harness.Options{Controllers: true})
	n := harness.MustStartNode(t, cp, harness.NodeOptions{})
	return n, cp.Client, startAgentOn(t, cp, n, tweak)
}

// startAgentOn runs the agent for node n until the test ends.
func startAgentOn(t testing.TB, cp *harness.ControlPlane, n *harness.Node, tweak func(*agent.Config)) nodeAgent {
	t.Helper()
	cfg := agent.DefaultConfig()
	cfg.NodeName = n.Name()
	cfg.CheckpointPath = filepath.Join(t.TempDir(), "cpu_pools.checkpoint")
	cfg.KubeletCPUManagerState = ""
	cfg.HealthAddr = freeAddr(t)
	cfg.SocketPath = filepath.Join(t.TempDir(), "agent.sock")
	cfg.Rightsizing.StateDir = t.TempDir()
	if tweak != nil {
		tweak(&cfg)
	}
	stop := runAgent(t, cfg, cp.Config)
	mounts, err := cgroup.ReadMounts("/proc")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := cgroup.OpenKubepods(mounts, cgroup.KubepodsConfig{Root: cfg.CgroupRoot, Layout: cgroup.LayoutConfig{KubepodsPath: cfg.CgroupParent}})
	if err != nil {
		t.Fatal(err)
	}
	all, err := cpuset.Parse(waitAgentAPI(t, cfg).CPUs)
	if err != nil {
		t.Fatal(err)
	}
	if all.Size() < 2 {
		t.Skip("node tier: needs 2 CPUs")
	}
	return nodeAgent{cfg: cfg, all: all, kp: kp, stop: stop}
}

// waitAgentAPI waits until the agent's local API answers, and returns its
// pools.
func waitAgentAPI(t testing.TB, cfg agent.Config) local.PoolsView {
	t.Helper()
	var pools local.PoolsView
	eventually(t, "agent API up", func() (bool, string) {
		v, err := local.NewClient(cfg.SocketPath).Pools(context.Background())
		pools = v
		return err == nil, fmt.Sprint(err)
	})
	return pools
}

// restart stops the agent and starts it again with the same
// configuration (checkpoint, state directory, socket), as a DaemonSet's
// new pod would, and returns its pools once its API answers.
func (na *nodeAgent) restart(t testing.TB, cp *harness.ControlPlane) local.PoolsView {
	t.Helper()
	if err := na.stop(); err != nil {
		t.Fatalf("agent stop: %v", err)
	}
	na.stop = runAgent(t, na.cfg, cp.Config)
	return waitAgentAPI(t, na.cfg)
}
