//go:build linux

package deploy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/cgpilot/cgpilot/test/tier"
)

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := tier.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func render(t testing.TB, components ...string) []*unstructured.Unstructured {
	t.Helper()
	b, err := Kustomize(repoRoot(t), components...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func typed[T any](t testing.TB, u *unstructured.Unstructured, into *T) *T {
	t.Helper()
	if u == nil {
		t.Fatalf("object of type %T not rendered", into)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatalf("%s: %v", Key(u), err)
	}
	return into
}

func agentDaemonSet(t testing.TB, objs []*unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	return typed(t, Find(objs, "DaemonSet", "cgpilot-agent"), &appsv1.DaemonSet{})
}

// TestKustomizeBaseObjects: the base renders exactly the objects the
// agent needs, in an order kubectl apply -k can create them in.
func TestKustomizeBaseObjects(t *testing.T) {
	var got []string
	for _, o := range render(t) {
		got = append(got, Key(o))
	}
	want := []string{
		"Namespace/cgpilot-system",
		"CustomResourceDefinition.apiextensions.k8s.io/rightsizepolicies.cgpilot.io",
		"CustomResourceDefinition.apiextensions.k8s.io/workloadrecommendations.cgpilot.io",
		"ServiceAccount/cgpilot-system/cgpilot-agent",
		"ClusterRole.rbac.authorization.k8s.io/cgpilot-agent",
		"ClusterRoleBinding.rbac.authorization.k8s.io/cgpilot-agent",
		"ConfigMap/cgpilot-system/cgpilot-agent",
		"ValidatingAdmissionPolicy.admissionregistration.k8s.io/cgpilot-agent",
		"ValidatingAdmissionPolicy.admissionregistration.k8s.io/cgpilot-agent-policy-status",
		"ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io/cgpilot-agent",
		"ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io/cgpilot-agent-policy-status",
		"DaemonSet.apps/cgpilot-system/cgpilot-agent",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("kustomize base objects:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// AgentFlags is the contract between the manifests and the agent: the
// flags every render passes (value per flag), which the agent must accept.
var AgentFlags = map[string]string{
	"--config":                "/etc/cgpilot/config.yaml",
	"--health-addr":           "127.0.0.1:9464",
	"--socket":                "/run/cgpilot/agent.sock",
	"--path.interrupts":       "/host/proc/interrupts",
	"--kubelet-pod-resources": "/var/lib/kubelet/pod-resources/kubelet.sock",
}

// flags parses --name=value arguments; a flag given twice is an error (the
// last would silently win).
func flags(t testing.TB, args []string) map[string]string {
	t.Helper()
	m, problems := parseFlags(args)
	for _, p := range problems {
		t.Error(p)
	}
	return m
}

// parseFlags is flags, returning what is wrong instead of failing a test.
func parseFlags(args []string) (map[string]string, []string) {
	m := map[string]string{}
	var problems []string
	for _, a := range args {
		name, v, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(name, "--") {
			problems = append(problems, fmt.Sprintf("argument %q is not --name=value", a))
			continue
		}
		if _, dup := m[name]; dup {
			problems = append(problems, fmt.Sprintf("flag %s given twice", name))
		}
		m[name] = v
	}
	return m, problems
}

// TestDaemonSetContract: the agent's DaemonSet passes exactly the flags of
// AgentFlags, mounts each host path where the flags and the config file
// expect it, read-only unless the agent writes there, and runs with no
// capabilities, a read-only root, RuntimeDefault seccomp, a budget and a
// rolling update.
func TestDaemonSetContract(t *testing.T) {
	objs := render(t)
	ds := agentDaemonSet(t, objs)
	spec := ds.Spec.Template.Spec
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("want exactly one container, have %d (+%d init)", len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	got := flags(t, c.Args)
	for name, v := range AgentFlags {
		if got[name] != v {
			t.Errorf("flag %s=%q, want %q", name, got[name], v)
		}
	}
	for name := range got {
		if _, ok := AgentFlags[name]; !ok {
			t.Errorf("flag %s is not in the contract (AgentFlags)", name)
		}
	}

	// Host paths: where each is mounted and whether it is writable.
	type mount struct {
		at       string
		readOnly bool
		rro      bool
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	host := map[string]mount{}
	for _, v := range spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		m, ok := mounts[v.Name]
		if !ok {
			t.Errorf("hostPath volume %s (%s) is not mounted", v.Name, v.HostPath.Path)
			continue
		}
		host[v.HostPath.Path] = mount{m.MountPath, m.ReadOnly, m.RecursiveReadOnly != nil && *m.RecursiveReadOnly == corev1.RecursiveReadOnlyIfPossible}
	}
	want := map[string]mount{
		"/sys/fs/cgroup":                 {"/sys/fs/cgroup", true, true},
		"/sys/fs/cgroup/cpu/kubepods":    {"/sys/fs/cgroup/cpu/kubepods", false, false},
		"/sys/fs/cgroup/cpuset/kubepods": {"/sys/fs/cgroup/cpuset/kubepods", false, false},
		"/sys/fs/cgroup/memory/kubepods": {"/sys/fs/cgroup/memory/kubepods", false, false},
		"/proc/interrupts":               {AgentFlags["--path.interrupts"], true, false},
		"/var/lib/kubelet/pod-resources": {filepath.Dir(AgentFlags["--kubelet-pod-resources"]), true, false},
		"/var/lib/cgpilot":               {"/var/lib/cgpilot", false, false},
		"/run/cgpilot":                   {filepath.Dir(AgentFlags["--socket"]), false, false},
	}
	for p, w := range want {
		if host[p] != w {
			t.Errorf("host path %s: mounted %+v, want %+v", p, host[p], w)
		}
	}
	for p := range host {
		if _, ok := want[p]; !ok {
			t.Errorf("host path %s is mounted but not in the contract", p)
		}
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil && v.HostPath.Type == nil {
			t.Errorf("hostPath %s has no type: a missing path would be created as an empty directory", v.HostPath.Path)
		}
	}
	if m, ok := mounts["config"]; !ok || m.MountPath != filepath.Dir(AgentFlags["--config"]) || !m.ReadOnly {
		t.Errorf("config mount %+v, want read-only at %s", m, filepath.Dir(AgentFlags["--config"]))
	}

	// The config file agrees with the mounts.
	cm := typed(t, Find(objs, "ConfigMap", "cgpilot-agent"), &corev1.ConfigMap{})
	var cfg struct {
		CheckpointPath         string   `json:"checkpointPath"`
		KubeletCPUManagerState *string  `json:"kubeletCPUManagerState"`
		CgroupRoot             string   `json:"cgroupRoot"`
		CgroupParent           string   `json:"cgroupParent"`
		IgnoredNamespaces      []string `json:"ignoredNamespaces"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data[filepath.Base(AgentFlags["--config"])]), &cfg); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	if filepath.Dir(cfg.CheckpointPath) != "/var/lib/cgpilot" || cfg.CgroupRoot != "/sys/fs/cgroup" || cfg.CgroupParent != "/kubepods" {
		t.Errorf("config paths %+v do not match the mounts", cfg)
	}
	if cfg.KubeletCPUManagerState == nil || *cfg.KubeletCPUManagerState != "" {
		t.Errorf("config kubeletCPUManagerState %v: want \"\" (the kubelet's state comes from its PodResources API; /var/lib/kubelet is not mounted)", cfg.KubeletCPUManagerState)
	}
	if !contains(cfg.IgnoredNamespaces, ds.Namespace) || !contains(cfg.IgnoredNamespaces, "kube-system") {
		t.Errorf("ignoredNamespaces %v: want the agent's own %s and kube-system", cfg.IgnoredNamespaces, ds.Namespace)
	}

	var nodeName bool
	for _, e := range c.Env {
		nodeName = nodeName || (e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName")
	}
	if !nodeName {
		t.Error("NODE_NAME does not come from the downward API's spec.nodeName")
	}

	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no securityContext")
	case sc.Privileged == nil || *sc.Privileged,
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation,
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem,
		sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL",
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("securityContext %+v: want unprivileged, no escalation, read-only root, drop ALL, RuntimeDefault seccomp", *sc)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			t.Errorf("no %s limit", r)
		}
	}
	if c.ReadinessProbe == nil || c.LivenessProbe == nil || c.ReadinessProbe.HTTPGet == nil ||
		c.ReadinessProbe.HTTPGet.Host+":"+c.ReadinessProbe.HTTPGet.Port.String() != AgentFlags["--health-addr"] {
		t.Errorf("probes %+v %+v: want HTTP probes on --health-addr", c.ReadinessProbe, c.LivenessProbe)
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ds.Spec.UpdateStrategy.RollingUpdate == nil ||
		ds.Spec.UpdateStrategy.RollingUpdate.MaxSurge == nil || ds.Spec.UpdateStrategy.RollingUpdate.MaxSurge.IntValue() != 0 {
		t.Errorf("update strategy %+v: want RollingUpdate without surge", ds.Spec.UpdateStrategy)
	}
	if spec.PriorityClassName != "system-node-critical" || !spec.HostNetwork {
		t.Errorf("priorityClassName %q hostNetwork %v", spec.PriorityClassName, spec.HostNetwork)
	}
	sa := Find(objs, "ServiceAccount", spec.ServiceAccountName)
	if sa == nil || sa.GetNamespace() != ds.Namespace {
		t.Errorf("the DaemonSet runs as ServiceAccount %q, which the base does not create in %s", spec.ServiceAccountName, ds.Namespace)
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// TestClusterRoleLeastPrivilege: the agent's ClusterRole grants exactly
// the verbs the agent uses, nothing more (no wildcards, no secrets, no
// delete, no pods/status, no list of nodes).
func TestClusterRoleLeastPrivilege(t *testing.T) {
	objs := render(t)
	cr := typed(t, Find(objs, "ClusterRole", "cgpilot-agent"), &rbacv1.ClusterRole{})
	var got []string
	for _, r := range cr.Rules {
		if len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
			t.Errorf("rule %+v: resourceNames and nonResourceURLs are not expected", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				verbs := append([]string(nil), r.Verbs...)
				sort.Strings(verbs)
				got = append(got, g+"/"+res+": "+strings.Join(verbs, ","))
			}
		}
	}
	sort.Strings(got)
	want := []string{
		"/events: create,patch",
		"/limitranges: list,watch",
		"/namespaces: get,list,watch",
		"/nodes: get,patch",
		"/pods/resize: patch",
		"/pods: get,list,patch,watch",
		"apps/replicasets: get",
		"batch/jobs: get",
		"cgpilot.io/rightsizepolicies/status: get,patch,update",
		"cgpilot.io/rightsizepolicies: get,list,watch",
		"events.k8s.io/events: create,patch",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ClusterRole rules:\n%s\nwant exactly:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	crb := typed(t, Find(objs, "ClusterRoleBinding", "cgpilot-agent"), &rbacv1.ClusterRoleBinding{})
	if crb.RoleRef.Name != cr.Name || len(crb.Subjects) != 1 || crb.Subjects[0].Kind != "ServiceAccount" ||
		crb.Subjects[0].Name != "cgpilot-agent" || crb.Subjects[0].Namespace != Namespace {
		t.Errorf("ClusterRoleBinding %+v: want the role bound to ServiceAccount %s/cgpilot-agent only", crb, Namespace)
	}
}

// TestAdmissionPolicyMatchesTheAgent: the policy's match condition names
// the ServiceAccount the DaemonSet runs as, so a renamed account would not
// silently escape it.
func TestAdmissionPolicyMatchesTheAgent(t *testing.T) {
	objs := render(t)
	vap := Find(objs, "ValidatingAdmissionPolicy", "cgpilot-agent")
	conds, _, _ := unstructured.NestedSlice(vap.Object, "spec", "matchConditions")
	sa := agentDaemonSet(t, objs).Spec.Template.Spec.ServiceAccountName
	if len(conds) != 1 || !strings.Contains(conds[0].(map[string]any)["expression"].(string), "':"+sa+"'") {
		t.Errorf("matchConditions %v do not name ServiceAccount %s", conds, sa)
	}
	fp, _, _ := unstructured.NestedString(vap.Object, "spec", "failurePolicy")
	binding := Find(objs, "ValidatingAdmissionPolicyBinding", "cgpilot-agent")
	actions, _, _ := unstructured.NestedStringSlice(binding.Object, "spec", "validationActions")
	policy, _, _ := unstructured.NestedString(binding.Object, "spec", "policyName")
	if fp != "Fail" || policy != vap.GetName() || strings.Join(actions, ",") != "Deny" {
		t.Errorf("failurePolicy %q, binding to %q with %v: want Fail, %s, [Deny]", fp, policy, actions, vap.GetName())
	}
}

// layouts pairs each kustomize render with the Helm values that must
// render the same objects.
var layouts = []struct {
	name       string
	components []string
	values     map[string]any
}{
	{"base", nil, map[string]any{"createNamespace": true}},
	{"metrics", []string{ComponentMetrics}, map[string]any{"createNamespace": true,
		"metrics": map[string]any{"enabled": true, "podMonitor": map[string]any{"enabled": true}}}},
	{"cgroup-v2", []string{ComponentCgroupV2}, map[string]any{"createNamespace": true,
		"cgroup": map[string]any{"writablePaths": []string{"kubepods"}}}},
	{"cgroup-v2-systemd", []string{ComponentCgroupV2Systemd}, map[string]any{"createNamespace": true,
		"cgroup": map[string]any{"writablePaths": []string{"kubepods.slice"}, "parent": "/kubepods.slice"}}},
	{"aggregator", []string{ComponentAggregator}, map[string]any{"createNamespace": true, "aggregator": map[string]any{"enabled": true}}},
	{"cgroup-v1-systemd+metrics", []string{ComponentCgroupV1Systemd, ComponentMetrics}, map[string]any{"createNamespace": true,
		"metrics": map[string]any{"enabled": true, "podMonitor": map[string]any{"enabled": true}},
		"cgroup":  map[string]any{"writablePaths": []string{"cpu/kubepods.slice", "cpuset/kubepods.slice", "memory/kubepods.slice"}, "parent": "/kubepods.slice"}}},
	{"aggregator+rescheduling", []string{ComponentAggregator, ComponentRescheduling}, map[string]any{"createNamespace": true,
		"aggregator": map[string]any{"enabled": true}, "rescheduling": map[string]any{"enabled": true}}},
	{"ebpf-oom", []string{ComponentEBPFOOM}, map[string]any{"createNamespace": true, "ebpfOOM": map[string]any{"enabled": true}}},
	{"cgroup-v2+metrics+ebpf-oom", []string{ComponentCgroupV2, ComponentMetrics, ComponentEBPFOOM}, map[string]any{"createNamespace": true,
		"metrics": map[string]any{"enabled": true, "podMonitor": map[string]any{"enabled": true}},
		"cgroup":  map[string]any{"writablePaths": []string{"kubepods"}},
		"ebpfOOM": map[string]any{"enabled": true}}},
	// The aggregator's patch of the agent composes with the others'.
	{"cgroup-v2-systemd+metrics+aggregator", []string{ComponentCgroupV2Systemd, ComponentMetrics, ComponentAggregator}, map[string]any{"createNamespace": true,
		"metrics":    map[string]any{"enabled": true, "podMonitor": map[string]any{"enabled": true}},
		"cgroup":     map[string]any{"writablePaths": []string{"kubepods.slice"}, "parent": "/kubepods.slice"},
		"aggregator": map[string]any{"enabled": true}}},
}

func helmBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the Helm tests need hack/tool.sh helm (built from the Go module proxy once, then cached); unit tier without -short runs them")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	h, err := Tool(ctx, repoRoot(t), "helm", os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestHelmMatchesKustomize: for each node layout, helm template with the
// matching values renders the same objects as the kustomize base with the
// matching components, field for field after Normalize.
func TestHelmMatchesKustomize(t *testing.T) {
	helm := helmBinary(t)
	root := repoRoot(t)
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			k, err := Normalize(render(t, l.components...))
			if err != nil {
				t.Fatal(err)
			}
			if d := Diff("kustomize", k, "helm", helmNormalized(t, helm, root, l.values)); d != "" {
				t.Errorf("helm template differs from kubectl kustomize:\n%s", d)
			}
			if len(k) < 9 {
				t.Errorf("only %d objects rendered: the comparison proves little", len(k))
			}
		})
	}
}

// TestHelmOtherNamespace: installed elsewhere, the chart puts every
// namespaced object and the binding's subject in the release namespace,
// and the agent still ignores its own namespace.
func TestHelmOtherNamespace(t *testing.T) {
	helm := helmBinary(t)
	b, err := Helm(context.Background(), helm, repoRoot(t), "ops", nil)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if Find(objs, "Namespace", "ops") != nil || Find(objs, "Namespace", Namespace) != nil {
		t.Error("a Namespace was rendered without createNamespace")
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ConfigMap", "DaemonSet":
			if o.GetNamespace() != "ops" {
				t.Errorf("%s in namespace %q, want ops", Key(o), o.GetNamespace())
			}
		}
	}
	crb := typed(t, Find(objs, "ClusterRoleBinding", "cgpilot-agent"), &rbacv1.ClusterRoleBinding{})
	if len(crb.Subjects) != 1 || crb.Subjects[0].Namespace != "ops" {
		t.Errorf("binding subjects %+v, want the ServiceAccount in ops", crb.Subjects)
	}
	cm := typed(t, Find(objs, "ConfigMap", "cgpilot-agent"), &corev1.ConfigMap{})
	var cfg struct {
		IgnoredNamespaces []string `json:"ignoredNamespaces"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil || !contains(cfg.IgnoredNamespaces, "ops") {
		t.Errorf("ignoredNamespaces %v (%v): want the release namespace ops among them", cfg.IgnoredNamespaces, err)
	}
}

// TestHelmLint: helm lint is clean for the defaults and with every option on.
func TestHelmLint(t *testing.T) {
	helm := helmBinary(t)
	chart := filepath.Join(repoRoot(t), "deploy", "helm", "cgpilot")
	for _, set := range []string{"", "createNamespace=true,metrics.enabled=true,metrics.podMonitor.enabled=true,admissionPolicy.enabled=false,crds.install=false,aggregator.enabled=true,aggregator.grafanaDashboard.enabled=true,rescheduling.enabled=true,rescheduling.dryRun=true,ebpfOOM.enabled=true"} {
		args := []string{"lint", "--strict", chart}
		if set != "" {
			args = append(args, "--set", set)
		}
		if out, err := runTool(t, helm, args...); err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

func TestKustomizeErrors(t *testing.T) {
	if _, err := Kustomize(t.TempDir()); !errors.Is(err, ErrRender) {
		t.Errorf("no deploy/ in the root: %v, want ErrRender", err)
	}
	if _, err := Kustomize(repoRoot(t), "no-such-component"); !errors.Is(err, ErrRender) || !strings.Contains(err.Error(), "no-such-component") {
		t.Errorf("unknown component: %v, want an ErrRender naming it", err)
	}
	if _, err := Kustomize(repoRoot(t), "../x"); !errors.Is(err, ErrRender) {
		t.Errorf("component path: %v, want ErrRender", err)
	}
}

func TestDecode(t *testing.T) {
	objs, err := Decode([]byte("# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {n: \"1\"}\n---\n\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {priority: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || Key(objs[0]) != "ConfigMap/a" || Key(objs[1]) != "Pod/p" {
		t.Fatalf("decoded %d objects", len(objs))
	}
	if p, ok, _ := unstructured.NestedInt64(objs[1].Object, "spec", "priority"); !ok || p != 5 {
		t.Errorf("spec.priority decoded as %v, want int64 5", objs[1].Object["spec"])
	}
	for name, in := range map[string]string{
		"no name":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n",
		"bad yaml": "apiVersion: v1\nkind: [\n",
		"no kind":  "apiVersion: v1\nmetadata: {name: a}\n",
	} {
		if _, err := Decode([]byte(in)); !errors.Is(err, ErrRender) {
			t.Errorf("%s: %v, want ErrRender", name, err)
		}
	}
}

// TestNormalize: what Normalize ignores, and that it still sees a real
// difference (so TestHelmMatchesKustomize can fail).
func TestNormalize(t *testing.T) {
	base := render(t)
	a, err := Normalize(base)
	if err != nil {
		t.Fatal(err)
	}
	changed := make([]*unstructured.Unstructured, len(base))
	for i, o := range base {
		changed[i] = o.DeepCopy()
	}
	ds := Find(changed, "DaemonSet", "cgpilot-agent")
	labels := ds.GetLabels()
	labels["helm.sh/chart"] = "cgpilot-0.1.0"
	ds.SetLabels(labels)
	_ = unstructured.SetNestedField(ds.Object, "abc", "spec", "template", "metadata", "annotations", ChecksumAnnotation)
	ctrs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	c := ctrs[0].(map[string]any)
	a0 := c["args"].([]any)
	c["args"] = append([]any{a0[len(a0)-1]}, a0[:len(a0)-1]...) // reordered
	_ = unstructured.SetNestedSlice(ds.Object, ctrs, "spec", "template", "spec", "containers")
	cm := Find(changed, "ConfigMap", "cgpilot-agent")
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	_ = unstructured.SetNestedField(cm.Object, "# reformatted\n"+data["config.yaml"], "data", "config.yaml")
	b, err := Normalize(changed)
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff("a", a, "b", b); d != "" {
		t.Errorf("tool-only differences were not normalised away:\n%s", d)
	}
	// A real change is reported, with its field.
	_ = unstructured.SetNestedField(ds.Object, int64(2), "spec", "updateStrategy", "rollingUpdate", "maxUnavailable")
	b, _ = Normalize(changed)
	if d := Diff("a", a, "b", b); !strings.Contains(d, "spec.updateStrategy.rollingUpdate.maxUnavailable") {
		t.Errorf("diff %q does not name the changed field", d)
	}
	if _, err := Normalize(append(base, base[0])); !errors.Is(err, ErrRender) {
		t.Errorf("duplicate object: %v, want ErrRender", err)
	}
}

func runTool(t testing.TB, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	b, err := cmd.CombinedOutput()
	return string(b), err
}
