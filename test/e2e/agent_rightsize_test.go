//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cgpilot/cgpilot/agent"
	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/test/deploy"
	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/images"
	"github.com/cgpilot/cgpilot/test/tier"
)

// Right-sizing on a real kubelet + containerd node (node tier): the agent
// runs in this process with short windows (1 s samples, steps of 20 s, 30 s
// of history), against RightsizePolicies on the real API server.

type rsBed struct {
	cp   *harness.ControlPlane
	cs   kubernetes.Interface
	dyn  dynamic.ResourceInterface
	node *harness.Node
	na   nodeAgent
}

func startRightsizeNode(t testing.TB, tweaks ...func(*agent.Config)) *rsBed {
	t.Helper()
	bins := tier.Node(t)
	cp := harness.MustStart(t, bins, harness.Options{Controllers: true})
	n := harness.MustStartNode(t, cp, harness.NodeOptions{})
	return startRightsizeAgent(t, cp, n, tweaks...)
}

// startRightsizeAgent installs the RightsizePolicy CRD and runs the agent
// for node n with right-sizing's short windows.
func startRightsizeAgent(t testing.TB, cp *harness.ControlPlane, n *harness.Node, tweaks ...func(*agent.Config)) *rsBed {
	t.Helper()
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy/crds/cgpilot.io_rightsizepolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd, err := deploy.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := deploy.Apply(ctx, cp.Config, crd, deploy.ApplyOptions{FieldManager: "cgpilot-test"}); err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	na := startAgentOn(t, cp, n, func(cfg *agent.Config) {
		cfg.SweepInterval = metav1.Duration{Duration: 2 * time.Second}
		cfg.Rightsizing.SampleInterval = metav1.Duration{Duration: time.Second}
		for _, f := range tweaks {
			f(cfg)
		}
	})
	return &rsBed{cp: cp, cs: cp.Client, dyn: dc.Resource(v1alpha1.SchemeGroupVersion.WithResource("rightsizepolicies")), node: n, na: na}
}

// policy creates a RightsizePolicy from its spec in YAML-ish JSON.
func (b *rsBed) policy(t testing.TB, name string, spec map[string]any) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "RightsizePolicy",
		"metadata": map[string]any{"name": name}, "spec": spec}}
	if _, err := b.dyn.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("policy %s: %v", name, err)
	}
}

func (b *rsBed) pod(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	p, err := b.cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// recommendation is the pod's cgpilot.io/recommendation annotation.
func recommendationOf(p *corev1.Pod) local.Recommendation {
	var r local.Recommendation
	_ = json.Unmarshal([]byte(p.Annotations[v1alpha1.AnnotationRecommendation]), &r)
	return r
}

func busyboxPod(name string, labels map[string]string, cmd string, req, lim corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: new(bool), TerminationGracePeriodSeconds: new(int64), DNSPolicy: corev1.DNSDefault,
			Containers: []corev1.Container{{Name: "app", Image: images.BusyboxRef, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", cmd}, Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}}},
	}
}

func rl(cpu, mem string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
}

// containerCgroup is the pod's first container's cgroup path.
func (b *rsBed) containerCgroup(t testing.TB, p *corev1.Pod) (string, bool) {
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
		return "", false
	}
	path, err := b.na.kp.ContainerPath(string(p.UID), cgroup.QoS(p.Status.QOSClass), p.Status.ContainerStatuses[0].ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	return path, true
}

func milli(l corev1.ResourceList, r corev1.ResourceName) int64 {
	q := l[r]
	if r == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// TestNodeRightsizeInPlace: an over-provisioned workload under an InPlace
// policy has its requests lowered through pods/resize with no restart, and
// its cgroups follow; a Guaranteed pod stays Guaranteed; a DryRun policy
// writes the annotation only; a pod matched by two policies and a paused
// policy change nothing; an invalid policy says so in its status.
func TestNodeRightsizeInPlace(t *testing.T) {
	b := startRightsizeNode(t)
	ctx := context.Background()
	short := map[string]any{"step": "20s", "minHistory": "30s"}
	with := func(extra map[string]any) map[string]any {
		m := map[string]any{}
		for k, v := range short {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	sel := func(app string) map[string]any { return map[string]any{"matchLabels": map[string]any{"app": app}} }
	b.policy(t, "web", with(map[string]any{"mode": "InPlace", "podSelector": sel("web")}))
	b.policy(t, "dry", with(map[string]any{"mode": "DryRun", "podSelector": sel("dry")}))
	b.policy(t, "both-a", with(map[string]any{"mode": "InPlace", "podSelector": sel("both")}))
	b.policy(t, "both-b", with(map[string]any{"mode": "InPlace", "podSelector": sel("both")}))
	b.policy(t, "paused", with(map[string]any{"mode": "InPlace", "podSelector": sel("paused"), "pausedUntil": time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)}))
	b.policy(t, "bad-window", with(map[string]any{"mode": "InPlace", "podSelector": sel("nothing"),
		"avoidWindows": []any{map[string]any{"schedule": "61 * * * *", "duration": "1h"}}}))

	// Every update of the workload's pods, in order: the agent must send
	// pods/resize before it writes the change into the annotation (a pod
	// update just before the resize held it back in the kubelet).
	type update struct {
		pod, state string
		cpu        int64
	}
	var (
		updMu   sync.Mutex
		updates []update
	)
	w, err := b.cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && strings.HasPrefix(p.Name, "web-") {
				updMu.Lock()
				updates = append(updates, update{p.Name, recommendationOf(p).State, milli(p.Spec.Containers[0].Resources.Requests, corev1.ResourceCPU)})
				updMu.Unlock()
			}
		}
	}()

	// Five pods on a 2-CPU node: their requests must fit, or the kubelet
	// refuses one (OutOfcpu).
	over := rl("300m", "256Mi")
	overLim := rl("600m", "512Mi")
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: busyboxPod("", nil, "exec sleep 3600", over, overLim).Spec}}}
	if _, err := b.cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	guaranteed := rl("200m", "192Mi")
	for _, p := range []*corev1.Pod{
		busyboxPod("guaranteed", map[string]string{"app": "web"}, "exec sleep 3600", guaranteed, guaranteed),
		busyboxPod("dry", map[string]string{"app": "dry"}, "exec sleep 3600", over, overLim),
		busyboxPod("both", map[string]string{"app": "both"}, "exec sleep 3600", over, overLim),
		busyboxPod("paused", map[string]string{"app": "paused"}, "exec sleep 3600", over, overLim),
	} {
		p.Spec.NodeName = b.node.Name()
		if _, err := b.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	webPod := func() *corev1.Pod {
		pods, err := b.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web,!nope"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range pods.Items {
			if strings.HasPrefix(pods.Items[i].Name, "web-") {
				return &pods.Items[i]
			}
		}
		return nil
	}
	// The over-provisioned workload comes down in place.
	var web *corev1.Pod
	within(t, 4*time.Minute, "the web pod's requests lowered through pods/resize and applied", func() (bool, string) {
		web = webPod()
		if web == nil {
			return false, "no web pod yet"
		}
		c := web.Spec.Containers[0].Resources
		rec := recommendationOf(web)
		recs, _ := local.NewClient(b.na.cfg.SocketPath).Raw(context.Background(), local.PathRecs, nil)
		return milli(c.Requests, corev1.ResourceCPU) < 300 && milli(c.Requests, corev1.ResourceMemory) < 256<<20 && rec.State == "Applied",
			fmt.Sprintf("requests %v, annotation %s: %s; agent: %s", c.Requests, rec.State, rec.Reason, recs)
	})
	st := web.Status.ContainerStatuses[0]
	if st.RestartCount != 0 {
		t.Fatalf("web restarted %d times", st.RestartCount)
	}
	w.Stop()
	updMu.Lock()
	for i, u := range updates {
		if u.pod != web.Name {
			continue
		}
		if u.cpu < 300 {
			t.Logf("web: %d updates before pods/resize, none announcing it", i)
			break
		}
		if u.state == "Resize" {
			t.Errorf("the annotation announced the change (state Resize) before pods/resize: %+v", updates[:i+1])
			break
		}
	}
	updMu.Unlock()
	spec := web.Spec.Containers[0].Resources
	if st.Resources == nil || st.Resources.Requests.Cpu().Cmp(*spec.Requests.Cpu()) != 0 || st.Resources.Limits.Memory().Cmp(*spec.Limits.Memory()) != 0 {
		t.Fatalf("the kubelet's status %+v does not show the spec %+v", st.Resources, spec)
	}
	// Limits kept their ratio to the requests.
	if r := float64(milli(spec.Limits, corev1.ResourceCPU)) / float64(milli(spec.Requests, corev1.ResourceCPU)); r < 1.9 || r > 2.1 {
		t.Fatalf("cpu limit/request %v, want 2 (KeepRatio): %v", r, spec)
	}
	path, _ := b.containerCgroup(t, web)
	cur, err := b.na.kp.ReadCurrent(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := cgroup.KubeletQuota(milli(spec.Limits, corev1.ResourceCPU)); cur.Quota.QuotaUs != want.QuotaUs {
		t.Fatalf("cgroup quota %v, want %v for limit %v", cur.Quota, want, spec.Limits.Cpu())
	}
	if want := cgroup.KubeletShares(milli(spec.Requests, corev1.ResourceCPU)); cur.Shares != want {
		t.Fatalf("cgroup cpu.shares %d, want %d for request %v", cur.Shares, want, spec.Requests.Cpu())
	}
	if want := milli(spec.Limits, corev1.ResourceMemory); cur.MemoryLimit > want || cur.MemoryLimit < want-4096 {
		t.Fatalf("cgroup memory limit %d, want %d", cur.MemoryLimit, want)
	}
	t.Logf("web: %v/%v → requests %v limits %v; cgroup shares %d quota %v memory %d",
		over.Cpu(), over.Memory(), spec.Requests, spec.Limits, cur.Shares, cur.Quota, cur.MemoryLimit)

	// The Guaranteed pod moved too, requests equal to limits.
	within(t, 2*time.Minute, "the Guaranteed pod resized and still Guaranteed", func() (bool, string) {
		g := b.pod(t, "guaranteed")
		c := g.Spec.Containers[0].Resources
		return milli(c.Requests, corev1.ResourceCPU) < 200 && g.Status.QOSClass == corev1.PodQOSGuaranteed &&
			c.Requests.Cpu().Cmp(*c.Limits.Cpu()) == 0 && c.Requests.Memory().Cmp(*c.Limits.Memory()) == 0, fmt.Sprintf("%v, qos %s", c, g.Status.QOSClass)
	})

	// DryRun, two policies, paused: the annotation speaks, nothing changes.
	for _, tc := range []struct{ name, state string }{{"dry", "DryRun"}, {"both", "Conflict"}, {"paused", "Paused"}} {
		within(t, time.Minute, tc.name+" annotated "+tc.state, func() (bool, string) {
			rec := recommendationOf(b.pod(t, tc.name))
			recs, _ := local.NewClient(b.na.cfg.SocketPath).Raw(context.Background(), local.PathRecs, nil)
			return rec.State == tc.state, rec.State + ": " + rec.Reason + "; agent: " + string(recs)
		})
		p := b.pod(t, tc.name)
		if c := p.Spec.Containers[0].Resources; c.Requests.Cpu().Cmp(*over.Cpu()) != 0 || c.Requests.Memory().Cmp(*over.Memory()) != 0 || p.Generation != 1 {
			t.Fatalf("%s changed: %v (generation %d)", tc.name, c, p.Generation)
		}
	}
	if rec := recommendationOf(b.pod(t, "dry")); len(rec.Containers) != 1 || rec.Containers[0].CPU == nil || rec.Containers[0].CPU.Target == "" {
		t.Fatalf("dry run without a recommendation: %+v", rec)
	}
	within(t, time.Minute, "the conflict reported with a Warning Event", func() (bool, string) {
		evs, _ := b.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=both,reason=RightsizePolicyConflict"})
		return evs != nil && len(evs.Items) > 0 && evs.Items[0].Type == corev1.EventTypeWarning, ""
	})
	// The invalid policy says why in its status; the valid one counts.
	within(t, time.Minute, "policy statuses", func() (bool, string) {
		bad, err := b.dyn.Get(ctx, "bad-window", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(bad.Object, "status", "conditions")
		valid := ""
		for _, c := range conds {
			m := c.(map[string]any)
			if m["type"] == "Valid" {
				valid = fmt.Sprint(m["status"], ": ", m["message"])
			}
		}
		good, _ := b.dyn.Get(ctx, "web", metav1.GetOptions{})
		matched, _, _ := unstructured.NestedInt64(good.Object, "status", "matchedPods")
		adjusted, _, _ := unstructured.NestedInt64(good.Object, "status", "adjustedPods")
		return strings.HasPrefix(valid, "False") && strings.Contains(valid, "61") && matched == 2 && adjusted >= 1,
			fmt.Sprintf("bad-window Valid=%s; web matched %d adjusted %d", valid, matched, adjusted)
	})
}

// TestNodeOOMBump: a container that keeps being OOM-killed under an
// InPlace policy gets its memory limit raised at once in the cgroup, then
// durably through pods/resize, and stops being killed, without a restart.
func TestNodeOOMBump(t *testing.T) {
	b := startRightsizeNode(t)
	ctx := context.Background()
	b.policy(t, "hog", map[string]any{"mode": "InPlace", "step": "1h", "minHistory": "24h",
		"podSelector": map[string]any{"matchLabels": map[string]any{"app": "hog"}}})
	// The loop holds 150 MB in a busybox tail until that succeeds: each
	// attempt over the limit is an OOM kill of tail, not of the container.
	cmd := `n=0; until head -c 157286400 /dev/zero | tail >/dev/null; do n=$((n+1)); echo "attempt $n killed"; sleep 1; done; echo "held 150 MB after $n kills"; exec sleep 3600`
	p := busyboxPod("hog", map[string]string{"app": "hog"}, cmd, rl("100m", "64Mi"), rl("500m", "100Mi"))
	p.Spec.NodeName = b.node.Name()
	if _, err := b.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var path string
	within(t, 3*time.Minute, "the container's memory limit raised above 150 MB in the cgroup and the spec", func() (bool, string) {
		pod := b.pod(t, "hog")
		var ok bool
		if path, ok = b.containerCgroup(t, pod); !ok {
			return false, "no container yet"
		}
		cur, err := b.na.kp.ReadCurrent(path)
		if err != nil {
			return false, err.Error()
		}
		lim := milli(pod.Spec.Containers[0].Resources.Limits, corev1.ResourceMemory)
		return cur.MemoryLimit >= 150<<20 && lim >= 150<<20, fmt.Sprintf("cgroup limit %d, spec limit %d", cur.MemoryLimit, lim)
	})
	pod := b.pod(t, "hog")
	if rc := pod.Status.ContainerStatuses[0].RestartCount; rc != 0 {
		t.Fatalf("the container restarted %d times", rc)
	}
	if pod.Status.QOSClass != corev1.PodQOSBurstable {
		t.Fatalf("QoS class %s", pod.Status.QOSClass)
	}
	evs, _ := b.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=hog"})
	kills, raises := 0, 0
	for _, e := range evs.Items {
		switch e.Reason {
		case "OOMKilled":
			kills += int(max(e.Count, 1))
		case "MemoryRaised":
			raises += int(max(e.Count, 1))
		}
	}
	if kills < 1 || raises < 1 {
		t.Fatalf("events: %d OOMKilled, %d MemoryRaised", kills, raises)
	}
	// It stops OOMing: the cgroup's kill counter stands still.
	d, err := b.na.kp.Layout().DirsAt(path)
	if err != nil {
		t.Fatal(err)
	}
	killsNow := func() int { return oomKills(t, d.Memory) }
	before := killsNow()
	time.Sleep(15 * time.Second)
	if after := killsNow(); after != before || before < 1 {
		t.Fatalf("oom_kill counter %d then %d: still being killed (or never was)", before, after)
	}
	t.Logf("hog: %d OOM kill(s), %d raise(s); limit now %v", before, raises, b.pod(t, "hog").Spec.Containers[0].Resources.Limits.Memory())
}

// within polls cond every 500 ms until it holds or timeout passes.
func within(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			// CI's logs then show a wait that came close to its bound.
			t.Logf("%s: after %v of %v", what, time.Since(start).Round(100*time.Millisecond), timeout)
			return
		}
		last = msg
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v; last: %s", what, timeout, last)
}
