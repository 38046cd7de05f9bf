//go:build linux

package deploy

import (
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/cgpilot/cgpilot/aggregator/webhook"
)

// TestAggregatorComponent: the component adds exactly the aggregator's
// objects to the base.
func TestAggregatorComponent(t *testing.T) {
	base := map[string]bool{}
	for _, o := range render(t) {
		base[Key(o)] = true
	}
	var added []string
	for _, o := range render(t, ComponentAggregator) {
		if !base[Key(o)] {
			added = append(added, Key(o))
		}
	}
	sort.Strings(added)
	want := []string{
		"ClusterRole.rbac.authorization.k8s.io/cgpilot-aggregator",
		"ClusterRole.rbac.authorization.k8s.io/cgpilot-dashboard-viewer",
		"ClusterRole.rbac.authorization.k8s.io/cgpilot-workloadrecommendations-view",
		"ClusterRoleBinding.rbac.authorization.k8s.io/cgpilot-aggregator",
		"Certificate.cert-manager.io/cgpilot-system/cgpilot-aggregator",
		"Deployment.apps/cgpilot-system/cgpilot-aggregator",
		"Issuer.cert-manager.io/cgpilot-system/cgpilot-aggregator",
		"MutatingWebhookConfiguration.admissionregistration.k8s.io/cgpilot-aggregator",
		"PodDisruptionBudget.policy/cgpilot-system/cgpilot-aggregator",
		"Role.rbac.authorization.k8s.io/cgpilot-system/cgpilot-aggregator",
		"RoleBinding.rbac.authorization.k8s.io/cgpilot-system/cgpilot-aggregator",
		"Service/cgpilot-system/cgpilot-aggregator",
		"ServiceAccount/cgpilot-system/cgpilot-aggregator",
		"ValidatingAdmissionPolicy.admissionregistration.k8s.io/cgpilot-aggregator",
		"ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io/cgpilot-aggregator",
	}
	sort.Strings(want)
	if strings.Join(added, "\n") != strings.Join(want, "\n") {
		t.Errorf("the aggregator component adds:\n%s\nwant:\n%s", strings.Join(added, "\n"), strings.Join(want, "\n"))
	}
}

// TestAggregatorContract: the Deployment passes exactly AggregatorFlags,
// mounts the certificate where the flags say, publishes its identity and
// IP for the Lease, runs unprivileged; the Service and the webhook point at
// the ports and path the aggregator serves, and the webhook fails open.
func TestAggregatorContract(t *testing.T) {
	objs := render(t, ComponentAggregator)
	d := typed(t, Find(objs, "Deployment", "cgpilot-aggregator"), &appsv1.Deployment{})
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2 (leader election)", d.Spec.Replicas)
	}
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	got := flags(t, c.Args)
	for name, v := range AggregatorFlags {
		if got[name] != v {
			t.Errorf("flag %s=%q, want %q", name, got[name], v)
		}
	}
	for name := range got {
		if _, ok := AggregatorFlags[name]; !ok {
			t.Errorf("flag %s is not in the contract (AggregatorFlags)", name)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" || env["POD_IP"] != "status.podIP" {
		t.Errorf("downward API env %v", env)
	}
	var tls corev1.VolumeMount
	for _, m := range c.VolumeMounts {
		if m.Name == "tls" {
			tls = m
		}
	}
	if tls.MountPath != filepath.Dir(AggregatorFlags["--tls-cert-file"]) || !tls.ReadOnly {
		t.Errorf("tls mount %+v", tls)
	}
	sc := c.SecurityContext
	if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot ||
		sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 {
		t.Errorf("security context: pod %+v, container %+v", spec.SecurityContext, sc)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["https"] != 8443 || ports["http"] != 8080 {
		t.Errorf("container ports %v do not match --secure-addr and --http-addr", ports)
	}
	svc := typed(t, Find(objs, "Service", "cgpilot-aggregator"), &corev1.Service{})
	for _, p := range svc.Spec.Ports {
		if _, ok := ports[p.TargetPort.String()]; !ok {
			t.Errorf("service port %s targets %s, which the container does not name", p.Name, p.TargetPort.String())
		}
	}
	wh := typed(t, Find(objs, "MutatingWebhookConfiguration", "cgpilot-aggregator"), &admissionregistrationv1.MutatingWebhookConfiguration{})
	w := wh.Webhooks[0]
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore || w.TimeoutSeconds == nil || *w.TimeoutSeconds > 5 ||
		w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
		t.Errorf("webhook must fail open quickly and have no side effects: %+v", w)
	}
	if s := w.ClientConfig.Service; s == nil || s.Name != svc.Name || s.Namespace != svc.Namespace || s.Path == nil || *s.Path != webhook.PathMutate || s.Port == nil || *s.Port != 443 {
		t.Errorf("webhook client config %+v", w.ClientConfig)
	}
	excluded := ""
	for _, e := range w.NamespaceSelector.MatchExpressions {
		excluded += strings.Join(e.Values, ",")
	}
	if !strings.Contains(excluded, "kube-system") || !strings.Contains(excluded, d.Namespace) {
		t.Errorf("the webhook must skip kube-system and its own namespace: %v", w.NamespaceSelector)
	}
	if wh.Annotations["cert-manager.io/inject-ca-from"] != d.Namespace+"/cgpilot-aggregator" {
		t.Errorf("CA injection annotation %q", wh.Annotations["cert-manager.io/inject-ca-from"])
	}
}

// TestAggregatorLeastPrivilege: exactly the verbs the aggregator uses.
func TestAggregatorLeastPrivilege(t *testing.T) {
	objs := render(t, ComponentAggregator)
	cr := typed(t, Find(objs, "ClusterRole", "cgpilot-aggregator"), &rbacv1.ClusterRole{})
	want := strings.Join([]string{
		"/limitranges: get,list,watch",
		"/namespaces: get,list,watch",
		"/nodes: get,list,patch,watch",
		"/pods: list,watch",
		"/resourcequotas: list,watch",
		"apps/replicasets: get",
		"authentication.k8s.io/tokenreviews: create",
		"authorization.k8s.io/subjectaccessreviews: create",
		"batch/jobs: get",
		"cgpilot.io/rightsizepolicies: get,list,watch",
		"cgpilot.io/workloadrecommendations: create,delete,get,list,patch,update,watch",
		"events.k8s.io/events: create,patch",
	}, "\n")
	if got := ruleLines(cr.Rules); got != want {
		t.Errorf("ClusterRole:\n%s\nwant:\n%s", got, want)
	}
	role := typed(t, Find(objs, "Role", "cgpilot-aggregator"), &rbacv1.Role{})
	if got := ruleLines(role.Rules); got != "/configmaps: create\n/configmaps: get,update\ncoordination.k8s.io/leases: create,get,update" {
		t.Errorf("Role: %s", got)
	}
	// Only the CA ConfigMap by name: create cannot be confined to a name.
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "configmaps") && !slices.Equal(r.Verbs, []string{"create"}) && !slices.Equal(r.ResourceNames, []string{"cgpilot-aggregator-ca"}) {
			t.Errorf("the aggregator may %v configmaps %v", r.Verbs, r.ResourceNames)
		}
	}
	// The dashboard's readers: read-only.
	for _, name := range []string{"cgpilot-dashboard-viewer", "cgpilot-workloadrecommendations-view"} {
		for _, r := range typed(t, Find(objs, "ClusterRole", name), &rbacv1.ClusterRole{}).Rules {
			for _, v := range r.Verbs {
				if v != "get" && v != "list" && v != "watch" {
					t.Errorf("ClusterRole %s may %s %v%v", name, v, r.Resources, r.NonResourceURLs)
				}
			}
		}
	}
}
