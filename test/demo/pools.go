//go:build linux

package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/test/deploy"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/images"
)

const (
	annoPool      = "cgpilot.io/cpu-pool"
	annoRelease   = "cgpilot.io/release-isolation"
	annoAllocated = "cgpilot.io/allocated-cpus"
	annoStatus    = "cgpilot.io/status"

	// Namespace holds the demo's workload pods.
	Namespace = "demo"
	// ExclusivePod asks for one exclusive CPU.
	ExclusivePod = "exclusive"
	agentNS      = "cgpilot-system"
	agentDS      = "cgpilot-agent"
)

// SharedPods are the busy pods of the shared pool.
var SharedPods = []string{"shared-1", "shared-2", "shared-3"}

// Options configure Up.
type Options struct {
	Dir      string    // test bed directory (state, logs, the agent's host paths)
	BinDir   string    // the Kubernetes binaries
	RepoRoot string    // the cgpilot checkout (deploy/ and the go build)
	Out      io.Writer // the demo's report
}

// Timings of one demo run.
type Timings struct {
	ControlPlane time.Duration // etcd + apiserver + controllers healthy
	Node         time.Duration // containerd + kubelet, Node Ready
	Images       time.Duration // agent image + cgpilotctl built (overlaps the cluster start)
	AgentReady   time.Duration // DaemonSet created -> agent pod Ready
	Pinned       time.Duration // demo pods created -> exclusive pinned, shared moved off
	Release      time.Duration // release-isolation "true" patched -> exclusive container on all CPUs
	ReleaseWatch time.Duration // release-isolation "true" patched -> seen by a watch in the demo process
	Restore      time.Duration // release-isolation removed -> pinned again
	Widen        time.Duration // exclusive pod deleted -> shared containers on all CPUs
	Repin        time.Duration // exclusive pod created again -> pinned (container start included)
	Total        time.Duration
}

// Result is everything the demo observed.
type Result struct {
	Dir, Kubeconfig, Cgpilotctl, Socket string
	NodeCPUs                            cpuset.CPUSet // pools' CPUs (none reserved)
	Exclusive                           cpuset.CPUSet // cgpilot.io/allocated-cpus of the exclusive pod
	Pinned, Released, Restored          Snapshot
	Widened, Repinned                   Snapshot
	CtlPools, CtlPods                   string // cgpilotctl output while pinned
	Timings                             Timings
}

// Up brings up the test bed with a node, deploys the agent DaemonSet from
// deploy/, runs the demo pods and the release-isolation change, prints the
// report to o.Out and leaves the cluster running. On error it tears down
// everything it started.
func Up(ctx context.Context, o Options) (res *Result, err error) {
	t0 := time.Now()
	out := o.Out
	if _, err := os.Stat(filepath.Join(o.Dir, harness.StateFile)); err == nil {
		return nil, fmt.Errorf("%w: a test bed already runs in %s: make demo-down first", ErrDemo, o.Dir)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: the demo runs a real kubelet and containerd: run it as root", ErrDemo)
	}
	objs, err := loadManifests(o.RepoRoot)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(out, "==> cgpilot demo on this machine: one exclusive CPU, no reserved CPUs (2 CPUs here: 1 exclusive + the rest shared)")

	// Build (or reuse, by the hash of their inputs) the agent image and
	// cgpilotctl while the cluster starts.
	cacheDir, err := images.DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	type buildResult struct {
		image, agent, ctl images.Cached
		took              time.Duration
		err               error
	}
	built := make(chan buildResult, 1)
	go func() {
		tb := time.Now()
		var r buildResult
		r.image, r.agent, r.err = images.CachedGoImage(ctx, AgentImage, "github.com/cgpilot/cgpilot/cmd/cgpilot-agent", cacheDir)
		if r.err == nil {
			r.ctl, r.err = images.CachedBinary(ctx, "github.com/cgpilot/cgpilot/cmd/cgpilotctl", cacheDir)
		}
		r.took = time.Since(tb)
		built <- r
	}()
	res = &Result{Dir: o.Dir}

	logf := func(f string, a ...any) { fmt.Fprintf(out, "    "+f+"\n", a...) }
	fmt.Fprintln(out, "==> test bed: etcd, kube-apiserver, controllers, containerd, kubelet")
	cp, err := harness.StartControlPlane(ctx, harness.Options{BinDir: o.BinDir, Dir: o.Dir, Controllers: true, Detach: true, Logf: logf})
	if err != nil {
		<-built
		return nil, err
	}
	defer func() {
		if err != nil {
			fmt.Fprintf(out, "==> demo failed: %v\n==> tearing the test bed down\n", err)
			if rerr := removeAgent(cp.Kubeconfig()); rerr != nil {
				err = errors.Join(err, rerr)
			}
			if terr := cp.Stop(); terr != nil {
				err = errors.Join(err, terr)
			}
			return
		}
		cp.Detach()
	}()
	res.Timings.ControlPlane = cp.Started
	node, err := harness.StartNode(ctx, cp, harness.NodeOptions{})
	if err != nil {
		<-built
		return nil, err
	}
	res.Timings.Node = node.Started
	res.Kubeconfig = cp.Kubeconfig()

	fmt.Fprintln(out, "==> agent image "+AgentImage+" and cgpilotctl (go build, started with the cluster; cached by the hash of their inputs in "+cacheDir+")")
	b := <-built
	if b.err != nil {
		return nil, fmt.Errorf("%w: build: %v", ErrDemo, b.err)
	}
	res.Timings.Images = b.took
	for _, c := range []struct {
		what string
		c    images.Cached
	}{{"agent image", b.image}, {"cgpilotctl", b.ctl}} {
		if c.c.Built {
			logf("%s built (inputs %s)", c.what, c.c.Hash)
		} else {
			logf("%s reused: inputs unchanged (%s)", c.what, c.c.Hash)
		}
	}
	logf("ready in %v", res.Timings.Images.Round(time.Millisecond))
	if err := node.ImportImage(ctx, b.image.Path); err != nil {
		return nil, fmt.Errorf("%w: import agent image: %v", ErrDemo, err)
	}
	res.Cgpilotctl = filepath.Join(o.Dir, "bin", "cgpilotctl")
	if err := copyFile(b.ctl.Path, res.Cgpilotctl); err != nil {
		return nil, err
	}
	flags, err := agentFlags(ctx, b.agent.Path)
	if err != nil {
		return nil, err
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("%w: apiserver address %q: %v", ErrDemo, cfg.Host, err)
	}
	healthPort, err := freePort()
	if err != nil {
		return nil, err
	}
	local := localSetup{APIHost: u.Hostname(), APIPort: u.Port(), HealthPort: healthPort,
		KubeletDir: filepath.Join(node.State.Dir, "kubelet"), StateDir: filepath.Join(o.Dir, "agent"), AgentFlags: flags}
	res.Socket = filepath.Join(local.StateDir, "run", "agent.sock")

	ds := deploy.Find(objs, "DaemonSet", agentDS)
	if ds == nil {
		return nil, fmt.Errorf("%w: deploy/kustomize renders no DaemonSet %s", ErrDemo, agentDS)
	}
	notes, err := local.localize(ds)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(out, "==> kubectl apply -k deploy/kustomize (RBAC, the CRD, the admission policy, the real DaemonSet), with these test-bed changes:")
	for _, s := range notes {
		logf("- %s", s)
	}
	ta := time.Now()
	if err := deploy.Apply(ctx, cp.Config, objs, deploy.ApplyOptions{FieldManager: "cgpilot-demo"}); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	if err := waitAgentReady(ctx, cs, 3*time.Minute); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, agentLogTail(node.State.Dir, 30))
	}
	res.Timings.AgentReady = time.Since(ta)
	logf("DaemonSet %s/%s rolled out, agent pod Ready after %v", agentNS, agentDS, res.Timings.AgentReady.Round(time.Millisecond))

	cr, err := newCgroupReader()
	if err != nil {
		return nil, err
	}
	if res.NodeCPUs, err = cr.nodeCPUs(); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "==> pods in namespace %s: %s (cpu-pool exclusive, 1 CPU) and %s (busy loops, 100m request, 200m limit)\n",
		Namespace, ExclusivePod, strings.Join(SharedPods, ", "))
	tp := time.Now()
	if err := createPods(ctx, cs, true); err != nil {
		return nil, err
	}
	w := watcher{cs: cs, cr: cr, all: res.NodeCPUs}
	res.Pinned, res.Exclusive, err = w.until(ctx, 3*time.Minute, 50*time.Millisecond, w.pinned)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, agentLogTail(node.State.Dir, 30))
	}
	res.Timings.Pinned = time.Since(tp)
	logf("all running, exclusive pod pinned to cpu %s and shared pods moved off it %v after creation", res.Exclusive, res.Timings.Pinned.Round(time.Millisecond))

	if res.CtlPools, err = ctl(ctx, res.Cgpilotctl, "pools", res.Socket); err != nil {
		return nil, err
	}
	if res.CtlPods, err = ctl(ctx, res.Cgpilotctl, "pods", res.Socket); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "\n==> cgpilotctl pools --socket %s\n%s\n", res.Socket, res.CtlPools)
	fmt.Fprintf(out, "==> cgpilotctl pods --socket %s\n%s\n", res.Socket, res.CtlPods)
	explain, err := ctl(ctx, res.Cgpilotctl, "explain", res.Socket, Namespace+"/"+ExclusivePod)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "==> cgpilotctl explain --socket %s %s/%s\n%s\n", res.Socket, Namespace, ExclusivePod, explain)
	fmt.Fprintln(out, "==> the cgroup files themselves (read from the host cgroupfs, not from the agent)")
	printSnapshot(out, res.Pinned)
	if c, ok := res.Pinned.Find(ExclusivePod); ok {
		logf("e.g. %s = %s, %s = %d", c.CPUSetFile, c.CPUs, c.QuotaFile, c.Quota)
	}

	fmt.Fprintf(out, "\n==> in-place change 1: kubectl annotate pod -n %s %s %s=true\n", Namespace, ExclusivePod, annoRelease)
	running, err := w.pods(ctx)
	if err != nil {
		return nil, err
	}
	if len(running) != 1+len(SharedPods) || running[0].Name != ExclusivePod {
		return nil, fmt.Errorf("%w: want %s first of %d pods, have %d", ErrDemo, ExclusivePod, 1+len(SharedPods), len(running))
	}
	seen, err := watchAnnotation(ctx, cs, running[0], annoRelease)
	if err != nil {
		return nil, err
	}
	tr := time.Now()
	if err := patchRelease(ctx, cs, `"true"`); err != nil {
		return nil, err
	}
	if res.Timings.Release, err = w.files(ctx, tr, running, w.cpusets(res.NodeCPUs, res.NodeCPUs.Difference(res.Exclusive))); err != nil {
		return nil, err
	}
	select {
	case at := <-seen:
		res.Timings.ReleaseWatch = at.Sub(tr)
	case <-time.After(5 * time.Second):
		return nil, fmt.Errorf("%w: the demo's own watch never saw %s on %s", ErrDemo, annoRelease, ExclusivePod)
	}
	if res.Released, _, err = w.until(ctx, 30*time.Second, 20*time.Millisecond, w.released(res.Exclusive)); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "    the exclusive pod runs on all CPUs (%s) and keeps cpu %s: shared pods stay off it; %v from the patch to the last cgroup file changed\n"+
		"    (a watch of the demo's own saw the patch after %v)\n",
		res.NodeCPUs, res.Exclusive, res.Timings.Release.Round(time.Millisecond), res.Timings.ReleaseWatch.Round(time.Millisecond))
	printSnapshot(out, res.Released)

	fmt.Fprintf(out, "\n==> in-place change 2: kubectl annotate pod -n %s %s %s-\n", Namespace, ExclusivePod, annoRelease)
	tr = time.Now()
	if err := patchRelease(ctx, cs, "null"); err != nil {
		return nil, err
	}
	if res.Timings.Restore, err = w.files(ctx, tr, running, w.cpusets(res.Exclusive, res.NodeCPUs.Difference(res.Exclusive))); err != nil {
		return nil, err
	}
	if res.Restored, _, err = w.until(ctx, 30*time.Second, 20*time.Millisecond, w.pinned); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "    isolated again on cpu %s in %v:\n", res.Exclusive, res.Timings.Restore.Round(time.Millisecond))
	printSnapshot(out, res.Restored)

	fmt.Fprintf(out, "\n==> change 3: kubectl delete pod -n %s %s\n", Namespace, ExclusivePod)
	tr = time.Now()
	grace := int64(1)
	if err := cs.CoreV1().Pods(Namespace).Delete(ctx, ExclusivePod, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		return nil, fmt.Errorf("%w: delete pod %s: %v", ErrDemo, ExclusivePod, err)
	}
	if res.Timings.Widen, err = w.files(ctx, tr, running[1:], w.cpusets(cpuset.New(), res.NodeCPUs)); err != nil {
		return nil, err
	}
	if res.Widened, _, err = w.until(ctx, 60*time.Second, 20*time.Millisecond, w.widened); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "    cpu %s given back: the shared pods widened to %s %v after the delete call:\n", res.Exclusive, res.NodeCPUs, res.Timings.Widen.Round(time.Millisecond))
	printSnapshot(out, res.Widened)

	fmt.Fprintf(out, "\n==> change 4: the exclusive pod created again\n")
	if err := poll(ctx, 60*time.Second, 50*time.Millisecond, func() bool {
		_, err := cs.CoreV1().Pods(Namespace).Get(ctx, ExclusivePod, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}); err != nil {
		return nil, fmt.Errorf("%w: deleted pod %s still exists (%v)", ErrDemo, ExclusivePod, waited(err, 60*time.Second))
	}
	tr = time.Now()
	if err := createPods(ctx, cs, false); err != nil {
		return nil, err
	}
	if res.Repinned, res.Exclusive, err = w.until(ctx, 2*time.Minute, 20*time.Millisecond, w.pinned); err != nil {
		return nil, err
	}
	res.Timings.Repin = time.Since(tr)
	fmt.Fprintf(out, "    pinned to cpu %s, shared pods narrowed, %v after the create call (container start included):\n", res.Exclusive, res.Timings.Repin.Round(time.Millisecond))
	printSnapshot(out, res.Repinned)

	if m, err := agentMetrics(ctx, healthPort); err != nil {
		logf("agent /metrics: %v", err)
	} else {
		fmt.Fprintf(out, "\n==> the agent's own /metrics (127.0.0.1:%d), informer event -> cgroups written (cgpilot_apply_latency_seconds):\n    %s\n", healthPort, m)
	}
	res.Timings.Total = time.Since(t0)
	t := res.Timings
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	fmt.Fprintf(out, "\n==> timings (cgroup files polled every 1 ms): control plane %v, node %v, images %v (built during the cluster start), agent DaemonSet ready %v, pods created -> pinned %v;\n"+
		"    release-isolation -> cgroups %v (-> a watch %v), restore -> cgroups %v, delete -> shared widened %v, re-create -> pinned %v; demo up %v\n",
		r(t.ControlPlane), r(t.Node), r(t.Images), r(t.AgentReady), r(t.Pinned), r(t.Release), r(t.ReleaseWatch), r(t.Restore), r(t.Widen), r(t.Repin), r(t.Total))
	fmt.Fprintf(out, `
The cluster keeps running:
  export KUBECONFIG=%s
  %s get pods -A -o wide
  %s pods --socket %s     (same --socket for pools, events, explain %s/%s)
  %s annotate pod -n %s %s %s=true
make demo-down to remove it (the agent DaemonSet, processes, mounts, kubepods cgroups, %s)
`, res.Kubeconfig, filepath.Join(o.BinDir, "kubectl"), res.Cgpilotctl, res.Socket, Namespace, ExclusivePod,
		filepath.Join(o.BinDir, "kubectl"), Namespace, ExclusivePod, annoRelease, o.Dir)
	return res, nil
}

// Down removes the demo in dir: the agent DaemonSet first, orphaning its
// pod (the harness drains the node by deleting pods, and the DaemonSet
// controller would re-create the agent's), then the test bed with
// harness.Teardown, as `testbed down` does.
func Down(dir string, out io.Writer) error {
	st, err := harness.LoadState(dir)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(out, "no demo in %s: nothing to stop\n", dir)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrDemo, err)
	}
	var errs []error
	if err := removeAgent(st.Kubeconfig); err != nil {
		errs = append(errs, err)
	}
	if err := harness.Teardown(dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(out, "demo in %s stopped and removed: agent DaemonSet, pods, kubelet, containerd, control plane, mounts, kubepods cgroups, directory\n", dir)
	return nil
}

// removeAgent deletes the agent DaemonSet, orphaning its pod, and waits
// until it is gone. An unreachable API server (a crashed test bed) is not
// an error: then no controller re-creates anything either.
func removeAgent(kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil
	}
	cfg.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil
	}
	ctx := context.Background()
	orphan := metav1.DeletePropagationOrphan
	err = cs.AppsV1().DaemonSets(agentNS).Delete(ctx, agentDS, metav1.DeleteOptions{PropagationPolicy: &orphan})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return nil // API server down: nothing will re-create the pod
	}
	err = poll(ctx, 60*time.Second, 100*time.Millisecond, func() bool {
		_, err := cs.AppsV1().DaemonSets(agentNS).Get(ctx, agentDS, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("%w: daemonset %s/%s not deleted within 60s", ErrDemo, agentNS, agentDS)
	}
	return nil
}

func waitAgentReady(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) error {
	var last string
	err := poll(ctx, timeout, 200*time.Millisecond, func() bool {
		ds, err := cs.AppsV1().DaemonSets(agentNS).Get(ctx, agentDS, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false
		}
		s := ds.Status
		last = fmt.Sprintf("desired %d, scheduled %d, ready %d", s.DesiredNumberScheduled, s.CurrentNumberScheduled, s.NumberReady)
		return s.DesiredNumberScheduled == 1 && s.NumberReady == 1 && s.UpdatedNumberScheduled == 1
	})
	if err != nil {
		pods, _ := cs.CoreV1().Pods(agentNS).List(ctx, metav1.ListOptions{})
		for _, p := range pods.Items {
			last += fmt.Sprintf("; pod %s %s", p.Name, p.Status.Phase)
			for _, c := range p.Status.ContainerStatuses {
				last += fmt.Sprintf(" ready=%v restarts=%d", c.Ready, c.RestartCount)
				if c.State.Waiting != nil {
					last += " waiting: " + c.State.Waiting.Reason + " " + c.State.Waiting.Message
				}
				if c.LastTerminationState.Terminated != nil {
					last += fmt.Sprintf(" last exit %d", c.LastTerminationState.Terminated.ExitCode)
				}
			}
		}
		return fmt.Errorf("%w: agent DaemonSet not ready (%v): %s", ErrDemo, waited(err, timeout), last)
	}
	return nil
}

// busyPod is a busybox pod spinning one CPU: the load that shows where the
// cpuset lets it run.
func busyPod(name string, annotations map[string]string, req, lim corev1.ResourceList) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Annotations: annotations, Labels: map[string]string{"app": "cgpilot-demo"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "busy", Image: images.BusyboxRef, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"sh", "-c", "while :; do :; done"},
				Resources: corev1.ResourceRequirements{Requests: req, Limits: lim},
			}},
		},
	}
}

// createPods creates the exclusive pod, and with shared the namespace and
// the shared pods.
func createPods(ctx context.Context, cs kubernetes.Interface, shared bool) error {
	one := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("32Mi")}
	pods := []*corev1.Pod{busyPod(ExclusivePod, map[string]string{annoPool: "exclusive"}, one, one)}
	if shared {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%w: create namespace %s: %v", ErrDemo, Namespace, err)
		}
	}
	// A 200m limit keeps three busy loops from eating this shared machine.
	for _, n := range SharedPods {
		if !shared {
			break
		}
		pods = append(pods, busyPod(n, nil,
			corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("32Mi")}))
	}
	for _, p := range pods {
		if _, err := cs.CoreV1().Pods(Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%w: create pod %s: %v", ErrDemo, p.Name, err)
		}
	}
	return nil
}

func patchRelease(ctx context.Context, cs kubernetes.Interface, value string) error {
	body := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, annoRelease, value)
	if _, err := cs.CoreV1().Pods(Namespace).Patch(ctx, ExclusivePod, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("%w: patch %s %s=%s: %v", ErrDemo, ExclusivePod, annoRelease, value, err)
	}
	return nil
}

// watcher polls the demo pods and their cgroups until a state holds.
type watcher struct {
	cs  kubernetes.Interface
	cr  *cgroupReader
	all cpuset.CPUSet
}

// check tells whether a snapshot is the wanted state, and why not.
type check func(pods []corev1.Pod, s Snapshot) (cpuset.CPUSet, string)

// pods lists the demo pods that are not being deleted, exclusive first.
func (w watcher) pods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := w.cs.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w: list pods: %v", ErrDemo, err)
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			pods = append(pods, p)
		}
	}
	// "exclusive" sorts before "shared-N".
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods, nil
}

// files polls only the cgroup files of pods (no API calls, which would
// blur the timing) every millisecond until cond holds, and returns the
// time from t0 to the first read that satisfied it.
func (w watcher) files(ctx context.Context, t0 time.Time, pods []corev1.Pod, cond func(Snapshot) string) (time.Duration, error) {
	var took time.Duration
	why := "not polled"
	err := poll(ctx, 60*time.Second, time.Millisecond, func() bool {
		s, err := w.cr.read(pods)
		if err != nil {
			why = err.Error()
			return false
		}
		if why = cond(s); why != "" {
			return false
		}
		took = time.Since(t0)
		return true
	})
	if err != nil {
		return 0, fmt.Errorf("%w: %v: %s", ErrDemo, waited(err, 60*time.Second), why)
	}
	return took, nil
}

// cpusets: the exclusive container (if read) on excl, every other one on shared.
func (w watcher) cpusets(excl, shared cpuset.CPUSet) func(Snapshot) string {
	return func(s Snapshot) string {
		for _, c := range s {
			want := shared
			if c.Pod == ExclusivePod {
				want = excl
			}
			if !c.CPUs.Equals(want) {
				return fmt.Sprintf("%s: cpuset %s, want %s", c.Pod, c.CPUs, want)
			}
		}
		return ""
	}
}

func (w watcher) until(ctx context.Context, timeout, every time.Duration, ok check) (Snapshot, cpuset.CPUSet, error) {
	var snap Snapshot
	var excl cpuset.CPUSet
	why := "not polled"
	err := poll(ctx, timeout, every, func() bool {
		pods, err := w.pods(ctx)
		if err != nil {
			why = err.Error()
			return false
		}
		s, err := w.cr.read(pods)
		if err != nil {
			why = err.Error()
			return false
		}
		e, msg := ok(pods, s)
		if msg != "" {
			why = msg
			return false
		}
		snap, excl = s, e
		return true
	})
	if err != nil {
		return nil, cpuset.CPUSet{}, fmt.Errorf("%w: %v: %s", ErrDemo, waited(err, timeout), why)
	}
	return snap, excl, nil
}

// pinned: the exclusive container runs alone on its allocated CPU with no
// CFS quota (container and pod), every shared container on all the rest.
func (w watcher) pinned(pods []corev1.Pod, s Snapshot) (cpuset.CPUSet, string) {
	var excl cpuset.CPUSet
	if len(pods) != 1+len(SharedPods) {
		return excl, fmt.Sprintf("%d pods, want %d", len(pods), 1+len(SharedPods))
	}
	for _, p := range pods {
		if p.Name != ExclusivePod {
			continue
		}
		a, ok := p.Annotations[annoAllocated]
		if !ok {
			return excl, "exclusive pod has no " + annoAllocated + " yet (status " + p.Annotations[annoStatus] + ")"
		}
		if _, released := p.Annotations[annoRelease]; released {
			return excl, "release-isolation still set"
		}
		var err error
		if excl, err = cpuset.Parse(a); err != nil || excl.Size() != 1 {
			return excl, fmt.Sprintf("%s=%q: want one CPU", annoAllocated, a)
		}
	}
	shared := w.all.Difference(excl)
	for _, c := range s {
		switch c.Pod {
		case ExclusivePod:
			if !c.CPUs.Equals(excl) || c.Quota != -1 || c.PodQuota != -1 {
				return excl, fmt.Sprintf("exclusive container: cpuset %s quota %d (pod %d), want %s and -1", c.CPUs, c.Quota, c.PodQuota, excl)
			}
		default:
			if !c.CPUs.Equals(shared) {
				return excl, fmt.Sprintf("shared %s: cpuset %s, want %s", c.Pod, c.CPUs, shared)
			}
		}
	}
	return excl, ""
}

// released: the exclusive container runs on all CPUs, without quota, and
// keeps its allocation; the shared ones stay off it.
func (w watcher) released(excl cpuset.CPUSet) check {
	return func(pods []corev1.Pod, s Snapshot) (cpuset.CPUSet, string) {
		if len(s) != 1+len(SharedPods) {
			return excl, fmt.Sprintf("%d pods, want %d", len(s), 1+len(SharedPods))
		}
		for _, p := range pods {
			if p.Name == ExclusivePod && p.Annotations[annoAllocated] != excl.String() {
				return excl, fmt.Sprintf("exclusive pod %s=%q, want %s kept", annoAllocated, p.Annotations[annoAllocated], excl)
			}
		}
		for _, c := range s {
			want := w.all.Difference(excl)
			if c.Pod == ExclusivePod {
				want = w.all
				if c.Quota != -1 {
					return excl, fmt.Sprintf("exclusive container quota %d, want -1", c.Quota)
				}
			}
			if !c.CPUs.Equals(want) {
				return excl, fmt.Sprintf("%s: cpuset %s, want %s", c.Pod, c.CPUs, want)
			}
		}
		return excl, ""
	}
}

// widened: the exclusive pod is gone and every shared container runs on
// all CPUs.
func (w watcher) widened(_ []corev1.Pod, s Snapshot) (cpuset.CPUSet, string) {
	if len(s) != len(SharedPods) {
		return cpuset.CPUSet{}, fmt.Sprintf("%d pods, want the %d shared ones", len(s), len(SharedPods))
	}
	for _, c := range s {
		if !c.CPUs.Equals(w.all) {
			return cpuset.CPUSet{}, fmt.Sprintf("%s: cpuset %s, want %s", c.Pod, c.CPUs, w.all)
		}
	}
	return cpuset.CPUSet{}, ""
}

func printSnapshot(out io.Writer, s Snapshot) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "    POD\tPOOL\tcontainer cpuset.cpus\tcontainer cpu.cfs_quota_us\tpod cpuset.cpus\tpod cpu.cfs_quota_us")
	for _, c := range s {
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%d\t%s\t%d\n", c.Pod, c.Pool, c.CPUs, c.Quota, c.PodCPUs, c.PodQuota)
	}
	tw.Flush()
}

func ctl(ctx context.Context, bin, cmd, socket string, args ...string) (string, error) {
	b, err := exec.CommandContext(ctx, bin, append([]string{cmd, "--socket", socket}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w: cgpilotctl %s: %v: %s", ErrDemo, cmd, err, strings.TrimSpace(string(b)))
	}
	return strings.TrimRight(string(b), "\n"), nil
}

// agentLogTail returns the last n lines of the agent container's log,
// which the harness kubelet keeps under its node directory.
func agentLogTail(nodeDir string, n int) string {
	files, _ := filepath.Glob(filepath.Join(nodeDir, "pod-logs", agentNS+"_"+agentDS+"-*", "agent", "*.log"))
	if len(files) == 0 {
		return "(no agent container log yet)"
	}
	sort.Strings(files)
	f := files[len(files)-1]
	b, err := os.ReadFile(f)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "agent log " + f + ":\n" + strings.Join(lines, "\n")
}

// watchAnnotation starts a watch on pod and sends the time it first sees
// annotation key set: the API server's part of the annotation -> cgroup
// latency, as any watcher on this machine sees it.
func watchAnnotation(ctx context.Context, cs kubernetes.Interface, pod corev1.Pod, key string) (<-chan time.Time, error) {
	wi, err := cs.CoreV1().Pods(pod.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + pod.Name, ResourceVersion: pod.ResourceVersion})
	if err != nil {
		return nil, fmt.Errorf("%w: watch pod %s: %v", ErrDemo, pod.Name, err)
	}
	seen := make(chan time.Time, 1)
	go func() {
		defer wi.Stop()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case ev, ok := <-wi.ResultChan():
				if !ok {
					return
				}
				if p, isPod := ev.Object.(*corev1.Pod); isPod && p.Annotations[key] != "" {
					seen <- time.Now()
					return
				}
			case <-timeout:
				return
			}
		}
	}()
	return seen, nil
}

// agentMetrics summarizes the agent's apply latency histogram and error
// counters from its /metrics text.
func agentMetrics(ctx context.Context, port int) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return "", err
	}
	v := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && strings.HasPrefix(f[0], "cgpilot_") {
			v[f[0]] = f[1]
		}
	}
	const h = "cgpilot_apply_latency_seconds"
	if v[h+"_count"] == "" {
		return "", fmt.Errorf("no %s in the agent's metrics", h)
	}
	return fmt.Sprintf("%s changes: %s within 10 ms, %s within 100 ms, %s within 250 ms; cgroup writes %s, write errors %s, drift corrections %s",
		v[h+"_count"], v[h+`_bucket{le="0.01"}`], v[h+`_bucket{le="0.1"}`], v[h+`_bucket{le="0.25"}`],
		v["cgpilot_cgroup_writes_total"], v["cgpilot_cgroup_write_errors_total"], v["cgpilot_drift_corrections_total"]), nil
}

// waited says why a poll stopped: its timeout, or an interrupt.
func waited(err error, timeout time.Duration) string {
	if errors.Is(err, context.Canceled) {
		return "interrupted"
	}
	return fmt.Sprintf("gave up after %v", timeout)
}

func poll(ctx context.Context, timeout, every time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("%w: free port: %v", ErrDemo, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrDemo, err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrDemo, err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrDemo, err)
	}
	return nil
}
