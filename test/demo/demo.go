//go:build linux

package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/test/deploy"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/images"
)

// slowScale is Options.Slow's factor: in the v2 VM a pod starts in
// 17-33 s (2-3 s on the host), the control plane in about a minute.
const slowScale = 4

// ErrDemo is wrapped by every error of the demo.
var ErrDemo = errors.New("demo")

const (
	// AgentImage is the locally built agent image the demo imports into
	// the node's containerd.
	AgentImage = "docker.io/local/cgpilot-agent:demo"
	// Namespace holds the demo's workloads.
	Namespace = "demo"
	agentNS   = deploy.Namespace
	agentDS   = deploy.AgentName
)

// Options configure Up.
type Options struct {
	Dir           string    // test bed directory (state, logs, the agent's host paths)
	BinDir        string    // the Kubernetes binaries
	RuntimeBinDir string    // the node's containerd 2 and runc (default $CGPILOT_RUNTIME_BINS)
	RepoRoot      string    // the cgpilot checkout (deploy/ and the go build)
	Out           io.Writer // the demo's report
	// Prebuilt, when set, are the images and cgpilotctl built elsewhere
	// (BuildImages on the host): the cgroup v2 VM has no Go toolchain.
	Prebuilt *Prebuilt
	// Slow: the node runs under emulation (the cgroup v2 VM's TCG, about
	// ten times slower); every wait of the demo allows slowScale times as
	// long.
	Slow bool
	// NoBrowser, when set, is why the dashboard step takes no screenshot
	// (the VM has no Chromium); the JSON API and its 401s are still checked.
	NoBrowser string
}

// Prebuilt are the files the demo's first step otherwise builds.
type Prebuilt struct {
	AgentImage, AggregatorImage, Cgpilotctl string // docker-archives and the binary
}

// Prebuilt file names in a directory (WriteImages, PrebuiltIn).
const (
	prebuiltAgent      = "agent-image.tar"
	prebuiltAggregator = "aggregator-image.tar"
	prebuiltCtl        = "cgpilotctl"
)

// PrebuiltIn names the files WriteImages put in dir.
func PrebuiltIn(dir string) *Prebuilt {
	return &Prebuilt{AgentImage: filepath.Join(dir, prebuiltAgent), AggregatorImage: filepath.Join(dir, prebuiltAggregator),
		Cgpilotctl: filepath.Join(dir, prebuiltCtl)}
}

// WriteImages builds (or finds in cacheDir) the agent and aggregator
// images and cgpilotctl, as the demo's first step does, and links or
// copies them into dir under PrebuiltIn's names: test/v2node packs them
// into the cgroup v2 VM.
func WriteImages(ctx context.Context, cacheDir, dir string) error {
	b := buildImages(ctx, cacheDir)
	if b.err != nil {
		return fmt.Errorf("%w: build: %v", ErrDemo, b.err)
	}
	p := PrebuiltIn(dir)
	for from, to := range map[string]string{b.image.Path: p.AgentImage, b.aggregator.Path: p.AggregatorImage, b.ctl.Path: p.Cgpilotctl} {
		os.Remove(to)
		if err := os.Link(from, to); err == nil {
			continue
		}
		if err := copyFile(from, to); err != nil {
			return err
		}
	}
	return nil
}

// buildImages builds (or finds in cacheDir) the agent image, cgpilotctl
// and the aggregator image.
func buildImages(ctx context.Context, cacheDir string) buildResult {
	tb := time.Now()
	var b buildResult
	b.image, b.agent, b.err = images.CachedGoImage(ctx, AgentImage, "github.com/cgpilot/cgpilot/cmd/cgpilot-agent", cacheDir)
	if b.err == nil {
		b.ctl, b.err = images.CachedBinary(ctx, "github.com/cgpilot/cgpilot/cmd/cgpilotctl", cacheDir)
	}
	if b.err == nil {
		b.aggregator, _, b.err = images.CachedGoImage(ctx, AggregatorImage, "github.com/cgpilot/cgpilot/cmd/cgpilot-aggregator", cacheDir)
	}
	b.took = time.Since(tb)
	return b
}

// Timings of one demo run.
type Timings struct {
	ControlPlane time.Duration // etcd + apiserver + controllers healthy
	Node         time.Duration // containerd + kubelet, Node Ready
	Images       time.Duration // agent image + cgpilotctl built (overlaps the cluster start)
	AgentReady   time.Duration // kubectl apply -k -> agent pod Ready
	Pinned       time.Duration // demo pods created -> exclusive pinned, shared moved off
	Release      time.Duration // release-isolation "true" patched -> exclusive container on all CPUs
	ReleaseWatch time.Duration // release-isolation "true" patched -> seen by a watch in the demo process
	Restore      time.Duration // release-isolation removed -> pinned again
	Widen        time.Duration // exclusive pod deleted -> shared containers on all CPUs
	Repin        time.Duration // exclusive pod created again -> pinned (container start included)
	FirstResize  time.Duration // Up called -> the web pod's requests lowered in place
	ResizeAfter  time.Duration // web pod created -> resized (its policy's minHistory included)
	OOMRaised    time.Duration // memory hog created -> its last limit raise (Event times, 1 s resolution)
	Total        time.Duration
	Steps        []StepTiming
}

// StepTiming is one step's duration and when it ended, from Up's start.
type StepTiming struct {
	Name     string
	Took, At time.Duration
}

// Result is everything the demo observed.
type Result struct {
	Dir, Kubeconfig, Cgpilotctl, Socket, Overlay string
	NodeCPUs                                     cpuset.CPUSet // pools' CPUs (none reserved)
	Exclusive                                    cpuset.CPUSet // cgpilot.io/allocated-cpus of the exclusive pod
	Pinned, Released, Restored                   Snapshot
	Widened, Repinned                            Snapshot
	CtlPools, CtlPods                            string // cgpilotctl output while pinned
	Resize                                       Resize
	OOM                                          OOM
	CtlRecs                                      string // cgpilotctl recs after the resize
	// Dashboard is what the aggregator's steps saw.
	Dashboard Dashboard
	// AllowedWarnings are the Warning Events that were expected (the
	// host's cgroup v1, the OOM kills the demo provokes), one line each.
	AllowedWarnings []string
	Timings         Timings
}

// run is one Up: its options, what the steps built and what they saw.
type run struct {
	o        Options
	out      io.Writer
	t0       time.Time
	res      *Result
	cacheDir string
	built    chan buildResult
	build    buildResult
	cp       *harness.ControlPlane
	node     *harness.Node
	cs       kubernetes.Interface
	dyn      dynamic.Interface
	bed      deploy.TestBed
	cr       *cgroupReader
	w        watcher
	// pools are the pool pods, exclusive first; poolsCreated is when.
	pools        []corev1.Pod
	poolsCreated time.Time
	rs           rsState
}

type buildResult struct {
	image, agent, ctl images.Cached
	aggregator        images.Cached
	took              time.Duration
	err               error
}

// step is one named part of the demo.
type step struct {
	name string
	do   func(context.Context) error
}

// Up brings up the test bed with a node, deploys the agent DaemonSet from
// deploy/ with kubectl apply -k, runs the demo's workloads and changes
// step by step, prints the report to o.Out and leaves the cluster running.
// On error it tears down everything it started.
func Up(ctx context.Context, o Options) (res *Result, err error) {
	r := &run{o: o, out: o.Out, t0: time.Now(), res: &Result{Dir: o.Dir}}
	if o.Slow {
		timeScale = slowScale
		defer func() { timeScale = 1 }()
	}
	defer func() {
		if r.cp == nil {
			return
		}
		if err != nil {
			fmt.Fprintf(r.out, "==> demo failed: %v\n==> tearing the test bed down\n", err)
			if rerr := removeAgent(r.cp.Kubeconfig()); rerr != nil {
				err = errors.Join(err, rerr)
			}
			if terr := r.cp.Stop(); terr != nil {
				err = errors.Join(err, terr)
			}
			return
		}
		r.cp.Detach()
	}()
	first := "this host: root, 2 CPUs or more, no demo running; the agent image starts building"
	if o.Prebuilt != nil {
		first = "this host: root, 2 CPUs or more, no demo running; the images were built before the demo"
	}
	steps := []step{
		{first, r.checkHost},
		{"the test bed: etcd, kube-apiserver, controllers, containerd 2 and a kubelet on 127.0.0.1", r.startCluster},
		{"the agent image and cgpilotctl, cached by the hash of their inputs", r.images},
		{"deploy the agent and the aggregator: kubectl apply -k (deploy/kustomize and its aggregator component, with the test bed's changes)", r.deployAgent},
		{"workloads in namespace " + Namespace + ": CPU pools, a web Deployment under an InPlace RightsizePolicy, a memory hog", r.startWorkloads},
		{"CPU pools: the exclusive pod pinned, the shared pods moved off its CPU", r.showPools},
		{"in-place change 1: kubectl annotate pod -n " + Namespace + " " + ExclusivePod + " " + annoRelease + "=true", r.release},
		{"in-place change 2: kubectl annotate pod -n " + Namespace + " " + ExclusivePod + " " + annoRelease + "-", r.restore},
		{"change 3: kubectl delete pod -n " + Namespace + " " + ExclusivePod, r.deleteExclusive},
		{"change 4: the exclusive pod created again", r.recreateExclusive},
		{"right-sizing: the web pod's requests lowered in place, no restart", r.showResize},
		{"OOM: the memory hog's limit raised at its kill, no restart loop", r.showOOM},
		{"Events: no Warning", r.checkEvents},
		{"the aggregator: the agent's reports taken, authenticated by its token", r.showAggregator},
		{"the dashboard as a user of this cluster reaches it: refused without a token, read with a viewer's", r.showDashboard},
	}
	for i, s := range steps {
		fmt.Fprintf(r.out, "\n==> step %d/%d: %s\n", i+1, len(steps), s.name)
		ts := time.Now()
		if err := s.do(ctx); err != nil {
			if r.bed.Image != "" && r.node != nil && !strings.Contains(err.Error(), "agent log ") {
				// The agent is deployed: what it said is the first thing
				// to read (the VM of make demo-v2 is gone afterwards).
				err = fmt.Errorf("%w\n%s", err, agentLogTail(r.node.State.Dir, 40))
			}
			return nil, fmt.Errorf("step %d/%d (%s): %w", i+1, len(steps), s.name, err)
		}
		st := StepTiming{Name: s.name, Took: time.Since(ts), At: time.Since(r.t0)}
		r.res.Timings.Steps = append(r.res.Timings.Steps, st)
		r.logf("step %d/%d done in %v (demo at %v)", i+1, len(steps), round(st.Took), round(st.At))
	}
	r.res.Timings.Total = time.Since(r.t0)
	r.summary()
	return r.res, nil
}

func (r *run) logf(f string, a ...any) { fmt.Fprintf(r.out, "    "+f+"\n", a...) }

func round(d time.Duration) time.Duration {
	if d > 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// checkHost refuses to start where the demo cannot run, then starts
// building (or finding in the cache) the agent image and cgpilotctl in
// the background: the build overlaps the cluster's start.
func (r *run) checkHost(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(r.o.Dir, harness.StateFile)); err == nil {
		return fmt.Errorf("%w: a test bed already runs in %s: make demo-down first", ErrDemo, r.o.Dir)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: the demo runs a real kubelet and containerd: run it as root", ErrDemo)
	}
	cr, err := newCgroupReader()
	if err != nil {
		return err
	}
	r.cr = cr
	if r.res.NodeCPUs, err = cr.nodeCPUs(); err != nil {
		return err
	}
	if r.res.NodeCPUs.Size() < 2 {
		return fmt.Errorf("%w: the demo needs 2 CPUs (1 exclusive + the shared pool); this machine has %s", ErrDemo, r.res.NodeCPUs)
	}
	r.logf("CPUs %s: 1 exclusive, the rest shared, none reserved (reservedCPUs: \"\" in deploy/kustomize/config.yaml)", r.res.NodeCPUs)
	r.built = make(chan buildResult, 1)
	if p := r.o.Prebuilt; p != nil {
		r.cacheDir = filepath.Dir(p.AgentImage)
		r.built <- buildResult{image: images.Cached{Path: p.AgentImage}, ctl: images.Cached{Path: p.Cgpilotctl},
			aggregator: images.Cached{Path: p.AggregatorImage}}
		return nil
	}
	if r.cacheDir, err = images.DefaultCacheDir(); err != nil {
		return err
	}
	go func() { r.built <- buildImages(ctx, r.cacheDir) }()
	return nil
}

func (r *run) startCluster(ctx context.Context) error {
	webhookAuth, err := r.apiServerWebhookAuth()
	if err != nil {
		<-r.built
		return err
	}
	cp, err := harness.StartControlPlane(ctx, harness.Options{BinDir: r.o.BinDir, Dir: r.o.Dir, Controllers: true, Detach: true, Logf: r.logf,
		ExtraFlags: map[string][]string{"kube-apiserver": webhookAuth}, ReadyTimeout: scaled(90 * time.Second)})
	if err != nil {
		<-r.built
		return err
	}
	r.cp = cp
	r.res.Timings.ControlPlane = cp.Started
	if r.node, err = harness.StartNode(ctx, cp, harness.NodeOptions{RuntimeBinDir: r.o.RuntimeBinDir, ReadyTimeout: scaled(3 * time.Minute)}); err != nil {
		<-r.built
		return err
	}
	r.res.Timings.Node = r.node.Started
	r.res.Kubeconfig = cp.Kubeconfig()
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig())
	if err != nil {
		return fmt.Errorf("%w: %v", ErrDemo, err)
	}
	if r.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("%w: %v", ErrDemo, err)
	}
	if r.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return fmt.Errorf("%w: %v", ErrDemo, err)
	}
	r.w = watcher{cs: r.cs, cr: r.cr, all: r.res.NodeCPUs}
	return nil
}

// images waits for the build started by checkHost, imports the image into
// the node's containerd (no registry) and puts cgpilotctl in the demo's bin.
func (r *run) images(ctx context.Context) error {
	if r.o.Prebuilt == nil {
		r.logf("go build of ./cmd/cgpilot-agent and ./cmd/cgpilotctl, started with the cluster; cache %s", r.cacheDir)
	}
	select {
	case r.build = <-r.built:
	case <-ctx.Done():
		return fmt.Errorf("%w: build: %v", ErrDemo, ctx.Err())
	}
	if r.build.err != nil {
		return fmt.Errorf("%w: build: %v", ErrDemo, r.build.err)
	}
	r.res.Timings.Images = r.build.took
	for _, c := range []struct {
		what string
		c    images.Cached
	}{{"agent image " + AgentImage, r.build.image}, {"cgpilotctl", r.build.ctl}, {"aggregator image " + AggregatorImage, r.build.aggregator}} {
		if r.o.Prebuilt != nil {
			r.logf("%s built before the demo (on the host: this node has no Go toolchain): %s", c.what, c.c.Path)
		} else if c.c.Built {
			r.logf("%s built (inputs %s)", c.what, c.c.Hash)
		} else {
			r.logf("%s reused: inputs unchanged (%s)", c.what, c.c.Hash)
		}
	}
	if r.o.Prebuilt == nil {
		r.logf("ready %v after the start of the build", round(r.build.took))
	}
	if err := r.node.ImportImage(ctx, r.build.image.Path); err != nil {
		return fmt.Errorf("%w: import agent image: %v", ErrDemo, err)
	}
	if err := r.node.ImportImage(ctx, r.build.aggregator.Path); err != nil {
		return fmt.Errorf("%w: import aggregator image: %v", ErrDemo, err)
	}
	r.logf("imported into the node's containerd (ctr images import): no registry")
	r.res.Cgpilotctl = filepath.Join(r.o.Dir, "bin", "cgpilotctl")
	return copyFile(r.build.ctl.Path, r.res.Cgpilotctl)
}

// deployAgent writes the kustomize overlay of the test bed's changes and
// applies it with the test bed's kubectl, as a user applies the base.
func (r *run) deployAgent(ctx context.Context) error {
	u, err := url.Parse(r.cp.Config.Host)
	if err != nil {
		return fmt.Errorf("%w: apiserver address %q: %v", ErrDemo, r.cp.Config.Host, err)
	}
	healthPort, err := freePort()
	if err != nil {
		return err
	}
	r.bed = deploy.TestBed{Image: AgentImage, APIHost: u.Hostname(), APIPort: u.Port(), HealthPort: healthPort,
		KubeletDir: r.node.KubeletRootDir(), StateDir: filepath.Join(r.o.Dir, "agent"), SampleInterval: sampleInterval}
	if r.cr.unified {
		// The base mounts the v1 hierarchies' kubepods trees; a v2 node's
		// users add this component, and so does the demo.
		r.bed.Components = []string{deploy.ComponentCgroupV2}
	}
	if r.bed.Aggregator, err = r.aggregatorBed(); err != nil {
		return err
	}
	r.res.Socket = r.bed.Socket()
	r.res.Overlay = filepath.Join(r.o.Dir, "deploy")
	if err := r.bed.WriteOverlay(r.res.Overlay, r.o.RepoRoot); err != nil {
		return fmt.Errorf("%w: %v", ErrDemo, err)
	}
	r.logf("the overlay %s changes only this, for the test bed:", r.res.Overlay)
	for _, n := range r.bed.Notes() {
		r.logf("  - %s", n)
	}
	ta := time.Now()
	out, err := r.kubectl(ctx, "apply", "-k", r.res.Overlay)
	if err != nil {
		return err
	}
	r.logf("kubectl apply -k %s:\n%s", r.res.Overlay, indent(out, "      "))
	if _, err := r.kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/rightsizepolicies.cgpilot.io"); err != nil {
		return err
	}
	if err := WaitAgentReady(ctx, r.cs, 3*time.Minute); err != nil {
		return fmt.Errorf("%w\n%s", err, agentLogTail(r.node.State.Dir, 30))
	}
	r.res.Timings.AgentReady = time.Since(ta)
	r.logf("the DaemonSet controller and the scheduler placed the agent; its pod Ready %v after the apply", round(r.res.Timings.AgentReady))
	return nil
}

// startWorkloads creates the namespace, the policies and every workload at
// once: the web pod's minHistory runs while the CPU pool changes are shown.
func (r *run) startWorkloads(ctx context.Context) error {
	if _, err := r.kubectl(ctx, "create", "namespace", Namespace); err != nil {
		return err
	}
	r.logf("%s: cgpilot.io/cpu-pool=exclusive, 1 CPU; %s: busy loops, 100m request, 200m limit", ExclusivePod, strings.Join(SharedPods, ", "))
	r.poolsCreated = time.Now()
	if err := createPoolPods(ctx, r.cs, true); err != nil {
		return err
	}
	return r.startRightsizing(ctx)
}

// summary prints the timings and how to explore the running cluster.
func (r *run) summary() {
	t := r.res.Timings
	kubectl := filepath.Join(r.o.BinDir, "kubectl")
	every := "1 ms"
	if timeScale > 1 {
		every = "10 ms (under emulation)"
	}
	fmt.Fprintf(r.out, "\n==> timings (cgroup files polled every %s for the pool changes)\n", every)
	r.logf("control plane %v, node %v, images %v (during the cluster start), agent Ready %v after kubectl apply",
		round(t.ControlPlane), round(t.Node), round(t.Images), round(t.AgentReady))
	r.logf("pods created -> pinned %v; release-isolation -> cgroups %v (a watch saw the patch after %v), restore %v, delete -> shared widened %v, re-create -> pinned %v",
		round(t.Pinned), round(t.Release), round(t.ReleaseWatch), round(t.Restore), round(t.Widen), round(t.Repin))
	r.logf("web pod created -> resized in place %v (minHistory %v, step %v); memory hog created -> limit raised %v",
		round(t.ResizeAfter), WebMinHistory, webStep, round(t.OOMRaised))
	r.logf("demo start -> first in-place resize %v; demo up %v", round(t.FirstResize), round(t.Total))
	if d := r.res.Dashboard; d.URL != "" {
		fmt.Fprintf(r.out, "\nThe aggregator's dashboard: %s/ with a token of\n  %s --kubeconfig %s create token cgpilot-dashboard -n %s --audience=cgpilot-aggregator\n",
			d.URL, filepath.Join(r.o.BinDir, "kubectl"), r.res.Kubeconfig, deploy.Namespace)
		if d.Screenshot != "" {
			fmt.Fprintf(r.out, "  (a screenshot: %s)\n", d.Screenshot)
		}
	}
	fmt.Fprintf(r.out, `
The cluster keeps running:
  export KUBECONFIG=%s
  %s get pods -A -o wide
  %s get rightsizepolicies
  %s recs --socket %s     (same --socket for pools, pods, events, explain %s/%s)
  %s annotate pod -n %s %s %s=true
make demo-down to remove it (the agent DaemonSet, processes, mounts, kubepods cgroups, %s)
`, r.res.Kubeconfig, kubectl, kubectl, r.res.Cgpilotctl, r.res.Socket, Namespace, ExclusivePod,
		kubectl, Namespace, ExclusivePod, annoRelease, r.o.Dir)
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
	case err == nil:
	case isNotFound(err):
		return nil
	default:
		return nil // API server down: nothing will re-create the pod
	}
	err = poll(ctx, 60*time.Second, 100*time.Millisecond, func() bool {
		_, err := cs.AppsV1().DaemonSets(agentNS).Get(ctx, agentDS, metav1.GetOptions{})
		return isNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("%w: daemonset %s/%s not deleted within 60s", ErrDemo, agentNS, agentDS)
	}
	return nil
}

// crashLoops is how many restarts of the agent's container in
// CrashLoopBackOff end WaitAgentReady early: the back-off grows to 5
// minutes, so waiting on would only hide the agent's error (the demo's
// caller prints its log).
const crashLoops = 3

// WaitAgentReady waits until the agent DaemonSet's one pod is updated and
// Ready; the error says what the DaemonSet and its pod show. An agent
// container that crash-loops ends the wait at once.
func WaitAgentReady(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) error {
	var last string
	crashing := false
	err := poll(ctx, timeout, 200*time.Millisecond, func() bool {
		pods, err := cs.CoreV1().Pods(agentNS).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, p := range pods.Items {
				for _, c := range p.Status.ContainerStatuses {
					if w := c.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" && c.RestartCount >= crashLoops && strings.HasPrefix(p.Name, agentDS+"-") {
						crashing = true
						return true
					}
				}
			}
		}
		ds, err := cs.AppsV1().DaemonSets(agentNS).Get(ctx, agentDS, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false
		}
		s := ds.Status
		last = fmt.Sprintf("desired %d, scheduled %d, updated %d, ready %d", s.DesiredNumberScheduled, s.CurrentNumberScheduled, s.UpdatedNumberScheduled, s.NumberReady)
		return s.ObservedGeneration >= ds.Generation && s.DesiredNumberScheduled == 1 && s.NumberReady == 1 && s.UpdatedNumberScheduled == 1 && s.NumberAvailable == 1
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
	if crashing {
		return fmt.Errorf("%w: the agent's container crash-loops (%d restarts or more)", ErrDemo, crashLoops)
	}
	return nil
}
