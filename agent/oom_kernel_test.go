//go:build linux

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cgpilot/cgpilot/agent/kube/kubetest"
	"github.com/cgpilot/cgpilot/agent/oomwatch"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/test/cgtest"
	"github.com/cgpilot/cgpilot/test/tier"
)

// The OOM path of the whole agent on real cgroups (v1 on this host, v2 in
// the VM tier): a real process OOM-killed in a kubelet-style container
// cgroup, seen by oomwatch, raised by the agent in the pod and container
// cgroups, asked of the API through pods/resize. The API server is a fake
// clientset here (the VM runs no control plane); the same path against a
// real kubelet is TestNodeOOMBump in test/e2e.

const (
	oomNode     = "oom-node"
	oomLimitMiB = 40
)

type oomBed struct {
	k    *cgtest.KubeletTree
	cs   *fake.Clientset
	dyn  *dynamicfake.FakeDynamicClient
	a    *Agent
	mu   sync.Mutex
	lat  []time.Duration // kill -> limit written, from the agent's hook
	seen []time.Duration // kill -> event read, oomwatch alone (BPF only)
	// owner, when set, is the controller of the pods startPod makes.
	owner *metav1.OwnerReference
}

// newOOMBed runs the agent, with right-sizing on and an InPlace policy for
// every pod, over a kubelet-style tree in a sandbox.
func newOOMBed(t testing.TB, backend string) *oomBed {
	return newBed(t, backend, bedOptions{})
}

// bedOptions change the bed: the policy's spec (nil: InPlace, oomFactor
// 0.2), the Node's allocatable, and the config and fake API before the
// agent starts.
type bedOptions struct {
	policy      map[string]any
	allocatable corev1.ResourceList
	// noResize: the API server serves no pods/resize (the agent writes
	// the cgroups itself).
	noResize bool
	setup    func(cfg *Config, cs *fake.Clientset)
	// prepare runs on the agent before it runs.
	prepare func(*Agent)
}

func newBed(t testing.TB, backend string, o bedOptions) *oomBed {
	t.Helper()
	tier.Kernel(t)
	k := cgtest.NewKubeletTree(t, "cgroupfs")
	cs := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: oomNode}, Status: corev1.NodeStatus{Allocatable: o.allocatable}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
	)
	if o.policy == nil {
		// As many bumps as the loop below may need (the hog needs more
		// under -race): the default rate is TestOOMKillLoopCeiling's.
		o.policy = map[string]any{"mode": "InPlace", "oomFactor": 0.2, "maxOOMBumpsPerDay": int64(8)}
	}
	cs.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "pods", Namespaced: true, Kind: "Pod"}, {Name: "pods/resize", Namespaced: true, Kind: "Pod"}}},
		{GroupVersion: v1alpha1.SchemeGroupVersion.String(), APIResources: []metav1.APIResource{{Name: v1alpha1.RightsizePolicies.Resource, Kind: "RightsizePolicy"}}},
	}
	if o.noResize {
		v1 := cs.Discovery().(*fakediscovery.FakeDiscovery).Resources[0]
		v1.APIResources = v1.APIResources[:1]
	}

	pol := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "RightsizePolicy",
		"metadata": map[string]any{"name": "oom", "generation": int64(1)},
		"spec":     o.policy,
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1alpha1.RightsizePolicies: "RightsizePolicyList"}, pol)

	cfg := DefaultConfig()
	cfg.NodeName = oomNode
	cfg.CgroupParent = "/" + k.KubepodsName
	cfg.CPUs = k.CPUs.String()
	cfg.CheckpointPath = filepath.Join(t.TempDir(), "cpu_pools.checkpoint")
	cfg.KubeletCPUManagerState = ""
	cfg.HealthAddr = ""
	cfg.SocketPath = ""
	cfg.SweepInterval = metav1.Duration{Duration: time.Second}
	cfg.Rightsizing.StateDir = t.TempDir()
	cfg.Rightsizing.SampleInterval = metav1.Duration{Duration: time.Second}
	cfg.Rightsizing.OOMWatch = backend
	if o.setup != nil {
		o.setup(&cfg, cs)
	}

	ctx, cancel := context.WithCancel(context.Background())
	a, err := newAgent(ctx, cfg, kubetest.New(cs, dyn), nil,
		k.SB.AsRoots(), testr.NewWithInterface(t, testr.Options{}))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if o.prepare != nil {
		o.prepare(a)
	}
	if a.c.rs == nil || a.c.rs.OOMWatcher() == nil {
		cancel()
		t.Fatal("right-sizing or its OOM watcher is off")
	}
	b := &oomBed{k: k, cs: cs, dyn: dyn, a: a}
	a.c.rs.OnOOMBump(func(ev oomwatch.Event, d time.Duration) {
		b.mu.Lock()
		b.lat = append(b.lat, d)
		if ev.Kernel > 0 {
			b.seen = append(b.seen, ev.Seen-ev.Kernel)
		}
		b.mu.Unlock()
	})
	t.Logf("OOM watcher: %s (%s)", a.c.rs.OOMWatcher().Backend(), a.c.rs.OOMWatcher().Reason())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	return b
}

// memFile is the memory limit file of rel in the sandbox.
func (b *oomBed) memFile(rel string) string {
	name := "memory.limit_in_bytes"
	if b.k.SB.Unified {
		name = "memory.max"
	}
	return filepath.Join(b.k.SB.Path(b.k.MemoryKey, rel), name)
}

func (b *oomBed) limit(t testing.TB, rel string) int64 {
	t.Helper()
	raw, err := os.ReadFile(b.memFile(rel))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %q", b.memFile(rel), raw)
	}
	return v
}

func (b *oomBed) setLimit(t testing.TB, rel string, v int64) {
	t.Helper()
	if err := os.WriteFile(b.memFile(rel), []byte(strconv.FormatInt(v, 10)), 0); err != nil {
		t.Fatal(err)
	}
	if b.k.SB.Unified {
		if f := filepath.Join(b.k.SB.Path(b.k.MemoryKey, rel), "memory.swap.max"); fileExists(f) {
			if err := os.WriteFile(f, []byte("0"), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// pod plays the kubelet: a running Burstable pod with one container "app"
// (request 20Mi, limit 40Mi) in the API and its cgroups with that limit
// at pod and container level; it waits until the agent watches it.
func (b *oomBed) pod(t testing.TB, name string) (uid types.UID, podRel, ctrRel string) {
	t.Helper()
	uid, podRel, ctrRel = b.startPod(t, name)
	mem := b.k.SB.Path(b.k.MemoryKey, ctrRel)
	waitFor(t, "the agent watches "+name+"'s memory cgroup", 30*time.Second, func() bool {
		u, ctr, ok := b.a.c.rs.Watches(mem)
		return ok && u == string(uid) && ctr == "app"
	})
	return uid, podRel, ctrRel
}

// startPod is pod without waiting for the agent.
func (b *oomBed) startPod(t testing.TB, name string) (uid types.UID, podRel, ctrRel string) {
	t.Helper()
	uid = bedUID(name)
	id := fmt.Sprintf("%064x", []byte(name))[:64]
	lim := resource.MustParse(fmt.Sprintf("%dMi", oomLimitMiB))
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: uid, CreationTimestamp: metav1.Now()},
		Spec: corev1.PodSpec{NodeName: oomNode, Containers: []corev1.Container{{Name: "app", Image: "busybox",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("20Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: lim},
			}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBurstable,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: "containerd://" + id, Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}},
	}
	if b.owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*b.owner}
	}
	podRel, ctrs := b.k.SB.MkdirPod("cgroupfs", "Burstable", string(uid), id)
	ctrRel = ctrs[0]
	b.setLimit(t, podRel, oomLimitMiB<<20)
	b.setLimit(t, ctrRel, oomLimitMiB<<20)
	if _, err := b.cs.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return uid, podRel, ctrRel
}

// bedUID is the UID startPod gives pod name.
func bedUID(name string) types.UID {
	h := fnv.New64a()
	h.Write([]byte(name))
	return types.UID(fmt.Sprintf("0e5c1f3a-7d2b-4c8e-9f1a-%012x", h.Sum64()&(1<<48-1)))
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type resizeBody struct {
	Spec struct {
		Containers []corev1.Container `json:"containers"`
	} `json:"spec"`
}

// resizeBodies are the pods/resize patches asked for pod name, in order.
func (b *oomBed) resizeBodies(t testing.TB, name string) []resizeBody {
	t.Helper()
	var out []resizeBody
	for _, act := range b.cs.Actions() {
		pa, ok := act.(k8stesting.PatchAction)
		if !ok || act.GetSubresource() != "resize" || pa.GetName() != name {
			continue
		}
		var body resizeBody
		if err := json.Unmarshal(pa.GetPatch(), &body); err != nil {
			t.Fatalf("resize patch %s: %v", pa.GetPatch(), err)
		}
		out = append(out, body)
	}
	return out
}

// resizePatches are the memory limits the agent asked of pods/resize for
// pod name, in order.
func (b *oomBed) resizePatches(t testing.TB, name string) []int64 {
	t.Helper()
	var out []int64
	for _, body := range b.resizeBodies(t, name) {
		for _, c := range body.Spec.Containers {
			if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok && c.Name == "app" {
				out = append(out, q.Value())
			}
		}
	}
	return out
}

func (b *oomBed) eventReasons(name string) []string {
	var out []string
	for _, e := range b.a.c.events.Recent("default", name) {
		out = append(out, e.Reason)
	}
	return out
}

// TestOOMLoopStops: a container that needs 64 MiB under a 40 MiB limit is
// OOM-killed; playing the kubelet, the test restarts it in the same cgroup
// after each kill. The agent raises the container's limit (and the pod's
// by as much) at each kill and asks pods/resize for the same value, until
// the container runs. Both ways of seeing a kill: eBPF (where the kernel
// allows) and the cgroup's own counters (v1 oom_control, v2 memory.events).
func TestOOMLoopStops(t *testing.T) {
	for _, backend := range []string{"auto", "counters"} {
		t.Run(backend, func(t *testing.T) { testOOMLoopStops(t, backend) })
	}
}

func testOOMLoopStops(t *testing.T, backend string) {
	b := newOOMBed(t, backend)
	_, podRel, ctrRel := b.pod(t, "hungry")
	const needMiB = 64
	var kills int
	for attempt := 0; ; attempt++ {
		if attempt == 8 {
			t.Fatalf("still OOM-killed after %d restarts; limit %d", attempt, b.limit(t, ctrRel))
		}
		before, podBefore := b.limit(t, ctrRel), b.limit(t, podRel)
		p := b.k.SB.Start(ctrRel, cgtest.Hog, needMiB)
		exited, _ := p.Wait(5 * time.Second)
		if !exited {
			t.Logf("attempt %d: runs with %d MiB under a %d MiB limit", attempt, needMiB, before>>20)
			break
		}
		if !p.Signaled(syscall.SIGKILL) {
			t.Fatalf("attempt %d: the hog exited without being killed", attempt)
		}
		kills++
		waitFor(t, "the raised limit", 10*time.Second, func() bool { return b.limit(t, ctrRel) > before })
		after, podAfter := b.limit(t, ctrRel), b.limit(t, podRel)
		t.Logf("attempt %d: killed at %d MiB; container %d→%d MiB, pod %d→%d MiB", attempt, before>>20, before>>20, after>>20, podBefore>>20, podAfter>>20)
		if podAfter-podBefore != after-before {
			t.Errorf("pod limit raised by %d, container by %d: want the same", podAfter-podBefore, after-before)
		}
		if after%(1<<20) != 0 {
			t.Errorf("container limit %d not whole MiB", after)
		}
		waitFor(t, "the resize request", 10*time.Second, func() bool {
			return slices.Contains(b.resizePatches(t, "hungry"), after)
		})
	}
	if kills == 0 {
		t.Fatal("never OOM-killed: the test proves nothing")
	}
	if got := b.limit(t, ctrRel); got < needMiB<<20 {
		t.Errorf("runs at a %d MiB limit below its %d MiB need?", got>>20, needMiB)
	}
	reasons := b.eventReasons("hungry")
	for _, want := range []string{"OOMKilled", "MemoryRaised"} {
		if n := countOf(reasons, want); n != kills {
			t.Errorf("%d %s events for %d kills (events %v)", n, want, kills, reasons)
		}
	}
	if slices.Contains(reasons, "MemoryRaiseFailed") {
		t.Errorf("a raise failed: %v", reasons)
	}
	b.mu.Lock()
	t.Logf("%d kills, kill→raised latencies %v (kill→event %v)", kills, b.lat, b.seen)
	if len(b.lat) != kills {
		t.Errorf("%d latencies recorded for %d kills", len(b.lat), kills)
	}
	b.mu.Unlock()
}

func countOf(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// BenchmarkOOMKillToRaisedLimit measures, over b.N real OOM kills (run it
// with -benchtime=20x or more), the time from the kernel's kill to the
// raised limit written in the container's cgroup. The baseline in the same
// run is oomwatch's own kill-to-event time: the ratio is what the agent's
// OOM path adds. With the counters backend (no kernel timestamp) the
// latency counts from the event being read, and no ratio is reported.
func BenchmarkOOMKillToRaisedLimit(b *testing.B) {
	bed := newOOMBed(b, "auto")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		name := fmt.Sprintf("oom-%d", i)
		_, _, ctrRel := bed.pod(b, name)
		b.StartTimer()
		p := bed.k.SB.Start(ctrRel, cgtest.Hog, 512)
		if exited, _ := p.Wait(30 * time.Second); !exited {
			b.Fatalf("kill %d: the hog survived a %d MiB limit", i, oomLimitMiB)
		}
		waitFor(b, fmt.Sprintf("kill %d: the raised limit", i), 10*time.Second, func() bool {
			bed.mu.Lock()
			defer bed.mu.Unlock()
			return len(bed.lat) > i
		})
	}
	b.StopTimer()
	bed.mu.Lock()
	defer bed.mu.Unlock()
	p50, p99 := quantile(bed.lat, 0.5), quantile(bed.lat, 0.99)
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(len(bed.lat)), "kills")
	if len(bed.seen) == len(bed.lat) && len(bed.seen) > 0 {
		e99 := quantile(bed.seen, 0.99)
		b.ReportMetric(float64(e99.Microseconds())/1000, "event-p99-ms")
		b.ReportMetric(float64(p99)/float64(max(e99, time.Microsecond)), "p99/event-p99")
	}
	b.Logf("backend %s: %d kills, kill→raised p50 %v p99 %v (goal p99 ≤ 50ms)", bed.a.c.rs.OOMWatcher().Backend(), len(bed.lat), p50, p99)
}

// quantile is the q-quantile of ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
