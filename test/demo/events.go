//go:build linux

package demo

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// expectedWarning is a Warning Event a normal demo run produces on
// purpose or that the host causes, with the reason the demo gives for it.
type expectedWarning struct {
	namespace, kind, name, reason string
	why                           string
}

// expectedWarnings: the kubelet warns once at start that the host runs
// cgroup v1; a freshly started kube-apiserver sometimes repairs the
// kubernetes Service's ClusterIP, created before its IP allocation was
// recorded (its own bootstrap race, nothing of cgpilot's); and the agent
// reports each OOM kill of the memory hog, which the demo provokes. Any
// other Warning is a failure.
var expectedWarnings = []expectedWarning{
	{"", "Node", "", "CgroupV1", "the kubelet's note that this host runs cgroup v1"},
	{"default", "Service", "kubernetes", "ClusterIPNotAllocated", "kube-apiserver's repair of its own Service at a fresh start"},
	{Namespace, "Pod", HogPod, "OOMKilled", "the kills the memory hog asks for"},
}

func (e expectedWarning) matches(ev corev1.Event) bool {
	o := ev.InvolvedObject
	return o.Kind == e.kind && ev.Reason == e.reason && (e.name == "" || o.Name == e.name) && (e.namespace == "" || o.Namespace == e.namespace)
}

// Warnings lists the Warning Events of every namespace, split into the
// expected ones and the others, one line each ("ns/Kind/name Reason
// (count): message").
func Warnings(ctx context.Context, list func(context.Context) (*corev1.EventList, error)) (expected, others []string, err error) {
	evs, err := list(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: list events: %v", ErrDemo, err)
	}
	for _, ev := range evs.Items {
		if ev.Type != corev1.EventTypeWarning {
			continue
		}
		o := ev.InvolvedObject
		line := fmt.Sprintf("%s/%s/%s %s (%d): %s", o.Namespace, o.Kind, o.Name, ev.Reason, max(ev.Count, 1), strings.TrimSpace(ev.Message))
		ok := false
		for _, e := range expectedWarnings {
			if e.matches(ev) {
				ok = true
				line += " [expected: " + e.why + "]"
			}
		}
		if ok {
			expected = append(expected, line)
		} else {
			others = append(others, line)
		}
	}
	sort.Strings(expected)
	sort.Strings(others)
	return expected, others, nil
}

// checkEvents fails naming every unexpected Warning Event, and shows the
// agent's own event log.
func (r *run) checkEvents(ctx context.Context) error {
	expected, others, err := Warnings(ctx, func(ctx context.Context) (*corev1.EventList, error) {
		return r.cs.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	})
	if err != nil {
		return err
	}
	r.res.AllowedWarnings = expected
	if len(others) > 0 {
		return fmt.Errorf("%w: %d unexpected Warning Events:\n  %s", ErrDemo, len(others), strings.Join(others, "\n  "))
	}
	r.logf("no unexpected Warning Event in any namespace; the expected ones:")
	for _, l := range expected {
		r.logf("  %s", l)
	}
	evs, err := ctl(ctx, r.res.Cgpilotctl, "events", r.res.Socket)
	if err != nil {
		return err
	}
	lines := strings.Split(evs, "\n")
	if len(lines) > 16 {
		lines = append(lines[:1], lines[len(lines)-15:]...)
	}
	fmt.Fprintf(r.out, "\n$ cgpilotctl events   (the last 15)\n%s\n", strings.Join(lines, "\n"))
	return nil
}
