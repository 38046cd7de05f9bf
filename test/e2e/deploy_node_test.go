//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/cpuset"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/test/demo"
	"github.com/cgpilot/cgpilot/test/deploy"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/images"
	"github.com/cgpilot/cgpilot/test/tier"
)

// The agent deployed as users deploy it, on the real node (node tier):
// kubectl apply -k and helm install/upgrade/uninstall of deploy/, with the
// test bed's few changes (deploy.TestBed: the local image, the API server
// address, a free health port, host paths in the test's directory). Each
// proves: the DaemonSet controller and the scheduler place the agent and
// it becomes Ready under the manifests' least-privilege mounts; an
// exclusive pod is pinned; a workload under an InPlace RightsizePolicy is
// resized; an upgrade to a new image tag rolls without losing the CPU
// allocations or the histograms and without any shared pod losing its
// cpuset; removing the DaemonSet leaves the workloads running with their
// last cgroup values; and no unexpected Warning Event appeared.

// nextTag is the upgrade's image: a second tag of the same content, as
// the registry of a release would hold a new version.
const nextTag = "demo-next"

// installer is one way to deploy the agent.
type installer struct {
	name    string
	install func(t *testing.T, d *deployBed)
	upgrade func(t *testing.T, d *deployBed)
	remove  func(t *testing.T, d *deployBed)
}

type deployBed struct {
	root, dir string
	cp        *harness.ControlPlane
	node      *harness.Node
	cs        kubernetes.Interface
	dyn       dynamic.Interface
	bed       deploy.TestBed
	ctl       string // cgpilotctl
	kp        *cgroup.Kubepods
}

func (d *deployBed) kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(d.cp.BinDir(), "kubectl"), append([]string{"--kubeconfig", d.cp.Kubeconfig()}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("kubectl %s:\n%s", strings.Join(args, " "), strings.TrimSpace(string(out)))
	return string(out)
}

func (d *deployBed) helm(t *testing.T, args ...string) {
	t.Helper()
	helm, err := deploy.Tool(context.Background(), d.root, "helm", nil)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helm, append(args, "--kubeconfig", d.cp.Kubeconfig())...)
	home := filepath.Join(d.dir, "helm")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("helm %s:\n%s", strings.Join(args, " "), strings.TrimSpace(string(out)))
}

// helmValues writes the test bed's values (with tag) to a file.
func (d *deployBed) helmValues(t *testing.T, tag string) string {
	t.Helper()
	b := d.bed
	b.Image = strings.TrimSuffix(b.Image, ":demo") + ":" + tag
	v, err := b.HelmValues()
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(d.dir, "values-"+tag+".json")
	if err := os.WriteFile(f, js, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func (d *deployBed) overlay(t *testing.T, tag string) string {
	t.Helper()
	b := d.bed
	b.Image = strings.TrimSuffix(b.Image, ":demo") + ":" + tag
	dir := filepath.Join(d.dir, "overlay")
	if err := b.WriteOverlay(dir, d.root); err != nil {
		t.Fatal(err)
	}
	return dir
}

var (
	kustomizeInstaller = installer{
		name:    "kubectl apply -k",
		install: func(t *testing.T, d *deployBed) { d.kubectl(t, "apply", "-k", d.overlay(t, "demo")) },
		upgrade: func(t *testing.T, d *deployBed) { d.kubectl(t, "apply", "-k", d.overlay(t, nextTag)) },
		remove: func(t *testing.T, d *deployBed) {
			d.kubectl(t, "delete", "daemonset", "-n", deploy.Namespace, deploy.AgentName)
		},
	}
	helmInstaller = installer{
		name: "helm install",
		install: func(t *testing.T, d *deployBed) {
			d.helm(t, "install", "cgpilot", filepath.Join(d.root, "deploy", "helm", "cgpilot"), "-n", deploy.Namespace, "--create-namespace", "-f", d.helmValues(t, "demo"))
		},
		upgrade: func(t *testing.T, d *deployBed) {
			d.helm(t, "upgrade", "cgpilot", filepath.Join(d.root, "deploy", "helm", "cgpilot"), "-n", deploy.Namespace, "-f", d.helmValues(t, nextTag))
		},
		remove: func(t *testing.T, d *deployBed) { d.helm(t, "uninstall", "cgpilot", "-n", deploy.Namespace) },
	}
)

func TestDeployKustomizeOnNode(t *testing.T) { deployFlow(t, kustomizeInstaller) }

func TestDeployHelmOnNode(t *testing.T) { deployFlow(t, helmInstaller) }

func startDeployBed(t testing.TB) *deployBed { return startDeployBedWith(t, false) }

// startDeployBedWith is startDeployBed with, when race, the agent's image
// built with the race detector too (churnRaceImage).
func startDeployBedWith(t testing.TB, race bool) *deployBed {
	t.Helper()
	bins := tier.Node(t)
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// Created before the test bed, so removed after its teardown (the
	// agent's pod holds the state and socket directories below it).
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cacheDir, err := images.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	// Built before the node starts, which holds the host's one node slot.
	var image, ctl images.Cached
	if race {
		image = churnImage(t, ctx, cacheDir)
	} else {
		if image, _, err = images.CachedGoImage(ctx, demo.AgentImage, "github.com/cgpilot/cgpilot/cmd/cgpilot-agent", cacheDir); err != nil {
			t.Fatal(err)
		}
		if ctl, err = images.CachedBinary(ctx, "github.com/cgpilot/cgpilot/cmd/cgpilotctl", cacheDir); err != nil {
			t.Fatal(err)
		}
	}
	cp := harness.MustStart(t, bins, harness.Options{Controllers: true})
	n := harness.MustStartNode(t, cp, harness.NodeOptions{})
	if err := n.ImportImage(ctx, image.Path); err != nil {
		t.Fatal(err)
	}
	if !race {
		next := strings.TrimSuffix(demo.AgentImage, ":demo") + ":" + nextTag
		if out, err := n.Ctr(ctx, "images", "tag", demo.AgentImage, next).CombinedOutput(); err != nil {
			t.Fatalf("ctr images tag: %v: %s", err, out)
		}
	}
	u, err := url.Parse(cp.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dc, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cgroup.ReadMounts("/proc")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := cgroup.OpenKubepods(m, cgroup.KubepodsConfig{Root: "/sys/fs/cgroup", Layout: cgroup.LayoutConfig{KubepodsPath: "/kubepods"}})
	if err != nil {
		t.Fatal(err)
	}
	return &deployBed{root: root, dir: dir, cp: cp, node: n, cs: cp.Client, dyn: dc, ctl: ctl.Path, kp: kp,
		bed: deploy.TestBed{Image: demo.AgentImage, APIHost: u.Hostname(), APIPort: u.Port(), HealthPort: port,
			KubeletDir: n.KubeletRootDir(), StateDir: filepath.Join(dir, "agent"), SampleInterval: time.Second}}
}

// agentPod is the agent DaemonSet's one pod, once Ready.
func (d *deployBed) agentPod(t testing.TB) corev1.Pod {
	t.Helper()
	if err := demo.WaitAgentReady(context.Background(), d.cs, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	pods, err := d.cs.CoreV1().Pods(deploy.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cgpilot-agent"})
	if err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		t.Fatalf("%d agent pods, want 1", len(live))
	}
	return live[0]
}

// cpusets reads the first container's cpuset.cpus of each pod.
func (d *deployBed) cpusetFiles(t *testing.T, pods ...*corev1.Pod) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, p := range pods {
		dirs, err := d.kp.Layout().ContainerDirs(string(p.UID), cgroup.QoS(p.Status.QOSClass), p.Status.ContainerStatuses[0].ContainerID)
		if err != nil {
			t.Fatal(err)
		}
		files[p.Name] = filepath.Join(dirs.CPUSet, "cpuset.cpus")
	}
	return files
}

func readCPUs(file string) (cpuset.CPUSet, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return cpuset.CPUSet{}, err
	}
	return cpuset.Parse(strings.TrimSpace(string(b)))
}

// cgroupValues are what a removed agent must leave behind: each pod's
// first container's cpuset, quota, shares and memory limit.
func (d *deployBed) cgroupValues(t *testing.T, pods ...*corev1.Pod) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range pods {
		path, err := d.kp.ContainerPath(string(p.UID), cgroup.QoS(p.Status.QOSClass), p.Status.ContainerStatuses[0].ContainerID)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := d.kp.ReadCurrent(path)
		if err != nil {
			t.Fatal(err)
		}
		cpus, err := readCPUs(d.cpusetFiles(t, p)[p.Name])
		if err != nil {
			t.Fatal(err)
		}
		out[p.Name] = fmt.Sprintf("cpuset %s, quota %v, shares %d, memory %d", cpus, cur.Quota, cur.Shares, cur.MemoryLimit)
	}
	return out
}

func (d *deployBed) recs(t *testing.T) []local.RecView {
	t.Helper()
	out, err := exec.Command(d.ctl, "recs", "--socket", d.bed.Socket(), "-o", "json").Output()
	if err != nil {
		return nil
	}
	var recs []local.RecView
	if err := json.Unmarshal(out, &recs); err != nil {
		t.Fatalf("cgpilotctl recs -o json: %v: %s", err, out)
	}
	return recs
}

func deployFlow(t *testing.T, inst installer) {
	d := startDeployBed(t)
	ctx := context.Background()
	get := func(name string) *corev1.Pod { return getPod(t, d.cs, name) }

	// Install: the DaemonSet controller and the scheduler place the agent.
	inst.install(t, d)
	agent := d.agentPod(t)
	if agent.Spec.NodeName != d.node.Name() || agent.Spec.Containers[0].Image != demo.AgentImage || agent.OwnerReferences[0].Kind != "DaemonSet" {
		t.Fatalf("agent pod on %q from %s owned by %v: want the DaemonSet's on %s from %s", agent.Spec.NodeName, agent.Spec.Containers[0].Image, agent.OwnerReferences, d.node.Name(), demo.AgentImage)
	}
	agentPID := podProcess(t, string(agent.UID), "/bin/cgpilot-agent")
	checkAgentMounts(t, agentPID)

	// Workloads: an exclusive pod, two shared pods, and an over-provisioned
	// Deployment under an InPlace policy with short windows.
	within(t, time.Minute, "the RightsizePolicy CRD served", func() (bool, string) {
		_, err := d.dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource("rightsizepolicies")).List(ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
	policy := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "RightsizePolicy",
		"metadata": map[string]any{"name": "web"}, "spec": map[string]any{"mode": "InPlace", "step": "10s", "minHistory": "15s",
			"podSelector": map[string]any{"matchLabels": map[string]any{"app": "web"}}}}}
	if _, err := d.dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource("rightsizepolicies")).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	excl := busyboxPod("exclusive", nil, "exec sleep 3600", rl("1", "32Mi"), rl("1", "32Mi"))
	excl.Annotations = map[string]string{"cgpilot.io/cpu-pool": "exclusive"}
	pods := []*corev1.Pod{excl,
		busyboxPod("shared-1", nil, "exec sleep 3600", rl("100m", "16Mi"), rl("200m", "32Mi")),
		busyboxPod("shared-2", nil, "exec sleep 3600", rl("100m", "16Mi"), rl("200m", "32Mi")),
		busyboxPod("web", map[string]string{"app": "web"}, "exec sleep 3600", rl("300m", "256Mi"), rl("600m", "512Mi")),
	}
	for _, p := range pods {
		if _, err := d.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := readCPUs("/sys/fs/cgroup/cpuset/cpuset.cpus")
	if err != nil {
		t.Fatal(err)
	}
	var pinned cpuset.CPUSet
	within(t, 2*time.Minute, "the exclusive pod pinned and the shared pods off its CPU", func() (bool, string) {
		ex, s1, s2 := get("exclusive"), get("shared-1"), get("shared-2")
		a := ex.Annotations["cgpilot.io/allocated-cpus"]
		set, err := cpuset.Parse(a)
		if a == "" || err != nil || set.Size() != 1 {
			return false, "allocated-cpus " + a
		}
		for _, p := range []*corev1.Pod{ex, s1, s2} {
			if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
				return false, p.Name + " not running"
			}
		}
		for name, f := range d.cpusetFiles(t, ex, s1, s2) {
			want := all.Difference(set)
			if name == "exclusive" {
				want = set
			}
			if got, err := readCPUs(f); err != nil || !got.Equals(want) {
				return false, fmt.Sprintf("%s cpuset %s (%v), want %s", name, got, err, want)
			}
		}
		pinned = set
		return true, ""
	})
	// This kubelet's CPU manager is "none", which its PodResources API
	// tells: the exclusive pod (Guaranteed, a whole CPU) is never a pod
	// the kubelet may own, so its reconciles do not ask the kubelet.
	if n := metric(t, fmt.Sprintf("127.0.0.1:%d", d.bed.HealthPort), `cgpilot_kubelet_view_reads_total{why="pod"}`); n != 0 {
		t.Errorf("the agent read the kubelet's view %v times for a pod's reconcile, want 0 (the kubelet's CPU manager is none)", n)
	}
	within(t, 3*time.Minute, "the web pod resized in place", func() (bool, string) {
		w := get("web")
		c := w.Spec.Containers[0].Resources
		return c.Requests.Cpu().MilliValue() < 300 && recommendationOf(w).LastApplied != nil && w.Status.ContainerStatuses[0].RestartCount == 0,
			fmt.Sprintf("requests %v, %s", c.Requests, recommendationOf(w).State)
	})
	var before local.RecView
	within(t, time.Minute, "web recommended in cgpilotctl recs", func() (bool, string) {
		for _, r := range d.recs(t) {
			if r.Pod == "web" {
				before = r
			}
		}
		return before.Recommendation != "" && before.Recommendation != "-", fmt.Sprintf("%+v", before)
	})
	lib := filepath.Join(d.bed.StateDir, "lib")
	if _, err := os.Stat(filepath.Join(lib, "cpu_pools.checkpoint")); err != nil {
		t.Fatalf("no allocation checkpoint in the agent's host state directory before the upgrade: %v", err)
	}

	// Upgrade: a new image tag rolls the DaemonSet; while it does, the
	// cgroup files must keep the pools (sampled every 10 ms).
	files := d.cpusetFiles(t, get("exclusive"), get("shared-1"), get("shared-2"))
	stop := make(chan struct{})
	var mu sync.Mutex
	var bad []string
	samples := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for name, f := range files {
				want := all.Difference(pinned)
				if name == "exclusive" {
					want = pinned
				}
				got, err := readCPUs(f)
				mu.Lock()
				samples++
				if err != nil || !got.Equals(want) {
					bad = append(bad, fmt.Sprintf("%s: cpuset %s (%v), want %s", name, got, err, want))
				}
				mu.Unlock()
			}
		}
	}()
	upgradeStart := time.Now()
	inst.upgrade(t, d)
	within(t, 3*time.Minute, "the new agent's container running", func() (bool, string) {
		pods, err := d.cs.CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if p.UID != agent.UID && strings.HasSuffix(p.Spec.Containers[0].Image, ":"+nextTag) &&
				len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d agent pods", len(pods.Items))
	})
	var firstRec local.RecView
	within(t, 3*time.Minute, "the new agent's first decision on web", func() (bool, string) {
		for _, r := range d.recs(t) {
			if r.Pod == "web" && r.State != "Pending" {
				firstRec = r
				return true, ""
			}
		}
		return false, "no decision yet"
	})
	next := d.agentPod(t)
	close(stop)
	wg.Wait()
	if next.UID == agent.UID || !strings.HasSuffix(next.Spec.Containers[0].Image, ":"+nextTag) {
		t.Fatalf("after the upgrade: pod %s from %s, want a new pod from the %s tag", next.Name, next.Spec.Containers[0].Image, nextTag)
	}
	t.Logf("upgrade rolled in %v; %d cpuset samples during it", time.Since(upgradeStart).Round(time.Millisecond), samples)
	if len(bad) > 0 || samples < 10 {
		t.Fatalf("during the upgrade (%d samples) the pools changed: %s", samples, strings.Join(bad[:min(len(bad), 10)], "; "))
	}
	// Allocations: restored from the checkpoint, the same CPU.
	if a := get("exclusive").Annotations["cgpilot.io/allocated-cpus"]; a != pinned.String() {
		t.Errorf("exclusive pod's allocated-cpus %q after the upgrade, want %s", a, pinned)
	}
	logs := d.kubectl(t, "logs", "-n", deploy.Namespace, next.Name)
	if !strings.Contains(logs, `"pool state restored","source":"checkpoint","exclusivePods":1`) {
		t.Errorf("the new agent did not restore its pools from the checkpoint:\n%s", logs)
	}
	// Histograms: checkpointed at the old agent's shutdown and restored,
	// so the new agent's first decision already has the history.
	if st, err := os.Stat(filepath.Join(lib, "recommend-cgpilot-balanced.checkpoint")); err != nil || st.ModTime().Before(upgradeStart) {
		t.Errorf("recommender checkpoint %v (%v): want it written at the old agent's shutdown, after %v", st, err, upgradeStart)
	}
	t.Logf("web in cgpilotctl recs before the upgrade: %+v; the new agent's first decision: %+v", before, firstRec)
	if firstRec.State == "InsufficientHistory" || firstRec.Recommendation == "-" {
		t.Errorf("the new agent's first decision on web %+v: the histograms were lost (before: %+v)", firstRec, before)
	}

	// Removal: the workloads keep running with their last cgroup values.
	ex, s1, s2, web := get("exclusive"), get("shared-1"), get("shared-2"), get("web")
	last := d.cgroupValues(t, ex, s1, s2, web)
	inst.remove(t, d)
	within(t, time.Minute, "the agent pod gone", func() (bool, string) {
		pods, err := d.cs.CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, fmt.Sprint(err)
	})
	time.Sleep(12 * time.Second) // longer than the agent's and the kubelet's periodic passes
	now := d.cgroupValues(t, ex, s1, s2, web)
	for name, v := range last {
		p := get(name)
		if now[name] != v || p.Status.Phase != corev1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("%s after the agent's removal: %s (%s, restarts %d), before: %s", name, now[name], p.Status.Phase, p.Status.ContainerStatuses[0].RestartCount, v)
		}
	}
	t.Logf("left behind: %v", now)
	expected, others, err := demo.Warnings(ctx, func(ctx context.Context) (*corev1.EventList, error) {
		return d.cs.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	})
	if err != nil || len(others) > 0 {
		t.Errorf("Warning Events (%v):\n%s", err, strings.Join(others, "\n"))
	}
	t.Logf("expected Warning Events: %s", strings.Join(expected, "; "))
}

func getPod(t *testing.T, cs kubernetes.Interface, name string) *corev1.Pod {
	t.Helper()
	p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
