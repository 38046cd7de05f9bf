//go:build linux

package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/cgpilot/cgpilot/api/v1alpha1"
)

func event(typ, ns, kind, name, reason string) corev1.Event {
	return corev1.Event{Type: typ, Reason: reason, Message: "m",
		InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: ns, Name: name}}
}

// TestWarnings: only the host's cgroup v1 notice and the hog's OOM kills
// are expected; every other Warning is named, Normal events are ignored.
func TestWarnings(t *testing.T) {
	evs := &corev1.EventList{Items: []corev1.Event{
		event(corev1.EventTypeWarning, "", "Node", "cgpilot-node", "CgroupV1"),
		event(corev1.EventTypeWarning, "default", "Service", "kubernetes", "ClusterIPNotAllocated"),
		event(corev1.EventTypeWarning, "default", "Service", "web", "ClusterIPNotAllocated"),
		event(corev1.EventTypeWarning, Namespace, "Pod", HogPod, "OOMKilled"),
		event(corev1.EventTypeWarning, Namespace, "Pod", "web-1", "OOMKilled"),
		event(corev1.EventTypeWarning, agentNS, "Pod", "cgpilot-agent-x", "Unhealthy"),
		event(corev1.EventTypeWarning, Namespace, "Pod", HogPod, "MemoryRaiseFailed"),
		event(corev1.EventTypeNormal, Namespace, "Pod", HogPod, "MemoryRaised"),
	}}
	expected, others, err := warnings(context.Background(), expectedOn(false), func(context.Context) (*corev1.EventList, error) { return evs, nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(expected) != 3 || len(others) != 4 {
		t.Fatalf("expected %q, others %q: want 3 and 4", expected, others)
	}
	for _, want := range []string{"demo/Pod/web-1 OOMKilled", "default/Service/web ClusterIPNotAllocated", "cgpilot-system/Pod/cgpilot-agent-x Unhealthy", "demo/Pod/hog MemoryRaiseFailed"} {
		if !strings.Contains(strings.Join(others, "\n"), want) {
			t.Errorf("others %q lack %q", others, want)
		}
	}
	if _, _, err := warnings(context.Background(), expectedOn(false), func(context.Context) (*corev1.EventList, error) { return nil, errors.New("down") }); !errors.Is(err, ErrDemo) {
		t.Errorf("list error: %v, want ErrDemo", err)
	}
}

// TestWarningsCgroupV2: on a cgroup v2 node the kubelet's CgroupV1
// notice is not expected (it would mean the node is not what the demo
// says); the others stay as on v1.
func TestWarningsCgroupV2(t *testing.T) {
	evs := &corev1.EventList{Items: []corev1.Event{
		event(corev1.EventTypeWarning, "", "Node", "cgpilot-node", "CgroupV1"),
		event(corev1.EventTypeWarning, "default", "Service", "kubernetes", "ClusterIPNotAllocated"),
		event(corev1.EventTypeWarning, Namespace, "Pod", HogPod, "OOMKilled"),
	}}
	expected, others, err := warnings(context.Background(), expectedOn(true), func(context.Context) (*corev1.EventList, error) { return evs, nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(expected) != 2 || len(others) != 1 || !strings.Contains(others[0], "CgroupV1") {
		t.Errorf("expected %q, others %q: want the CgroupV1 notice alone unexpected", expected, others)
	}
	// The hog's restarts (memory.oom.group) are expected on v2 only, and
	// only of the hog.
	evs = &corev1.EventList{Items: []corev1.Event{
		event(corev1.EventTypeWarning, Namespace, "Pod", HogPod, "BackOff"),
		event(corev1.EventTypeWarning, Namespace, "Pod", HogPod, "ResizeError"),
		event(corev1.EventTypeWarning, Namespace, "Pod", "web-1", "BackOff"),
	}}
	for _, unified := range []bool{false, true} {
		expected, others, err := warnings(context.Background(), expectedOn(unified), func(context.Context) (*corev1.EventList, error) { return evs, nil })
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{false: 0, true: 2}[unified]; len(expected) != want || len(others) != 3-want {
			t.Errorf("unified %v: expected %q, others %q: want %d expected", unified, expected, others, want)
		}
	}
}

// TestWarningsUnderEmulation: under Slow a failed readiness or liveness
// probe of a cgpilot-system pod is expected; another Unhealthy event, or
// one of another namespace, is not, and without Slow neither is.
func TestWarningsUnderEmulation(t *testing.T) {
	probe := func(ns, name, msg string) corev1.Event {
		e := event(corev1.EventTypeWarning, ns, "Pod", name, "Unhealthy")
		e.Message = msg
		return e
	}
	evs := &corev1.EventList{Items: []corev1.Event{
		probe(agentNS, "cgpilot-agent-x", "Readiness probe failed: HTTP probe failed with statuscode: 503"),
		probe(agentNS, "cgpilot-aggregator-y", "Readiness probe failed: Get \"http://127.0.0.1:1/readyz\": context deadline exceeded"),
		probe(agentNS, "cgpilot-agent-x", "Liveness probe failed: HTTP probe failed with statuscode: 503"),
		probe(agentNS, "cgpilot-agent-x", "Startup script failed"),
		probe(Namespace, "web-1", "Readiness probe failed: timeout"),
	}}
	for _, slow := range []bool{false, true} {
		expected, others, err := warnings(context.Background(), expectedFor(true, slow), func(context.Context) (*corev1.EventList, error) { return evs, nil })
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{false: 0, true: 3}[slow]; len(expected) != want || len(others) != 5-want {
			t.Errorf("slow %v: expected %q, others %q: want %d expected", slow, expected, others, want)
		}
	}
}

// TestWarningsWhileStopping: a failed readiness or liveness probe of an
// agent pod is expected only at or after the kubelet's Killing event of
// that same pod; before it, or of another pod, it is a failure.
func TestWarningsWhileStopping(t *testing.T) {
	at := func(ev corev1.Event, uid string, sec int, msg string) corev1.Event {
		ev.InvolvedObject.UID = types.UID(uid)
		ev.FirstTimestamp = metav1.NewTime(time.Date(2026, 11, 26, 0, 16, sec, 0, time.UTC))
		ev.Message = msg
		return ev
	}
	refused := "Readiness probe failed: Get \"http://127.0.0.1:43691/readyz\": dial tcp 127.0.0.1:43691: connect: connection refused"
	killing := at(event(corev1.EventTypeNormal, agentNS, "Pod", "cgpilot-agent-a", "Killing"), "a", 36, "Stopping container agent")
	for _, tc := range []struct {
		name string
		ev   corev1.Event
		want bool // expected
	}{
		{"readiness after Killing", at(event(corev1.EventTypeWarning, agentNS, "Pod", "cgpilot-agent-a", "Unhealthy"), "a", 37, refused), true},
		{"readiness in Killing's second", at(event(corev1.EventTypeWarning, agentNS, "Pod", "cgpilot-agent-a", "Unhealthy"), "a", 36, refused), true},
		{"readiness before Killing", at(event(corev1.EventTypeWarning, agentNS, "Pod", "cgpilot-agent-a", "Unhealthy"), "a", 35, refused), false},
		{"readiness of a pod not stopped", at(event(corev1.EventTypeWarning, agentNS, "Pod", "cgpilot-agent-b", "Unhealthy"), "b", 40, refused), false},
		{"liveness after Killing", at(event(corev1.EventTypeWarning, agentNS, "Pod", "cgpilot-agent-a", "Unhealthy"), "a", 37, "Liveness probe failed: connection refused"), true},
		{"liveness before Killing", at(event(corev1.EventTypeWarning, agentNS, "Pod", "cgpilot-agent-a", "Unhealthy"), "a", 30, "Liveness probe failed: HTTP probe failed with statuscode: 503"), false},
		{"startup probe after Killing", at(event(corev1.EventTypeWarning, agentNS, "Pod", "cgpilot-agent-a", "Unhealthy"), "a", 37, "Startup probe failed: connection refused"), false},
		{"another namespace's pod", at(event(corev1.EventTypeWarning, Namespace, "Pod", "cgpilot-agent-a", "Unhealthy"), "a", 37, refused), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := &corev1.EventList{Items: []corev1.Event{killing, tc.ev}}
			expected, others, err := warnings(context.Background(), expectedOn(false), func(context.Context) (*corev1.EventList, error) { return evs, nil })
			if err != nil {
				t.Fatal(err)
			}
			if got := len(expected) == 1 && len(others) == 0; got != tc.want {
				t.Errorf("expected %q, others %q: want expected=%v", expected, others, tc.want)
			}
		})
	}
}

// TestRightsizeWorkloads: the manifest the demo applies holds two valid
// InPlace policies, each selecting its workload, with the windows the demo
// prints.
func TestRightsizeWorkloads(t *testing.T) {
	var policies []v1alpha1.RightsizePolicy
	kinds := map[string]int{}
	for _, o := range rightsizeWorkloads() {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(b, &meta); err != nil {
			t.Fatal(err)
		}
		kinds[meta.Kind]++
		if meta.Kind != "RightsizePolicy" {
			continue
		}
		js, err := yaml.YAMLToJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		var p v1alpha1.RightsizePolicy
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("policy %s: %v", b, err)
		}
		policies = append(policies, p)
	}
	if kinds["RightsizePolicy"] != 2 || kinds["Deployment"] != 1 || kinds["Pod"] != 1 {
		t.Fatalf("kinds %v", kinds)
	}
	for _, p := range policies {
		if p.Spec.Mode != v1alpha1.ModeInPlace || p.Spec.PodSelector == nil || p.Spec.NamespaceSelector == nil {
			t.Errorf("policy %s: %+v", p.Name, p.Spec)
		}
	}
	web := policies[0]
	if web.Spec.Step == nil || web.Spec.Step.Duration != webStep || web.Spec.MinHistory == nil || web.Spec.MinHistory.Duration != WebMinHistory ||
		web.Spec.PodSelector.MatchLabels["app"] != "web" {
		t.Errorf("web policy %+v: want step %v, minHistory %v, app=web", web.Spec, webStep, WebMinHistory)
	}
}
