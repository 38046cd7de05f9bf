//go:build linux

package deploy

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cgpilot/cgpilot/aggregator/auth"
)

// agentReportVolumes are the agent's volumes for its reports: the
// projected token and the aggregator's CA.
var agentReportVolumes = []string{"aggregator-token", "aggregator-ca"}

// Bounds of the projected token's lifetime: the API server's minimum, and
// an hour, so that a leaked token is soon useless (the kubelet renews it
// at 80 % of its life).
const (
	minTokenSeconds = 600
	maxTokenSeconds = 3600
)

// agentReportProblems checks what a render with the aggregator gives the
// agent for its reports against the render's own objects, so that it
// holds in any namespace and for any Secret name:
//   - every flag of AgentAggregatorFlags, each given once;
//   - the URL is https to the aggregator Service's name in its namespace,
//     on the Service's https port, and a name of its Certificate;
//   - the report period is the aggregator's --report-period;
//   - the token is projected alone, for auth.Audience, for 10 min to an
//     hour;
//   - the CA volume is the ConfigMap the aggregator publishes its CA in
//     (--ca-configmap, from --tls-ca-file in its serving Secret), only its
//     ca.crt, optional; nothing of the agent's pod reads any Secret (issue
//     19: a Secret volume has the kubelet fetch the whole Secret, tls.key
//     included, onto every node, even when only ca.crt is mounted);
//   - both are mounted read-only where the flags point;
//   - a hostNetwork agent resolves the Service (ClusterFirstWithHostNet).
func agentReportProblems(objs []*unstructured.Unstructured) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	var (
		ds  appsv1.DaemonSet
		agg appsv1.Deployment
		svc corev1.Service
	)
	for _, o := range []struct {
		kind, name string
		into       any
	}{{"DaemonSet", "cgpilot-agent", &ds}, {"Deployment", "cgpilot-aggregator", &agg}, {"Service", "cgpilot-aggregator", &svc}} {
		u := Find(objs, o.kind, o.name)
		if u == nil {
			return []string{o.kind + " " + o.name + " not rendered"}
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, o.into); err != nil {
			return []string{Key(u) + ": " + err.Error()}
		}
	}
	spec := ds.Spec.Template.Spec
	if len(spec.Containers) != 1 || len(agg.Spec.Template.Spec.Containers) != 1 {
		return []string{"want one container in the agent's and the aggregator's pods"}
	}
	c := spec.Containers[0]
	got, dup := parseFlags(c.Args)
	p = append(p, dup...)
	for name := range AgentAggregatorFlags {
		if _, ok := got[name]; !ok {
			bad("flag %s missing", name)
		}
	}

	// The URL: the Service, its https port, a name of the certificate.
	if u, err := url.Parse(got["--aggregator-url"]); err != nil || u.Scheme != "https" || strings.Trim(u.Path, "/") != "" {
		bad("--aggregator-url %q: want https://<service>.<namespace>.svc (%v)", got["--aggregator-url"], err)
	} else {
		if want := svc.Name + "." + svc.Namespace + ".svc"; u.Hostname() != want {
			bad("--aggregator-url host %s, want the Service %s", u.Hostname(), want)
		}
		port := cmp.Or(u.Port(), "443")
		if !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool {
			return sp.Name == "https" && strconv.Itoa(int(sp.Port)) == port
		}) {
			bad("--aggregator-url port %s is not the Service's https port: %+v", port, svc.Spec.Ports)
		}
		if cert := Find(objs, "Certificate", "cgpilot-aggregator"); cert != nil {
			names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
			if !slices.Contains(names, u.Hostname()) {
				bad("--aggregator-url host %s is not a name of the serving certificate %v", u.Hostname(), names)
			}
		}
	}
	aggFlags, _ := parseFlags(agg.Spec.Template.Spec.Containers[0].Args) // TestAggregatorContract checks them
	if got["--aggregator-report-period"] != aggFlags["--report-period"] {
		bad("the agents' --aggregator-report-period %q is not the aggregator's --report-period", got["--aggregator-report-period"])
	}
	if spec.HostNetwork && spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		bad("dnsPolicy %s: a hostNetwork agent resolves the Service only with ClusterFirstWithHostNet", spec.DNSPolicy)
	}

	// The volumes behind the two files.
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	volumeOf := func(flag string) (corev1.Volume, bool) {
		dir := filepath.Dir(got[flag])
		for _, m := range c.VolumeMounts {
			if m.MountPath == dir {
				if !m.ReadOnly || m.SubPath != "" {
					bad("%s: %s is mounted %+v, want read-only and whole (a subPath never sees a rotated file)", flag, dir, m)
				}
				v, ok := vols[m.Name]
				return v, ok
			}
		}
		bad("%s: nothing is mounted at %s", flag, dir)
		return corev1.Volume{}, false
	}
	if tok, ok := volumeOf("--aggregator-token-file"); ok {
		if tok.Projected == nil || len(tok.Projected.Sources) != 1 || tok.Projected.Sources[0].ServiceAccountToken == nil {
			bad("token volume %+v: want a projected service-account token only", tok)
		} else {
			sat := tok.Projected.Sources[0].ServiceAccountToken
			if sat.Audience != auth.Audience || sat.Path != filepath.Base(got["--aggregator-token-file"]) ||
				sat.ExpirationSeconds == nil || *sat.ExpirationSeconds < minTokenSeconds || *sat.ExpirationSeconds > maxTokenSeconds {
				bad("projected token %+v: want audience %s, path %s, %d-%d s", sat, auth.Audience, filepath.Base(got["--aggregator-token-file"]), minTokenSeconds, maxTokenSeconds)
			}
		}
	}
	tlsSecret := ""
	for _, v := range agg.Spec.Template.Spec.Volumes {
		if v.Name == "tls" && v.Secret != nil {
			tlsSecret = v.Secret.SecretName
		}
	}
	if cert := Find(objs, "Certificate", "cgpilot-aggregator"); cert != nil {
		if name, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName"); name != tlsSecret {
			bad("the Certificate issues Secret %q, the aggregator serves %q", name, tlsSecret)
		}
	}
	// The aggregator publishes the CA of its Secret in its ConfigMap.
	aggMounts := map[string]string{}
	for _, m := range agg.Spec.Template.Spec.Containers[0].VolumeMounts {
		aggMounts[m.Name] = m.MountPath
	}
	if caFile := aggFlags["--tls-ca-file"]; caFile != filepath.Join(aggMounts["tls"], "ca.crt") || aggFlags["--ca-configmap"] == "" {
		bad("the aggregator publishes %q (--tls-ca-file) in ConfigMap %q (--ca-configmap): want ca.crt of its serving Secret, and a ConfigMap",
			caFile, aggFlags["--ca-configmap"])
	}
	ca, ok := volumeOf("--aggregator-ca-file")
	if ok {
		want := []corev1.KeyToPath{{Key: "ca.crt", Path: filepath.Base(got["--aggregator-ca-file"])}}
		if ca.ConfigMap == nil || ca.ConfigMap.Name != aggFlags["--ca-configmap"] || ca.ConfigMap.Optional == nil || !*ca.ConfigMap.Optional ||
			!slices.Equal(ca.ConfigMap.Items, want) {
			bad("CA volume %+v: want only ca.crt of the ConfigMap the aggregator publishes (%q), optional", ca, aggFlags["--ca-configmap"])
		}
	}
	for _, v := range spec.Volumes {
		reads := v.Secret != nil
		if v.Projected != nil {
			reads = reads || slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool { return s.Secret != nil })
		}
		if reads {
			bad("volume %s reads a Secret: the kubelet fetches a Secret whole onto every node (the aggregator's %s holds its key)", v.Name, tlsSecret)
		}
	}
	for _, e := range c.EnvFrom {
		if e.SecretRef != nil {
			bad("envFrom Secret %s: the agent reads no Secret", e.SecretRef.Name)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			bad("env %s from Secret %s: the agent reads no Secret", e.Name, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	return p
}

// TestAgentReportsWithTheComponent: with the aggregator component the
// agent gets exactly AgentAggregatorFlags besides its own, and what
// agentReportProblems checks holds.
func TestAgentReportsWithTheComponent(t *testing.T) {
	objs := render(t, ComponentAggregator)
	got := flags(t, agentDaemonSet(t, objs).Spec.Template.Spec.Containers[0].Args)
	for name, v := range AgentAggregatorFlags {
		if got[name] != v {
			t.Errorf("flag %s=%q, want %q", name, got[name], v)
		}
	}
	for name := range got {
		_, agent := AgentFlags[name]
		_, reports := AgentAggregatorFlags[name]
		if !agent && !reports {
			t.Errorf("flag %s is in no contract", name)
		}
	}
	for _, p := range agentReportProblems(objs) {
		t.Error(p)
	}
}

// TestAgentReportProblemsCatchMistakes: each mistake in the agent's
// reporting that agentReportProblems exists for is reported, so the
// renders' passing means something.
func TestAgentReportProblemsCatchMistakes(t *testing.T) {
	objs := render(t, ComponentAggregator)
	if p := agentReportProblems(objs); len(p) != 0 {
		t.Fatalf("the component's render: %v", p)
	}
	vol := func(ds *appsv1.DaemonSet, name string) *corev1.Volume {
		for i := range ds.Spec.Template.Spec.Volumes {
			if v := &ds.Spec.Template.Spec.Volumes[i]; v.Name == name {
				return v
			}
		}
		t.Fatalf("no volume %s", name)
		return nil
	}
	setArg := func(ds *appsv1.DaemonSet, flag, value string) {
		args := ds.Spec.Template.Spec.Containers[0].Args
		for i, a := range args {
			if strings.HasPrefix(a, flag+"=") {
				args[i] = flag + "=" + value
				return
			}
		}
		t.Fatalf("no flag %s", flag)
	}
	for name, mutate := range map[string]func(*appsv1.DaemonSet){
		"the CA from the serving Secret (issue 19)": func(ds *appsv1.DaemonSet) {
			yes := true
			vol(ds, "aggregator-ca").VolumeSource = corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "cgpilot-aggregator-tls",
				Optional: &yes, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}}
		},
		"the whole ConfigMap": func(ds *appsv1.DaemonSet) { vol(ds, "aggregator-ca").ConfigMap.Items = nil },
		"CA required":         func(ds *appsv1.DaemonSet) { vol(ds, "aggregator-ca").ConfigMap.Optional = nil },
		"another ConfigMap":   func(ds *appsv1.DaemonSet) { vol(ds, "aggregator-ca").ConfigMap.Name = "kube-root-ca.crt" },
		"another Secret": func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Volumes = append(ds.Spec.Template.Spec.Volumes, corev1.Volume{Name: "x",
				VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cgpilot-aggregator-tls"}}}}}}})
		},
		"the API server's audience": func(ds *appsv1.DaemonSet) {
			vol(ds, "aggregator-token").Projected.Sources[0].ServiceAccountToken.Audience = ""
		},
		"a day's token": func(ds *appsv1.DaemonSet) {
			day := int64(86400)
			vol(ds, "aggregator-token").Projected.Sources[0].ServiceAccountToken.ExpirationSeconds = &day
		},
		"writable token mount": func(ds *appsv1.DaemonSet) {
			for i, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
				if m.Name == "aggregator-token" {
					ds.Spec.Template.Spec.Containers[0].VolumeMounts[i].ReadOnly = false
				}
			}
		},
		"URL in another namespace": func(ds *appsv1.DaemonSet) {
			setArg(ds, "--aggregator-url", "https://cgpilot-aggregator.ops.svc")
		},
		"URL on the http port": func(ds *appsv1.DaemonSet) {
			setArg(ds, "--aggregator-url", "https://cgpilot-aggregator.cgpilot-system.svc:80")
		},
		"CA file elsewhere": func(ds *appsv1.DaemonSet) { setArg(ds, "--aggregator-ca-file", "/etc/ca.crt") },
		"another period":    func(ds *appsv1.DaemonSet) { setArg(ds, "--aggregator-report-period", "30s") },
		"no token flag": func(ds *appsv1.DaemonSet) {
			c := &ds.Spec.Template.Spec.Containers[0]
			c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--aggregator-token-file=") })
		},
		"default DNS": func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.DNSPolicy = corev1.DNSClusterFirst },
	} {
		t.Run(name, func(t *testing.T) {
			changed := make([]*unstructured.Unstructured, len(objs))
			for i, o := range objs {
				changed[i] = o.DeepCopy()
				if o.GetKind() != "DaemonSet" {
					continue
				}
				ds := agentDaemonSet(t, changed[i:i+1])
				mutate(ds)
				m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ds)
				if err != nil {
					t.Fatal(err)
				}
				changed[i].Object = m
			}
			if p := agentReportProblems(changed); len(p) == 0 {
				t.Error("not reported")
			} else {
				t.Log(p)
			}
		})
	}
}

// TestHelmAgentReportsInItsNamespace: installed elsewhere, with its own
// Secret name and period, the chart points the agents at the Service of
// the release namespace, at the CA the aggregator publishes from that
// Secret, at the aggregator's period (and all of agentReportProblems holds
// there too).
func TestHelmAgentReportsInItsNamespace(t *testing.T) {
	helm := helmBinary(t)
	b, err := Helm(context.Background(), helm, repoRoot(t), "ops", map[string]any{"aggregator": map[string]any{"enabled": true, "tlsSecretName": "my-tls", "reportPeriod": "30s"}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range agentReportProblems(objs) {
		t.Error(p)
	}
	spec := agentDaemonSet(t, objs).Spec.Template.Spec
	got := flags(t, spec.Containers[0].Args)
	if got["--aggregator-url"] != "https://cgpilot-aggregator.ops.svc" || got["--aggregator-report-period"] != "30s" {
		t.Errorf("flags %v: want the Service in ops and the period of the values", got)
	}
	agg := Find(objs, "Deployment", "cgpilot-aggregator")
	vols, _, _ := unstructured.NestedSlice(agg.Object, "spec", "template", "spec", "volumes")
	if !slices.ContainsFunc(vols, func(v any) bool {
		name, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName")
		return name == "my-tls"
	}) {
		t.Errorf("the aggregator does not serve Secret my-tls: %v", vols)
	}
}

// TestAggregatorChangesOnlyTheAgentsReporting: enabling the aggregator
// changes none of the agent's objects but its DaemonSet, and that only by
// the flags of AgentAggregatorFlags and the volumes agentReportVolumes
// with their mounts; so without it the agent is exactly as it was.
func TestAggregatorChangesOnlyTheAgentsReporting(t *testing.T) {
	check := func(t *testing.T, off, on map[string]map[string]any) {
		t.Helper()
		agent := map[string]map[string]any{}
		for k := range off {
			agent[k] = on[k]
			if o := on[k]; o != nil && o["kind"] == "DaemonSet" {
				args, mounts, vols := stripReporting(t, o)
				if args != len(AgentAggregatorFlags) || mounts != len(agentReportVolumes) || vols != len(agentReportVolumes) {
					t.Errorf("%s: removed %d flags, %d mounts, %d volumes; want %d, %d, %d", k, args, mounts, vols,
						len(AgentAggregatorFlags), len(agentReportVolumes), len(agentReportVolumes))
				}
			}
		}
		if d := Diff("without", off, "with the aggregator", agent); d != "" {
			t.Errorf("the aggregator changes the agent's objects beyond its reporting:\n%s", d)
		}
	}
	normalized := func(t *testing.T, objs []*unstructured.Unstructured) map[string]map[string]any {
		n, err := Normalize(objs)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Run("kustomize", func(t *testing.T) {
		check(t, normalized(t, render(t)), normalized(t, render(t, ComponentAggregator)))
		check(t, normalized(t, render(t, ComponentCgroupV2Systemd, ComponentMetrics)),
			normalized(t, render(t, ComponentCgroupV2Systemd, ComponentMetrics, ComponentAggregator)))
	})
	t.Run("helm", func(t *testing.T) {
		helm, root := helmBinary(t), repoRoot(t)
		values := func(enabled bool) map[string]any {
			return map[string]any{"createNamespace": true, "aggregator": map[string]any{"enabled": enabled}}
		}
		check(t, helmNormalized(t, helm, root, values(false)), helmNormalized(t, helm, root, values(true)))
	})
}

// stripReporting removes the agent's reporting (the flags of
// AgentAggregatorFlags, the volumes agentReportVolumes and their mounts)
// from a normalised DaemonSet in place and counts what it removed.
func stripReporting(t *testing.T, ds map[string]any) (args, mounts, vols int) {
	t.Helper()
	spec, ok, err := unstructured.NestedMap(ds, "spec", "template", "spec")
	if !ok || err != nil {
		t.Fatalf("DaemonSet without a pod spec: %v", err)
	}
	drop := func(l []any, match func(any) bool) ([]any, int) {
		kept := slices.DeleteFunc(slices.Clone(l), match)
		return kept, len(l) - len(kept)
	}
	named := func(x any) bool {
		m, _ := x.(map[string]any)
		name, _ := m["name"].(string)
		return slices.Contains(agentReportVolumes, name)
	}
	var n int
	spec["volumes"], vols = drop(spec["volumes"].([]any), named)
	ctrs := spec["containers"].([]any)
	for _, ci := range ctrs {
		c := ci.(map[string]any)
		c["volumeMounts"], n = drop(c["volumeMounts"].([]any), named)
		mounts += n
		c["args"], n = drop(c["args"].([]any), func(x any) bool {
			name, _, _ := strings.Cut(fmt.Sprint(x), "=")
			_, ok := AgentAggregatorFlags[name]
			return ok
		})
		args += n
	}
	if err := unstructured.SetNestedMap(ds, spec, "spec", "template", "spec"); err != nil {
		t.Fatal(err)
	}
	return args, mounts, vols
}
