//go:build linux

package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	local "github.com/cgpilot/cgpilot/api/local"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/test/images"
)

// rightsize.go: the right-sizing part of the demo. A web-like Deployment
// asks for far more than it uses, under an InPlace RightsizePolicy with
// short windows: the agent lowers its requests (and limits, keeping their
// ratio) through pods/resize, with no restart. A memory hog under a
// second InPlace policy is OOM-killed until the agent has raised its
// memory limit above what it holds. Both are shown through cgpilotctl and
// the kernel's own cgroup files.

const (
	// sampleInterval replaces the config's 10 s, so that the short windows
	// below see enough samples.
	sampleInterval = time.Second
	webStep        = 5 * time.Second
	// WebMinHistory is the usage history the web pod needs before its first
	// change: with decisions every webStep, the resize comes at the second.
	WebMinHistory = 15 * time.Second
	// WebDeployment is the over-provisioned web-like workload.
	WebDeployment = "web"
	// HogPod is the container that runs out of memory.
	HogPod = "hog"
	// hogBytes is what the hog allocates once its limit allows it.
	hogBytes = 150 << 20
)

var (
	webRequests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("300m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
	webLimits   = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("600m"), corev1.ResourceMemory: resource.MustParse("512Mi")}
	hogRequests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	hogLimits   = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("100Mi")}
)

// Resize is the web pod before and after its first in-place resize.
type Resize struct {
	Pod                         string
	Before, After               corev1.ResourceRequirements // the pod spec
	FilesBefore, FilesAfter     ResourceFiles
	Restarts                    int32
	State                       string     // the cgpilot.io/recommendation state
	LastApplied                 *time.Time // and when it says the resize was applied
	CtlExplain                  string
	StatusRequests, StatusLimit corev1.ResourceList // what the kubelet reports applied
}

// OOM is the memory hog after its limit was raised.
type OOM struct {
	LimitBefore, LimitAfter resource.Quantity // the pod spec's memory limit
	Files                   ResourceFiles
	Restarts                int32
	Log, CtlExplain         string
}

// rsState is what the right-sizing steps carry between them.
type rsState struct {
	webCreated time.Time
	manifest   string
}

// workloads are the right-sizing objects the demo applies with kubectl.
func rightsizeWorkloads() []any {
	// Under emulation (Options.Slow) the client asks twice a second: each
	// wget is a fork and exec, which TCG makes costly.
	pause := 50000
	if timeScale > 1 {
		pause = 500000
	}
	grace := int64(1)
	policy := func(name, app string, extra map[string]any) map[string]any {
		spec := map[string]any{"mode": string(v1alpha1.ModeInPlace),
			"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": Namespace}},
			"podSelector":       map[string]any{"matchLabels": map[string]any{"app": app}}}
		for k, v := range extra {
			spec[k] = v
		}
		return map[string]any{"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "RightsizePolicy",
			"metadata": map[string]any{"name": name}, "spec": spec}
	}
	container := func(name, script string, req, lim corev1.ResourceList) corev1.Container {
		return corev1.Container{Name: name, Image: images.BusyboxRef, ImagePullPolicy: corev1.PullNever,
			Command: []string{"sh", "-c", script}, Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
	}
	one := int32(1)
	web := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: WebDeployment, Namespace: Namespace},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{container("web",
					// busybox httpd, and a client asking it for a page 20 times a second (twice under emulation).
					fmt.Sprintf("echo ok >/tmp/index.html; httpd -p 8080 -h /tmp; while :; do wget -q -O /dev/null http://127.0.0.1:8080/; usleep %d; done", pause),
					webRequests, webLimits)}}}},
	}
	// dd fills a buffer of hogBytes from /dev/zero, touching every page:
	// each attempt over the limit is an OOM kill of dd, not of the
	// container's shell, so the container keeps running and retries.
	hog := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: HogPod, Namespace: Namespace, Labels: map[string]string{"app": "hog"}},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{container("hog",
			fmt.Sprintf(`n=0; until dd if=/dev/zero of=/dev/null bs=%d count=1 2>/dev/null; do n=$((n+1)); echo "attempt $n: OOM-killed"; sleep 1; done; echo "allocated %d MB after $n OOM kills"; exec sleep 86400`, hogBytes, hogBytes>>20),
			hogRequests, hogLimits)}},
	}
	return []any{
		policy("demo-web", "web", map[string]any{"step": webStep.String(), "minHistory": WebMinHistory.String()}),
		// The preset's windows (1h steps, 24h of history): only the OOM
		// bump acts on the hog.
		policy("demo-hog", "hog", nil),
		web, hog,
	}
}

// startRightsizing applies the policies and the two workloads with
// kubectl, then reads the web container's cgroup files before any change.
func (r *run) startRightsizing(ctx context.Context) error {
	var b strings.Builder
	for _, o := range rightsizeWorkloads() {
		y, err := yaml.Marshal(o)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrDemo, err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	r.rs.manifest = filepath.Join(r.o.Dir, "workloads", "rightsize.yaml")
	if err := os.MkdirAll(filepath.Dir(r.rs.manifest), 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrDemo, err)
	}
	if err := os.WriteFile(r.rs.manifest, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("%w: %v", ErrDemo, err)
	}
	r.logf("RightsizePolicy demo-web: mode InPlace, pods app=web, step %v, minHistory %v (the defaults are 1h and 24h)", webStep, WebMinHistory)
	r.logf("RightsizePolicy demo-hog: mode InPlace, pods app=hog, the preset's windows: only OOM kills raise its memory")
	r.logf("Deployment %s: busybox httpd and a client, requests %s, limits %s: far more than it uses",
		WebDeployment, resourcesString(webRequests), resourcesString(webLimits))
	r.logf("pod %s: allocates %d MB under a %s memory limit, retrying every second", HogPod, hogBytes>>20, hogLimits.Memory())
	r.rs.webCreated = time.Now()
	out, err := r.kubectl(ctx, "apply", "-f", r.rs.manifest)
	if err != nil {
		return err
	}
	r.logf("kubectl apply -f %s:\n%s", r.rs.manifest, indent(out, "      "))
	web, err := r.waitWeb(ctx, time.Minute, func(p *corev1.Pod) string {
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
			return "web container not running yet"
		}
		return ""
	})
	if err != nil {
		return err
	}
	r.res.Resize.Pod = web.Name
	r.res.Resize.Before = web.Spec.Containers[0].Resources
	if r.res.Resize.FilesBefore, err = r.cr.resources(web); err != nil {
		return err
	}
	return nil
}

// waitWeb polls the web Deployment's pod until ready says "" (or timeout).
func (r *run) waitWeb(ctx context.Context, timeout time.Duration, ready func(*corev1.Pod) string) (*corev1.Pod, error) {
	var web *corev1.Pod
	why := "no web pod yet"
	err := poll(ctx, timeout, 250*time.Millisecond, func() bool {
		list, err := r.cs.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			why = err.Error()
			return false
		}
		if len(list.Items) != 1 {
			why = fmt.Sprintf("%d web pods", len(list.Items))
			return false
		}
		web = &list.Items[0]
		why = ready(web)
		return why == ""
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrDemo, waited(err, timeout), why)
	}
	return web, nil
}

// showResize waits for the web pod's first in-place resize: lower
// requests in the spec, the kubelet reporting them applied, no restart.
func (r *run) showResize(ctx context.Context) error {
	rz := &r.res.Resize
	web, err := r.waitWeb(ctx, 4*time.Minute, func(p *corev1.Pod) string {
		c := p.Spec.Containers[0].Resources
		var rec local.Recommendation
		_ = json.Unmarshal([]byte(p.Annotations[v1alpha1.AnnotationRecommendation]), &rec)
		lowered := c.Requests.Cpu().Cmp(*webRequests.Cpu()) < 0 || c.Requests.Memory().Cmp(*webRequests.Memory()) < 0
		switch {
		case p.Name != rz.Pod:
			return "the web pod was replaced by " + p.Name
		// The state says Resized until the kubelet and the cgroups show
		// the change, then Applied until another change; lastApplied stays.
		case !lowered || rec.LastApplied == nil:
			return fmt.Sprintf("requests %s, %s: %s %s", resourcesString(c.Requests), v1alpha1.AnnotationRecommendation, rec.State, rec.Reason)
		case len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].Resources == nil:
			return "no container status resources"
		}
		st := p.Status.ContainerStatuses[0].Resources
		if st.Requests.Cpu().Cmp(*c.Requests.Cpu()) != 0 || st.Requests.Memory().Cmp(*c.Requests.Memory()) != 0 {
			return fmt.Sprintf("the kubelet reports requests %s, the spec says %s", resourcesString(st.Requests), resourcesString(c.Requests))
		}
		return ""
	})
	if err != nil {
		recs, _ := ctl(ctx, r.res.Cgpilotctl, "recs", r.res.Socket)
		return fmt.Errorf("web pod not resized: %w\n%s\n%s", err, recs, agentLogTail(r.node.State.Dir, 30))
	}
	at := time.Now()
	var rec local.Recommendation
	_ = json.Unmarshal([]byte(web.Annotations[v1alpha1.AnnotationRecommendation]), &rec)
	rz.State, rz.LastApplied = rec.State, rec.LastApplied
	// The resize may have come before this step looked (the earlier steps
	// run meanwhile): then its time is the annotation's lastApplied, in
	// whole seconds.
	if la := rec.LastApplied; la != nil && la.Before(at.Add(-time.Second)) {
		at = *la
	}
	r.res.Timings.FirstResize = at.Sub(r.t0)
	r.res.Timings.ResizeAfter = at.Sub(r.rs.webCreated)
	// The kubelet writes the cgroups right after it reports the resize;
	// give it a moment to match the spec. The agent may resize the pod
	// again meanwhile (its step is seconds), so the pod is read again
	// with the files: the spec and the files shown are of one resize.
	_ = poll(ctx, 10*time.Second, 50*time.Millisecond, func() bool {
		if p, gerr := r.cs.CoreV1().Pods(Namespace).Get(ctx, web.Name, metav1.GetOptions{}); gerr == nil &&
			len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].Resources != nil {
			web = p
		}
		rz.FilesAfter, err = r.cr.resources(web)
		return err == nil && r.cr.agrees(rz.FilesAfter, web.Spec.Containers[0].Resources)
	})
	if err != nil {
		return err
	}
	rz.After = web.Spec.Containers[0].Resources
	rz.Restarts = web.Status.ContainerStatuses[0].RestartCount
	rz.StatusRequests, rz.StatusLimit = web.Status.ContainerStatuses[0].Resources.Requests, web.Status.ContainerStatuses[0].Resources.Limits
	r.logf("%s resized in place %v after its creation (the policy's minHistory %v included), restarts %d, %s: %s",
		web.Name, round(r.res.Timings.ResizeAfter), WebMinHistory, rz.Restarts, v1alpha1.AnnotationRecommendation, rz.State)
	tw := tabwriter.NewWriter(r.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "    \tbefore\tafter")
	row := func(what string, b, a any) { fmt.Fprintf(tw, "    %s\t%v\t%v\n", what, b, a) }
	row("cpu request", rz.Before.Requests.Cpu(), rz.After.Requests.Cpu())
	row("cpu limit", rz.Before.Limits.Cpu(), rz.After.Limits.Cpu())
	row("memory request", rz.Before.Requests.Memory(), rz.After.Requests.Memory())
	row("memory limit", rz.Before.Limits.Memory(), rz.After.Limits.Memory())
	fb, fa := rz.FilesBefore, rz.FilesAfter
	row(filepath.Base(fb.SharesFile), fb.Shares, fa.Shares)
	row(filepath.Base(fb.QuotaFile), fb.Quota, fa.Quota)
	row(filepath.Base(fb.MemoryFile), fb.MemoryLimit, fa.MemoryLimit)
	tw.Flush()
	r.logf("(the last three read from the container's cgroup: %s and %s)", filepath.Dir(fa.SharesFile), filepath.Dir(fa.MemoryFile))
	if r.res.CtlRecs, err = ctl(ctx, r.res.Cgpilotctl, "recs", r.res.Socket); err != nil {
		return err
	}
	if rz.CtlExplain, err = ctl(ctx, r.res.Cgpilotctl, "explain", r.res.Socket, Namespace+"/"+web.Name); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "\n$ cgpilotctl recs\n%s\n\n$ cgpilotctl explain %s/%s\n%s\n", r.res.CtlRecs, Namespace, web.Name, rz.CtlExplain)
	return nil
}

// showOOM waits until the hog's memory limit, in the cgroup and the
// spec, fits what it asks for, and shows that it never restarted.
func (r *run) showOOM(ctx context.Context) error {
	o := &r.res.OOM
	o.LimitBefore = *hogLimits.Memory()
	var hog *corev1.Pod
	why := "not polled"
	err := poll(ctx, 3*time.Minute, 250*time.Millisecond, func() bool {
		p, err := r.cs.CoreV1().Pods(Namespace).Get(ctx, HogPod, metav1.GetOptions{})
		if err != nil {
			why = err.Error()
			return false
		}
		f, err := r.cr.resources(p)
		if err != nil {
			why = err.Error()
			return false
		}
		lim := p.Spec.Containers[0].Resources.Limits.Memory()
		if f.MemoryLimit < hogBytes || lim.Value() < hogBytes {
			why = fmt.Sprintf("cgroup %s %d, spec limit %s, %d OOM kills so far", filepath.Base(f.MemoryFile), f.MemoryLimit, lim, f.OOMKills)
			return false
		}
		hog, o.Files, o.LimitAfter = p, f, *lim
		return true
	})
	if err != nil {
		return fmt.Errorf("%w: the hog's memory limit not raised: %v: %s\n%s", ErrDemo, waited(err, 3*time.Minute), why, agentLogTail(r.node.State.Dir, 30))
	}
	// When the last raise happened, from the agent's Events (1 s
	// resolution): this step looks only after the right-sizing one.
	evs, err := r.cs.CoreV1().Events(Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + HogPod + ",reason=MemoryRaised"})
	if err != nil {
		return fmt.Errorf("%w: list events: %v", ErrDemo, err)
	}
	for _, ev := range evs.Items {
		if d := ev.LastTimestamp.Sub(hog.CreationTimestamp.Time); d > r.res.Timings.OOMRaised {
			r.res.Timings.OOMRaised = d
		}
	}
	o.Restarts = hog.Status.ContainerStatuses[0].RestartCount
	r.logf("%s: memory limit %s -> %s in the spec (pods/resize), %s = %d in the kernel, the last raise %v after its creation;",
		HogPod, &o.LimitBefore, &o.LimitAfter, o.Files.MemoryFile, o.Files.MemoryLimit, round(r.res.Timings.OOMRaised))
	if r.cr.unified {
		// Not so on v1, where only dd dies and the shell retries.
		r.logf("%d OOM kills (oom_kill in the pod's %s), container restarts %d: on cgroup v2 the kubelet sets memory.oom.group, so an OOM ends the whole container and the kubelet restarts it; the agent raised the limit at each, and the container it raised for runs on",
			o.Files.OOMKills, filepath.Base(o.Files.OOMFile), o.Restarts)
	} else {
		r.logf("%d OOM kills (oom_kill in %s), container restarts %d: the kills hit the process over the limit, and the agent raised the limit at each",
			o.Files.OOMKills, filepath.Base(o.Files.OOMFile), o.Restarts)
	}
	// The hog prints a line when its memory fits; it follows the raise.
	_ = poll(ctx, 20*time.Second, 250*time.Millisecond, func() bool {
		o.Log, err = r.kubectl(ctx, "logs", "-n", Namespace, HogPod)
		return err == nil && strings.Contains(o.Log, "allocated")
	})
	if err != nil {
		return err
	}
	if o.CtlExplain, err = ctl(ctx, r.res.Cgpilotctl, "explain", r.res.Socket, Namespace+"/"+HogPod); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "\n$ kubectl logs -n %s %s\n%s\n\n$ cgpilotctl explain %s/%s\n%s\n", Namespace, HogPod, o.Log, Namespace, HogPod, o.CtlExplain)
	return nil
}

// resourcesString is "cpu 300m, memory 256Mi".
func resourcesString(l corev1.ResourceList) string {
	return fmt.Sprintf("cpu %s, memory %s", l.Cpu(), l.Memory())
}
