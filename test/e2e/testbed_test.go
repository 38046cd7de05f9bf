//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/images"
	"github.com/cgpilot/cgpilot/test/tier"
)

// TestNodeLogsExecAndClusterDNS: through the API server (client-go, as
// kubectl does), a real pod's log is read and commands run in it over both
// streaming protocols (WebSocket and SPDY) with stdin, stdout and the exit
// code; the pod has the kubelet's cluster resolv.conf, and the kubelet
// records its events but no MissingClusterDNS warning.
func TestNodeLogsExecAndClusterDNS(t *testing.T) {
	bins := tier.Node(t)
	cp := harness.MustStart(t, bins, harness.Options{})
	n := harness.MustStartNode(t, cp, harness.NodeOptions{Name: "cgpilot-exec-node"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := cp.Client

	node, err := cs.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ip := nodeAddress(node, corev1.NodeInternalIP); ip != n.NodeIP() {
		t.Fatalf("node InternalIP %q, want the harness node IP %s (addresses %v)", ip, n.NodeIP(), node.Status.Addresses)
	}

	pod := testPod("talk", n.Name())
	pod.Spec.Containers[0].Image = images.BusyboxRef
	pod.Spec.Containers[0].Command = []string{"sh", "-c", "echo hello-from-the-log; exec sleep 3600"}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod talk Ready", 2*time.Minute, func() bool { return podReady(ctx, cp, "default", "talk") })

	// Ready means started, not that the shell has echoed yet (a CI
	// rehearsal read an empty log right after Ready).
	waitUntil(t, "GetLogs gives the container's first line", 30*time.Second, func() (bool, string) {
		logs, err := cs.CoreV1().Pods("default").GetLogs("talk", &corev1.PodLogOptions{Container: "c"}).DoRaw(ctx)
		return err == nil && strings.Contains(string(logs), "hello-from-the-log"), fmt.Sprintf("%q, %v", logs, err)
	})

	for _, proto := range []string{"websocket", "spdy"} {
		t.Run(proto, func(t *testing.T) {
			out, err := podExec(ctx, cp.Config, proto, "default", "talk", strings.NewReader("ping\n"), "sh", "-c", "read x; echo got-$x; cat /etc/resolv.conf")
			if err != nil {
				t.Fatalf("exec: %v", err)
			}
			if !strings.HasPrefix(out, "got-ping\n") {
				t.Errorf("exec with stdin: %q, want got-ping first", out)
			}
			// The kubelet's clusterDNS and clusterDomain reached the pod.
			for _, want := range []string{"nameserver 10.0.0.10", "search default.svc.cluster.local svc.cluster.local cluster.local"} {
				if !strings.Contains(out, want) {
					t.Errorf("pod resolv.conf lacks %q:\n%s", want, out)
				}
			}
			_, err = podExec(ctx, cp.Config, proto, "default", "talk", nil, "sh", "-c", "exit 3")
			var ee utilexec.ExitError
			if !errors.As(err, &ee) || ee.ExitStatus() != 3 {
				t.Errorf("exec of exit 3: %v, want exit status 3", err)
			}
		})
	}

	// The kubelet's events for the pod are recorded (so the check below
	// has teeth); none of them is MissingClusterDNS.
	var events []corev1.Event
	waitFor(t, "the kubelet's Started event of talk", time.Minute, func() bool {
		l, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=talk"})
		if err != nil {
			return false
		}
		events = l.Items
		for _, e := range events {
			if e.Reason == "Started" && e.Source.Component == "kubelet" {
				return true
			}
		}
		return false
	})
	for _, e := range events {
		t.Logf("event %s %s: %s", e.Type, e.Reason, e.Message)
		if e.Reason == "MissingClusterDNS" || e.Type == corev1.EventTypeWarning {
			t.Errorf("warning event for a plain pod: %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
}

func nodeAddress(n *corev1.Node, typ corev1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == typ {
			return a.Address
		}
	}
	return ""
}

func podReady(ctx context.Context, cp *harness.ControlPlane, ns, name string) bool {
	p, err := cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// podExec runs a command in container c of a pod through the API server's
// exec subresource over proto ("websocket" or "spdy") and returns its
// stdout (stderr is appended).
func podExec(ctx context.Context, cfg *rest.Config, proto, ns, pod string, stdin io.Reader, cmd ...string) (string, error) {
	cs := restClient(cfg)
	req := cs.Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "c", Command: cmd, Stdin: stdin != nil, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	var exec remotecommand.Executor
	var err error
	if proto == "websocket" {
		exec, err = remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	} else {
		exec, err = remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	}
	if err != nil {
		return "", err
	}
	// Two buffers: the executor copies each stream in its own goroutine.
	var stdout, stderr bytes.Buffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &stdout, Stderr: &stderr})
	return stdout.String() + stderr.String(), err
}

func restClient(cfg *rest.Config) *rest.RESTClient {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		panic(err) // a static config: cannot fail
	}
	return rc
}

// cpuManagerState is the kubelet's cpu_manager_state checkpoint.
type cpuManagerState struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries"`
}

func readCPUManagerState(t *testing.T, file string) cpuManagerState {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var s cpuManagerState
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v: %s", file, err, b)
	}
	return s
}

// TestNodeStaticCPUManager starts a node with the kubelet's default CPU
// manager policy, restarts its kubelet with the static policy (over the
// old policy's checkpoint, which the harness must clear), and checks that
// a Guaranteed pod with 1 CPU gets an exclusive, non-reserved CPU in the
// kubelet's checkpoint, its container cpuset and its process's affinity,
// while another pod runs on the rest (the shared pool).
func TestNodeStaticCPUManager(t *testing.T) {
	bins := tier.Node(t)
	cp := harness.MustStart(t, bins, harness.Options{})
	n := harness.MustStartNode(t, cp, harness.NodeOptions{Name: "cgpilot-static-node"})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cs := cp.Client

	if s := readCPUManagerState(t, n.CPUManagerStateFile()); s.PolicyName != "none" {
		t.Fatalf("checkpoint policy %q before the switch, want none", s.PolicyName)
	}
	restart := time.Now()
	if err := n.RestartKubelet(ctx, func(o *harness.NodeOptions) { o.StaticCPUManager = true }); err != nil {
		t.Fatalf("restart the kubelet with the static policy: %v", err)
	}
	t.Logf("timing: kubelet restart with the static policy, to Ready: %v", time.Since(restart).Round(time.Millisecond))
	online := onlineCPUs(t)
	reserved := cpuset.New(0)
	st := readCPUManagerState(t, n.CPUManagerStateFile())
	if st.PolicyName != "static" || st.DefaultCPUSet != online.String() {
		t.Fatalf("checkpoint after the switch: %+v, want policy static with every CPU (%s) shared", st, online)
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := node.Status.Allocatable.Cpu().Value(), int64(online.Size()-reserved.Size()); got != want {
		t.Errorf("allocatable cpu %d, want %d (reservedSystemCPUs 0 taken out)", got, want)
	}

	excl := testPod("excl", n.Name())
	excl.Spec.Containers[0].Image = images.BusyboxRef
	one := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("32Mi")}
	excl.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: one, Limits: one}
	excl.Spec.Containers[0].ResizePolicy = nil
	// The other pod requests no CPU: on a 2-CPU host the exclusive pod
	// takes all of the node's allocatable CPU.
	shared := testPod("shared", n.Name())
	shared.Spec.Containers[0].Image = images.BusyboxRef
	shared.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")}}
	shared.Spec.Containers[0].ResizePolicy = nil
	pods := map[string]*corev1.Pod{}
	for _, p := range []*corev1.Pod{excl, shared} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "pod "+p.Name+" running", 2*time.Minute, func() bool {
			got, err := cs.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil || got.Status.Phase != corev1.PodRunning || len(got.Status.ContainerStatuses) == 0 || got.Status.ContainerStatuses[0].ContainerID == "" {
				return false
			}
			pods[p.Name] = got
			return true
		})
	}
	if q := pods["excl"].Status.QOSClass; q != corev1.PodQOSGuaranteed {
		t.Fatalf("excl is %s, want Guaranteed", q)
	}

	st = readCPUManagerState(t, n.CPUManagerStateFile())
	mine, err := cpuset.Parse(st.Entries[string(pods["excl"].UID)]["c"])
	if err != nil || mine.Size() != 1 || !mine.Intersection(reserved).IsEmpty() {
		t.Fatalf("checkpoint entry of excl: %q (%v), want one CPU outside reserved %s; state %+v", st.Entries[string(pods["excl"].UID)]["c"], err, reserved, st)
	}
	def, _ := cpuset.Parse(st.DefaultCPUSet)
	if !def.Equals(online.Difference(mine)) {
		t.Errorf("shared pool %s, want %s minus %s", def, online, mine)
	}
	if _, ok := st.Entries[string(pods["shared"].UID)]; ok {
		t.Errorf("the shared pod got an exclusive entry: %+v", st.Entries)
	}
	t.Logf("static policy: excl on %s, shared pool %s", mine, def)

	for name, want := range map[string]cpuset.CPUSet{"excl": mine, "shared": def} {
		p := pods[name]
		cid := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
		dir := containerCgroup(t, n, string(p.UID), cid, "cpuset.cpus")
		got, err := cpuset.Parse(readTrim(t, filepath.Join(dir, "cpuset.cpus")))
		if err != nil || !got.Equals(want) {
			t.Errorf("%s: %s/cpuset.cpus = %s (%v), want %s", name, dir, got, err, want)
		}
		pids := readPids(t, filepath.Join(dir, "cgroup.procs"))
		if len(pids) == 0 {
			t.Fatalf("%s: no process in %s", name, dir)
		}
		if aff := cpusAllowed(t, pids[0]); !aff.Equals(want) {
			t.Errorf("%s: its process may run on %s, want %s", name, aff, want)
		}
	}
}

// onlineCPUs is the host's online CPU set.
func onlineCPUs(t *testing.T) cpuset.CPUSet {
	t.Helper()
	s, err := cpuset.Parse(readTrim(t, "/sys/devices/system/cpu/online"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// cpusAllowed is a process's Cpus_allowed_list.
func cpusAllowed(t *testing.T, pid int) cpuset.CPUSet {
	t.Helper()
	for _, l := range strings.Split(readTrim(t, filepath.Join("/proc", strconv.Itoa(pid), "status")), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			s, err := cpuset.Parse(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	t.Fatalf("no Cpus_allowed_list for pid %d", pid)
	return cpuset.New()
}

// containerCgroup finds a container's cgroup directory holding file, in
// whichever QoS level and hierarchy the kubelet put it.
func containerCgroup(t *testing.T, n *harness.Node, podUID, cid, file string) string {
	t.Helper()
	for _, r := range n.KubepodsRoots() {
		for _, qos := range []string{"", "burstable", "besteffort"} {
			d := filepath.Join(r, qos, "pod"+podUID, cid)
			if _, err := os.Stat(filepath.Join(d, file)); err == nil {
				return d
			}
		}
	}
	t.Fatalf("no cgroup with %s for container %s of pod %s under %v", file, cid, podUID, n.KubepodsRoots())
	return ""
}

// TestControlPlaneOutageAndRelist forces a 410 Gone on a real informer
// and stops and restarts the API server under it. With the watch cache off
// (etcd serves watches) and etcd compacted past the informer's
// resourceVersion, its next watch, resumed from there when the server ends
// the previous one, gets 410 and the informer relists. Then the API server
// is stopped (requests are refused) and started again on the same port,
// and the informer sees what is written afterwards.
func TestControlPlaneOutageAndRelist(t *testing.T) {
	bins := tier.E2E(t)
	cp := harness.MustStart(t, bins, harness.Options{DisableWatchCache: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := cp.Client
	const ns = "relist"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := func(ns, name string) {
		t.Helper()
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create configmap %s/%s: %v", ns, name, err)
		}
	}
	cm(ns, "before")

	// A (re)list is a LIST, or, as client-go's reflector does by default
	// now (WatchListClient), a watch that streams the initial state. A 410
	// comes as an error event in a watch the server accepted. The server
	// ends each watch after 3 s (an informer's are 5-10 min), so that the
	// informer resumes from its resourceVersion soon after the compaction.
	var lists, gone atomic.Int32
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			lists.Add(1)
			return cs.CoreV1().ConfigMaps(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				lists.Add(1)
			}
			o.TimeoutSeconds = new(int64)
			*o.TimeoutSeconds = 3
			w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, o)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				if st, ok := e.Object.(*metav1.Status); ok && e.Type == watch.Error && st.Code == http.StatusGone {
					t.Logf("watch from resourceVersion %s: %s", o.ResourceVersion, st.Message)
					gone.Add(1)
				}
				return e, true
			}), nil
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	synced := inf.LastSyncResourceVersion()
	if n := lists.Load(); n != 1 || gone.Load() != 0 {
		t.Fatalf("%d lists and %d 410s to sync, want 1 and 0", n, gone.Load())
	}

	// Move etcd's revision past the informer's (elsewhere: its own watch
	// sees nothing) and compact up to it.
	for _, name := range []string{"noise-1", "noise-2", "noise-3"} {
		cm("default", name)
	}
	rev, err := cp.CompactEtcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := cp.EtcdRevision(ctx); err != nil || again != rev {
		t.Errorf("etcd revision %d (%v) right after compacting at %d", again, err, rev)
	}
	t.Logf("informer at resourceVersion %s; etcd compacted at revision %d", synced, rev)
	waitFor(t, "a relist after 410 Gone", time.Minute, func() bool { return gone.Load() >= 1 && lists.Load() >= 2 })
	if _, ok, _ := inf.GetStore().GetByKey(ns + "/before"); !ok {
		t.Error("the relisted informer lost the configmap written before")
	}

	stop := time.Now()
	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: API server stopped in %v", time.Since(stop).Round(time.Millisecond))
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("a request while the API server is stopped: %v, want connection refused", err)
	}
	time.Sleep(3 * time.Second) // the informer retries meanwhile
	start := time.Now()
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("timing: API server restarted, to ready, in %v", time.Since(start).Round(time.Millisecond))
	if err := cp.StartAPIServer(ctx); err == nil {
		t.Error("StartAPIServer of a running API server succeeded")
	}
	cm(ns, "after")
	waitFor(t, "the informer to see a configmap written after the restart", time.Minute, func() bool {
		_, ok, _ := inf.GetStore().GetByKey(ns + "/after")
		return ok
	})
}

// TestControlPlaneExtraFlagsAndFakeNodes starts a control plane with an
// extra API server flag, a feature gate and faster node health checks in
// the controller manager, and checks each took effect: the node-port range,
// the gate in the API server's metrics, and a fake node without heartbeat
// turning unready while a heartbeating one stays Ready.
func TestControlPlaneExtraFlagsAndFakeNodes(t *testing.T) {
	bins := tier.E2E(t)
	cp := harness.MustStart(t, bins, harness.Options{
		Controllers:  true,
		FeatureGates: map[string]bool{"ContainerStopSignals": true},
		ExtraFlags: map[string][]string{
			"kube-apiserver":          {"--service-node-port-range=30000-30010"},
			"kube-controller-manager": {"--node-monitor-grace-period=10s", "--node-monitor-period=2s"},
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := cp.Client

	svc := func(name string, port int32) error {
		_, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"a": "b"},
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), NodePort: port}}},
		}, metav1.CreateOptions{})
		return err
	}
	if err := svc("inside", 30005); err != nil {
		t.Errorf("node port 30005 inside the extra flag's range: %v", err)
	}
	if err := svc("outside", 30100); err == nil || !apierrors.IsInvalid(err) {
		t.Errorf("node port 30100 outside 30000-30010: %v, want invalid (the default range would accept it)", err)
	}

	metrics, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(metrics), `kubernetes_feature_enabled{name="ContainerStopSignals",stage="ALPHA"} 1`) {
		t.Error("the API server does not report ContainerStopSignals enabled")
	}

	hbCtx, stopBeat := context.WithCancel(ctx)
	defer stopBeat()
	if _, err := cp.CreateFakeNode(hbCtx, harness.FakeNode{Name: "beating", CPU: "8", Labels: map[string]string{"zone": "a"}, Heartbeat: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	silent, err := cp.CreateFakeNode(ctx, harness.FakeNode{Name: "silent"})
	if err != nil {
		t.Fatal(err)
	}
	if silent.Status.Allocatable.Cpu().Value() != 4 || readyStatus(silent) != corev1.ConditionTrue {
		t.Errorf("fake node: allocatable %v, ready %s; want the default 4 CPUs and Ready", silent.Status.Allocatable, readyStatus(silent))
	}
	waitFor(t, "the node lifecycle controller to mark the silent node's Ready Unknown", 90*time.Second, func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, "silent", metav1.GetOptions{})
		return err == nil && readyStatus(n) == corev1.ConditionUnknown
	})
	beating, err := cs.CoreV1().Nodes().Get(ctx, "beating", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if readyStatus(beating) != corev1.ConditionTrue || beating.Labels["zone"] != "a" || beating.Status.Capacity.Cpu().Value() != 8 {
		t.Errorf("heartbeating node: ready %s, labels %v, capacity %v; want Ready, zone=a, 8 CPUs", readyStatus(beating), beating.Labels, beating.Status.Capacity)
	}
	for _, taint := range beating.Spec.Taints {
		if taint.Key == corev1.TaintNodeUnreachable {
			t.Errorf("heartbeating node tainted %v", taint)
		}
	}
}

func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}
