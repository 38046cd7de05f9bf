//go:build linux

package deploy

import (
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/cgpilot/cgpilot/aggregator/reschedule"
)

// TestReschedulingComponent: the component adds exactly the descheduler's
// objects, its webhook and the aggregator's extra role to the aggregator's
// render, and turns the aggregator's rescheduler on with the contract's
// flags; off by default (not in the aggregator component).
func TestReschedulingComponent(t *testing.T) {
	base := map[string]bool{}
	for _, o := range render(t, ComponentAggregator) {
		base[Key(o)] = true
	}
	objs := render(t, ComponentAggregator, ComponentRescheduling)
	var added []string
	for _, o := range objs {
		if !base[Key(o)] {
			added = append(added, Key(o))
		}
	}
	sort.Strings(added)
	want := []string{
		"ClusterRole.rbac.authorization.k8s.io/cgpilot-aggregator-reschedule",
		"ClusterRole.rbac.authorization.k8s.io/cgpilot-descheduler",
		"ClusterRoleBinding.rbac.authorization.k8s.io/cgpilot-aggregator-reschedule",
		"ClusterRoleBinding.rbac.authorization.k8s.io/cgpilot-descheduler",
		"ConfigMap/cgpilot-system/cgpilot-descheduler",
		"Deployment.apps/cgpilot-system/cgpilot-descheduler",
		"ServiceAccount/cgpilot-system/cgpilot-descheduler",
		"ValidatingWebhookConfiguration.admissionregistration.k8s.io/cgpilot-descheduler-evictions",
	}
	if strings.Join(added, "\n") != strings.Join(want, "\n") {
		t.Errorf("the rescheduling component adds:\n%s\nwant:\n%s", strings.Join(added, "\n"), strings.Join(want, "\n"))
	}
	for _, with := range [][]string{{ComponentAggregator}, {ComponentAggregator, ComponentRescheduling}} {
		d := typed(t, Find(render(t, with...), "Deployment", "cgpilot-aggregator"), &appsv1.Deployment{})
		got := flags(t, d.Spec.Template.Spec.Containers[0].Args)
		on := len(with) == 2
		for name, v := range AggregatorRescheduleFlags {
			if on && got[name] != v || !on && got[name] != "" {
				t.Errorf("components %v: flag %s=%q", with, name, got[name])
			}
		}
	}
}

// TestReschedulingContract: the descheduler's policy reads the
// aggregator's query on its Service's HTTP port with the thresholds the
// query's scale fixes, keeps the DefaultEvictor's protections; the
// descheduler runs unprivileged with its service account; the webhook
// sends only the descheduler's evictions to the path the aggregator
// serves, and fails closed.
func TestReschedulingContract(t *testing.T) {
	objs := render(t, ComponentAggregator, ComponentRescheduling)
	cm := typed(t, Find(objs, "ConfigMap", "cgpilot-descheduler"), &corev1.ConfigMap{})
	var policy struct {
		APIVersion       string `json:"apiVersion"`
		Kind             string `json:"kind"`
		MaxTotal         int    `json:"maxNoOfPodsToEvictTotal"`
		MetricsProviders []struct {
			Source     string `json:"source"`
			Prometheus struct {
				URL string `json:"url"`
			} `json:"prometheus"`
		} `json:"metricsProviders"`
		Profiles []struct {
			Name         string `json:"name"`
			PluginConfig []struct {
				Name string         `json:"name"`
				Args map[string]any `json:"args"`
			} `json:"pluginConfig"`
			Plugins struct {
				Balance struct {
					Enabled []string `json:"enabled"`
				} `json:"balance"`
			} `json:"plugins"`
		} `json:"profiles"`
	}
	if err := yaml.UnmarshalStrict([]byte(cm.Data["policy.yaml"]), &policy); err != nil {
		t.Fatalf("policy: %v", err)
	}
	if policy.APIVersion != "descheduler/v1alpha2" || policy.Kind != "DeschedulerPolicy" || policy.MaxTotal <= 0 {
		t.Errorf("policy %s %s, at most %d evictions a cycle", policy.APIVersion, policy.Kind, policy.MaxTotal)
	}
	svc := typed(t, Find(objs, "Service", "cgpilot-aggregator"), &corev1.Service{})
	var httpPort int32
	for _, p := range svc.Spec.Ports {
		if p.TargetPort.String() == "http" {
			httpPort = p.Port
		}
	}
	if mp := policy.MetricsProviders; len(mp) != 1 || mp[0].Source != "Prometheus" || httpPort != 80 ||
		mp[0].Prometheus.URL != "http://cgpilot-aggregator."+svc.Namespace+".svc"+strings.TrimSuffix(reschedule.PathQuery, "/api/v1/query") {
		t.Errorf("metrics providers %+v (Service http port %d)", mp, httpPort)
	}
	if len(policy.Profiles) != 1 || strings.Join(policy.Profiles[0].Plugins.Balance.Enabled, ",") != "LowNodeUtilization" {
		t.Fatalf("profiles %+v", policy.Profiles)
	}
	args := map[string]map[string]any{}
	for _, pc := range policy.Profiles[0].PluginConfig {
		args[pc.Name] = pc.Args
	}
	lnu := args["LowNodeUtilization"]
	mu, _ := lnu["metricsUtilization"].(map[string]any)
	prom, _ := mu["prometheus"].(map[string]any)
	th, _ := lnu["thresholds"].(map[string]any)
	tt, _ := lnu["targetThresholds"].(map[string]any)
	if mu["source"] != "Prometheus" || prom["query"] != reschedule.Series || th["MetricResource"] != float64(40) || tt["MetricResource"] != float64(50) {
		t.Errorf("LowNodeUtilization args %v: want the query %s, thresholds 40 and target 50 (0.5 = at the watermark)", lnu, reschedule.Series)
	}
	// The DefaultEvictor's protections stay on: nothing in its args turns
	// one off (podProtections.defaultDisabled, evict* flags).
	for k := range args["DefaultEvictor"] {
		if k != "nodeFit" {
			t.Errorf("DefaultEvictor arg %s: only nodeFit is set", k)
		}
	}
	d := typed(t, Find(objs, "Deployment", "cgpilot-descheduler"), &appsv1.Deployment{})
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	if spec.ServiceAccountName != "cgpilot-descheduler" || *d.Spec.Replicas != 1 || !strings.HasPrefix(c.Image, "registry.k8s.io/descheduler/descheduler:v0.36.0") {
		t.Errorf("descheduler deployment: sa %s, replicas %d, image %s", spec.ServiceAccountName, *d.Spec.Replicas, c.Image)
	}
	sc := c.SecurityContext
	if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot ||
		sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 {
		t.Errorf("security context: pod %+v, container %+v", spec.SecurityContext, sc)
	}
	wh := typed(t, Find(objs, "ValidatingWebhookConfiguration", "cgpilot-descheduler-evictions"), &admissionregistrationv1.ValidatingWebhookConfiguration{})
	w := wh.Webhooks[0]
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail || w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun {
		t.Errorf("the eviction webhook must fail closed and have no effect on dry runs: %+v", w)
	}
	if len(w.Rules) != 1 || strings.Join(w.Rules[0].Resources, ",") != "pods/eviction" || len(w.MatchConditions) != 1 ||
		w.MatchConditions[0].Expression != "request.userInfo.username == 'system:serviceaccount:"+d.Namespace+":cgpilot-descheduler'" {
		t.Errorf("webhook rules %+v, conditions %+v", w.Rules, w.MatchConditions)
	}
	if s := w.ClientConfig.Service; s == nil || s.Name != svc.Name || s.Path == nil || *s.Path != reschedule.PathEvictions || s.Port == nil || *s.Port != 443 {
		t.Errorf("webhook client config %+v", w.ClientConfig)
	}
}

// TestReschedulingLeastPrivilege: exactly the verbs the descheduler and
// the aggregator's rescheduler use (TestReschedulingWithTheDescheduler
// runs the descheduler with this role).
func TestReschedulingLeastPrivilege(t *testing.T) {
	objs := render(t, ComponentAggregator, ComponentRescheduling)
	for name, want := range map[string][]string{
		"cgpilot-descheduler": {"/nodes: get,list,watch", "/persistentvolumeclaims: get,list,watch", "/pods/eviction: create",
			"/pods: get,list,watch", "/prometheus/api/v1/query: get", "events.k8s.io/events: create,update",
			"scheduling.k8s.io/priorityclasses: get,list,watch"},
		"cgpilot-aggregator-reschedule": {"/nodes: list,watch", "/pods: get,list", "policy/poddisruptionbudgets: list"},
	} {
		cr := typed(t, Find(objs, "ClusterRole", name), &rbacv1.ClusterRole{})
		if got := ruleLines(cr.Rules); got != strings.Join(want, "\n") {
			t.Errorf("ClusterRole %s:\n%s\nwant:\n%s", name, got, strings.Join(want, "\n"))
		}
	}
}

// ruleLines is a role's rules one line a resource or path, sorted:
// "group/resource: verbs" and "/path: verbs".
func ruleLines(rs []rbacv1.PolicyRule) string {
	var got []string
	for _, r := range rs {
		v := append([]string(nil), r.Verbs...)
		sort.Strings(v)
		for _, u := range r.NonResourceURLs {
			got = append(got, u+": "+strings.Join(v, ","))
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				got = append(got, g+"/"+res+": "+strings.Join(v, ","))
			}
		}
	}
	sort.Strings(got)
	return strings.Join(got, "\n")
}
