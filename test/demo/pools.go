//go:build linux

package demo

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/test/images"
)

// pools.go: the CPU pool part of the demo: an exclusive-core pod, busy
// shared pods, and four changes timed from the API call to the cgroup
// files.

const (
	annoPool      = "cgpilot.io/cpu-pool"
	annoRelease   = "cgpilot.io/release-isolation"
	annoAllocated = "cgpilot.io/allocated-cpus"
	annoStatus    = "cgpilot.io/status"

	// ExclusivePod asks for one exclusive CPU.
	ExclusivePod = "exclusive"
	// poolLabel marks the pool pods (the web and memory hog pods share the
	// namespace but not the label).
	poolLabel = "app=cgpilot-demo"
)

// SharedPods are the busy pods of the shared pool.
var SharedPods = []string{"shared-1", "shared-2", "shared-3"}

// showPools waits until the agent has pinned the exclusive pod and moved
// the shared ones off its CPU, then shows cgpilotctl's view beside the
// cgroup files.
func (r *run) showPools(ctx context.Context) error {
	res := r.res
	var err error
	res.Pinned, res.Exclusive, err = r.w.until(ctx, 3*time.Minute, 50*time.Millisecond, r.w.pinned)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, agentLogTail(r.node.State.Dir, 30))
	}
	res.Timings.Pinned = time.Since(r.poolsCreated)
	r.logf("all running; the exclusive pod pinned to cpu %s and the shared pods moved off it %v after their creation", res.Exclusive, round(res.Timings.Pinned))
	if res.CtlPools, err = ctl(ctx, res.Cgpilotctl, "pools", res.Socket); err != nil {
		return err
	}
	if res.CtlPods, err = ctl(ctx, res.Cgpilotctl, "pods", res.Socket); err != nil {
		return err
	}
	explain, err := ctl(ctx, res.Cgpilotctl, "explain", res.Socket, Namespace+"/"+ExclusivePod)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.out, "\n$ cgpilotctl pools\n%s\n\n$ cgpilotctl pods\n%s\n\n$ cgpilotctl explain %s/%s\n%s\n",
		res.CtlPools, res.CtlPods, Namespace, ExclusivePod, explain)
	fmt.Fprintln(r.out, "\n    the cgroup files themselves (read from the host cgroupfs, not from the agent):")
	printSnapshot(r.out, res.Pinned)
	if c, ok := res.Pinned.Find(ExclusivePod); ok {
		r.logf("e.g. %s = %s, %s = %d", c.CPUSetFile, c.CPUs, c.QuotaFile, c.Quota)
	}
	if r.pools, err = r.w.pods(ctx); err != nil {
		return err
	}
	if len(r.pools) != 1+len(SharedPods) || r.pools[0].Name != ExclusivePod {
		return fmt.Errorf("%w: want %s first of %d pods, have %d", ErrDemo, ExclusivePod, 1+len(SharedPods), len(r.pools))
	}
	return nil
}

// release sets release-isolation: the exclusive pod runs on all CPUs and
// keeps its own; the shared pods stay off it.
func (r *run) release(ctx context.Context) error {
	res := r.res
	seen, err := watchAnnotation(ctx, r.cs, r.pools[0], annoRelease)
	if err != nil {
		return err
	}
	tr := time.Now()
	if err := patchRelease(ctx, r.cs, `"true"`); err != nil {
		return err
	}
	if res.Timings.Release, err = r.w.files(ctx, tr, r.pools, r.w.cpusets(res.NodeCPUs, res.NodeCPUs.Difference(res.Exclusive))); err != nil {
		return err
	}
	select {
	case at := <-seen:
		res.Timings.ReleaseWatch = at.Sub(tr)
	case <-time.After(scaled(5 * time.Second)):
		return fmt.Errorf("%w: the demo's own watch never saw %s on %s", ErrDemo, annoRelease, ExclusivePod)
	}
	if res.Released, _, err = r.w.until(ctx, 30*time.Second, 20*time.Millisecond, r.w.released(res.Exclusive)); err != nil {
		return err
	}
	r.logf("the exclusive pod runs on all CPUs (%s) and keeps cpu %s; the shared pods stay off it: %v from the patch to the last cgroup file changed", res.NodeCPUs, res.Exclusive, round(res.Timings.Release))
	r.logf("(a watch of the demo's own saw the patch after %v: the API server's share)", round(res.Timings.ReleaseWatch))
	printSnapshot(r.out, res.Released)
	return nil
}

// restore removes release-isolation: isolated again.
func (r *run) restore(ctx context.Context) error {
	res := r.res
	tr := time.Now()
	if err := patchRelease(ctx, r.cs, "null"); err != nil {
		return err
	}
	var err error
	if res.Timings.Restore, err = r.w.files(ctx, tr, r.pools, r.w.cpusets(res.Exclusive, res.NodeCPUs.Difference(res.Exclusive))); err != nil {
		return err
	}
	if res.Restored, _, err = r.w.until(ctx, 30*time.Second, 20*time.Millisecond, r.w.pinned); err != nil {
		return err
	}
	r.logf("isolated again on cpu %s in %v:", res.Exclusive, round(res.Timings.Restore))
	printSnapshot(r.out, res.Restored)
	return nil
}

// deleteExclusive deletes the exclusive pod: its CPU returns to the
// shared pool.
func (r *run) deleteExclusive(ctx context.Context) error {
	res := r.res
	tr := time.Now()
	grace := int64(1)
	if err := r.cs.CoreV1().Pods(Namespace).Delete(ctx, ExclusivePod, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		return fmt.Errorf("%w: delete pod %s: %v", ErrDemo, ExclusivePod, err)
	}
	var err error
	if res.Timings.Widen, err = r.w.files(ctx, tr, r.pools[1:], r.w.cpusets(cpuset.New(), res.NodeCPUs)); err != nil {
		return err
	}
	if res.Widened, _, err = r.w.until(ctx, 60*time.Second, 20*time.Millisecond, r.w.widened); err != nil {
		return err
	}
	r.logf("cpu %s given back: the shared pods widened to %s %v after the delete call:", res.Exclusive, res.NodeCPUs, round(res.Timings.Widen))
	printSnapshot(r.out, res.Widened)
	return nil
}

// recreateExclusive creates the exclusive pod again: pinned, shared pods
// narrowed.
func (r *run) recreateExclusive(ctx context.Context) error {
	res := r.res
	if err := poll(ctx, 60*time.Second, 50*time.Millisecond, func() bool {
		_, err := r.cs.CoreV1().Pods(Namespace).Get(ctx, ExclusivePod, metav1.GetOptions{})
		return isNotFound(err)
	}); err != nil {
		return fmt.Errorf("%w: deleted pod %s still exists (%v)", ErrDemo, ExclusivePod, waited(err, 60*time.Second))
	}
	tr := time.Now()
	if err := createPoolPods(ctx, r.cs, false); err != nil {
		return err
	}
	var err error
	if res.Repinned, res.Exclusive, err = r.w.until(ctx, 2*time.Minute, 20*time.Millisecond, r.w.pinned); err != nil {
		return err
	}
	res.Timings.Repin = time.Since(tr)
	r.logf("pinned to cpu %s, shared pods narrowed, %v after the create call (container start included):", res.Exclusive, round(res.Timings.Repin))
	printSnapshot(r.out, res.Repinned)
	if m, err := agentMetrics(ctx, r.bed.HealthPort); err != nil {
		r.logf("agent /metrics: %v", err)
	} else {
		r.logf("the agent's own /metrics (127.0.0.1:%d), informer event -> cgroups written (cgpilot_apply_latency_seconds):\n      %s", r.bed.HealthPort, m)
	}
	return nil
}

// busyPod is a busybox pod spinning one CPU: the load that shows where the
// cpuset lets it run. Under emulation (Options.Slow) it wakes ten times a
// second instead: four spinning pods took the v2 VM's two emulated CPUs
// from the agent, the kubelet and the API server (the agent's API and the
// kubelet's PodResources timed out), and no step checks the load itself.
func busyPod(name string, annotations map[string]string, req, lim corev1.ResourceList) *corev1.Pod {
	grace := int64(1)
	loop := "while :; do :; done"
	if timeScale > 1 {
		loop = "while :; do usleep 100000; done"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Annotations: annotations, Labels: map[string]string{"app": "cgpilot-demo"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "busy", Image: images.BusyboxRef, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"sh", "-c", loop},
				Resources: corev1.ResourceRequirements{Requests: req, Limits: lim},
			}},
		},
	}
}

// createPoolPods creates the exclusive pod, and with shared the shared pods.
func createPoolPods(ctx context.Context, cs kubernetes.Interface, shared bool) error {
	one := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("32Mi")}
	pods := []*corev1.Pod{busyPod(ExclusivePod, map[string]string{annoPool: "exclusive"}, one, one)}
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

// pods lists the pool pods that are not being deleted, exclusive first.
func (w watcher) pods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := w.cs.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: poolLabel})
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
		// Narrowing goes bottom-up: the pod's cpuset is the last write.
		case ExclusivePod:
			if !c.CPUs.Equals(excl) || !c.PodCPUs.Equals(excl) || c.Quota != -1 || c.PodQuota != -1 {
				return excl, fmt.Sprintf("exclusive container: cpuset %s (pod %s) quota %d (pod %d), want %s and -1", c.CPUs, c.PodCPUs, c.Quota, c.PodQuota, excl)
			}
		default:
			if !c.CPUs.Equals(shared) || !c.PodCPUs.Equals(shared) {
				return excl, fmt.Sprintf("shared %s: cpuset %s (pod %s), want %s", c.Pod, c.CPUs, c.PodCPUs, shared)
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
	// The file's own name: cpu.cfs_quota_us on v1, cpu.max on v2 (its
	// quota, -1 for "max").
	quota := "cpu.cfs_quota_us"
	if len(s) > 0 {
		quota = filepath.Base(s[0].QuotaFile)
	}
	fmt.Fprintf(tw, "    POD\tPOOL\tcontainer cpuset.cpus\tcontainer %s\tpod cpuset.cpus\tpod %s\n", quota, quota)
	for _, c := range s {
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%d\t%s\t%d\n", c.Pod, c.Pool, c.CPUs, c.Quota, c.PodCPUs, c.PodQuota)
	}
	tw.Flush()
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
		timeout := time.After(scaled(30 * time.Second))
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
