package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/cgpilot/cgpilot/agent/kube/kubetest"
	aggkube "github.com/cgpilot/cgpilot/aggregator/kube"
	"github.com/cgpilot/cgpilot/api/v1alpha1"
	"github.com/cgpilot/cgpilot/api/v1alpha1/policy"
)

// TestPoliciesAgentAndAggregatorAgree is the property test of issue 20:
// random policies, namespaces and pods, served by one fake API server,
// are resolved by the agent's policy index and by the aggregator's policy
// cache (the webhook's matcher and the store's Info), each through its
// own informers, and both must give the same policies for every pod, with
// the same compiled values (preset, overrides in cores and bytes,
// minHistory, step) and the same verdict on every policy's validity.
// Before the compiler they disagreed on CPU bounds ("300m", "1e20"),
// minHistory's default and a namespace not cached yet.
func TestPoliciesAgentAndAggregatorAgree(t *testing.T) {
	rounds, pods := 40, 250
	if testing.Short() {
		rounds = 10
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	cases, matched, undecided, invalid := 0, 0, 0, 0
	for round := 0; round < rounds; round++ {
		objs, nss, names := randomCluster(rng)
		agent, agg := bothResolvers(t, objs, nss)
		for _, name := range names {
			ae, aok := agent.index.Get(name)
			ge, gok := agg.Get(name)
			if !aok || !gok || (ae.Err == nil) != (ge.Err == nil) {
				t.Fatalf("round %d policy %s: agent %v %+v, aggregator %v %+v\n%s", round, name, aok, ae, gok, ge, dump(objs))
			}
			if ae.Err != nil {
				invalid++
				if _, ok := agg.Info(name); ok {
					t.Fatalf("round %d: the aggregator's store resolves invalid policy %s", round, name)
				}
				continue
			}
			info, ok := agg.Info(name)
			if want := aggkube.Info(ae.Policy); !ok || !reflect.DeepEqual(info, want) {
				t.Fatalf("round %d policy %s: the aggregator's store reads %+v, the agent acts on %+v\n%s", round, name, info, want, dump(objs))
			}
		}
		for i := 0; i < pods; i++ {
			pod := randomPod(rng, nss)
			a := agent.match(pod)
			g, u := agg.Match(pod.Namespace, pod.Labels)
			if policyNames(a) != policyNames(g) {
				t.Fatalf("round %d: pod %s/%v: agent %s, aggregator %s (undecided %v)\n%s", round, pod.Namespace, pod.Labels,
					policyNames(a), policyNames(g), u, dump(objs))
			}
			for j := range a {
				if pa, pg := project(a[j]), project(g[j]); !reflect.DeepEqual(pa, pg) {
					t.Fatalf("round %d: %s compiled differently:\nagent      %+v\naggregator %+v", round, a[j].Name, pa, pg)
				}
			}
			cases++
			if len(a) > 0 {
				matched++
			}
			if len(u) > 0 {
				undecided++
			}
		}
	}
	t.Logf("%d pods in %d rounds resolved alike: %d matched some policy, %d had an undecided one; %d invalid policies refused by both",
		cases, rounds, matched, undecided, invalid)
	if matched == 0 || undecided == 0 || invalid == 0 || matched == cases {
		t.Errorf("the generator does not cover the cases: %d matched, %d undecided, %d invalid of %d", matched, undecided, invalid, cases)
	}
}

// bothResolvers starts the agent's and the aggregator's resolution over
// one fake API server holding objs (policies) and nss (namespaces).
func bothResolvers(t *testing.T, objs []runtime.Object, nss []runtime.Object) (*policyIndex, *aggkube.Policies) {
	t.Helper()
	cs := fake.NewClientset(nss...)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1alpha1.RightsizePolicies: "RightsizePolicyList"}, objs...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pi, err := newPolicyIndex(kubetest.New(cs, dyn), time.Hour, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	go pi.namespaces.RunWithContext(ctx)
	go pi.informer.RunWithContext(ctx)
	agg := aggkube.NewPolicies(dyn, cs, time.Hour)
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := agg.Start(sctx); err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(sctx.Done(), pi.hasSynced) {
		t.Fatal("the agent's policy index did not sync")
	}
	return pi, agg
}

var (
	labelKeys   = []string{"team", "app", "tier", "kubernetes.io/metadata.name"}
	labelValues = []string{"web", "shop", "db", "a"}
	quantities  = []string{"300m", "700m", "1", "2500m", "1e20", "9223372036854775807", "1.5u", "64Mi", "1Gi", "1500M", "100Ei", "0.1"}
)

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.Intn(len(xs))] }

func randomLabels(rng *rand.Rand, n int) map[string]any {
	m := map[string]any{}
	for i := 0; i < n; i++ {
		m[pick(rng, labelKeys)] = pick(rng, labelValues)
	}
	return m
}

func randomSelector(rng *rand.Rand) map[string]any {
	switch rng.Intn(4) {
	case 0:
		return nil
	case 1:
		return map[string]any{"matchLabels": randomLabels(rng, 1+rng.Intn(2))}
	}
	var exprs []any
	for i := 0; i <= rng.Intn(2); i++ {
		op := pick(rng, []string{"In", "NotIn", "Exists", "DoesNotExist", "In", "Near"})
		e := map[string]any{"key": pick(rng, labelKeys), "operator": op}
		if op == "In" || op == "NotIn" || op == "Near" {
			e["values"] = []any{pick(rng, labelValues), pick(rng, labelValues)}
		}
		exprs = append(exprs, e)
	}
	return map[string]any{"matchExpressions": exprs}
}

func randomResource(rng *rand.Rand) map[string]any {
	if rng.Intn(3) == 0 {
		return nil
	}
	r := map[string]any{}
	if rng.Intn(2) == 0 {
		r["minAllowed"] = pick(rng, quantities)
	}
	if rng.Intn(2) == 0 {
		r["maxAllowed"] = pick(rng, quantities)
	}
	if rng.Intn(3) == 0 {
		r["targetSaturation"] = pick(rng, []any{0.5, 0.8, 1.0})
	}
	if rng.Intn(4) == 0 {
		r["percentile"] = pick(rng, []any{0.9, 0.99})
	}
	return r
}

// randomCluster makes 1-6 policies (valid and not) and 2-4 namespaces;
// "fresh" is never created: a namespace the caches do not know yet.
func randomCluster(rng *rand.Rand) (pols []runtime.Object, nss []runtime.Object, names []string) {
	for i := 0; i < 1+rng.Intn(6); i++ {
		name := fmt.Sprintf("p%d", i)
		spec := map[string]any{"mode": pick(rng, []string{"Off", "DryRun", "InPlace", "Auto"})}
		set := func(k string, v any) {
			if v != nil && !reflect.ValueOf(v).IsNil() {
				spec[k] = v
			}
		}
		set("namespaceSelector", randomSelector(rng))
		set("podSelector", randomSelector(rng))
		set("cpu", randomResource(rng))
		set("memory", randomResource(rng))
		if rng.Intn(2) == 0 {
			spec["preset"] = pick(rng, []string{"cgpilot-balanced", "cgpilot-slo", "vpa", "platform-sl-0.6", "nope"})
		}
		if rng.Intn(2) == 0 {
			spec["minHistory"] = pick(rng, []string{"0s", "30m", "24h", "48h"})
		}
		if rng.Intn(2) == 0 {
			spec["step"] = pick(rng, []string{"20s", "1h", "90m"})
		}
		if rng.Intn(4) == 0 {
			spec["podTargetSaturation"] = map[string]any{"min": pick(rng, []any{0.2, 0.5, 0.9}), "max": pick(rng, []any{0.8, 1.0})}
		}
		pols = append(pols, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cgpilot.io/v1alpha1", "kind": "RightsizePolicy",
			"metadata": map[string]any{"name": name, "resourceVersion": "1", "generation": int64(1)}, "spec": spec}})
		names = append(names, name)
	}
	for i, name := range []string{"shop", "web", "db", "plain"}[:2+rng.Intn(3)] {
		labels := map[string]string{}
		for k, v := range randomLabels(rng, rng.Intn(3)) {
			labels[k] = v.(string)
		}
		if i%2 == 0 { // as the API server does; the others lack it, as a fake or an old cluster may
			labels["kubernetes.io/metadata.name"] = name
		}
		nss = append(nss, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
	}
	return pols, nss, names
}

func randomPod(rng *rand.Rand, nss []runtime.Object) *corev1.Pod {
	ns := "fresh"
	if rng.Intn(5) > 0 {
		ns = pick(rng, nss).(*corev1.Namespace).Name
	}
	labels := map[string]string{}
	for k, v := range randomLabels(rng, rng.Intn(4)) {
		labels[k] = v.(string)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Labels: labels}}
}

func policyNames(ps []*policy.Policy) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// project is what the agent, the store and the webhook act on of a
// compiled policy.
func project(p *policy.Policy) string {
	lo, hi := p.Allowed()
	b, _ := json.Marshal([]any{p.Mode, p.Preset, p.Overrides, p.Step, p.MinHistory, p.Limits, p.MaxChangePerStep, p.OOMFactor,
		p.PodTargetSaturation, p.AllowPodModeOverride, p.MaxOOMBumpsPerDay, lo, hi, len(p.Avoid)})
	return string(b)
}

func dump(objs []runtime.Object) string {
	var b strings.Builder
	for _, o := range objs {
		j, _ := json.Marshal(o)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}
