//go:build linux

package demo

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgpilot/cgpilot/cgroup"
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
	cgroupV1Warning,
	{"default", "Service", "kubernetes", "ClusterIPNotAllocated", "kube-apiserver's repair of its own Service at a fresh start"},
	{Namespace, "Pod", HogPod, "OOMKilled", "the kills the memory hog asks for"},
}

var cgroupV1Warning = expectedWarning{"", "Node", "", "CgroupV1", "the kubelet's note that this host runs cgroup v1"}

// v2Warnings are expected on a cgroup v2 node only, of the hog alone: the
// kubelet sets memory.oom.group there, so each OOM ends the hog's whole
// container (on v1 only dd dies): the kubelet backs off before its second
// restart, and its resize of the container the agent raised may find it
// stopped ("cannot update a stopped container").
var v2Warnings = []expectedWarning{
	{Namespace, "Pod", HogPod, "BackOff", "the kubelet's back-off between the hog's restarts: on cgroup v2 an OOM ends its whole container (memory.oom.group)"},
	{Namespace, "Pod", HogPod, "ResizeError", "the kubelet's resize of the hog's container while an OOM had stopped it (cgroup v2: memory.oom.group)"},
}

// expectedOn is expectedWarnings for a host on cgroup v2 (unified) or v1:
// a v2 node's kubelet has no CgroupV1 notice to give, so there one is a
// failure; v2Warnings are expected there instead.
func expectedOn(unified bool) []expectedWarning {
	if !unified {
		return expectedWarnings
	}
	var e []expectedWarning
	for _, w := range expectedWarnings {
		if w != cgroupV1Warning {
			e = append(e, w)
		}
	}
	return append(e, v2Warnings...)
}

// emulationWarnings are expected only under emulation (Options.Slow: the
// v2 VM's TCG), in cgpilot-system: a readiness or liveness probe (1 s
// timeout) that failed while a pod was still starting or an answer took
// longer (both seen in make demo-v2 runs, with no restart).
var emulationWarnings = []expectedWarning{
	{agentNS, "Pod", "", "Unhealthy", "a probe under TCG emulation, where a start or an answer takes ten times as long"},
}

// isProbe: emulationWarnings cover probe failures only.
func isProbe(ev corev1.Event) bool {
	return strings.HasPrefix(ev.Message, "Readiness probe") || strings.HasPrefix(ev.Message, "Liveness probe")
}

func (e expectedWarning) matches(ev corev1.Event) bool {
	if e == emulationWarnings[0] && !isProbe(ev) {
		return false
	}
	o := ev.InvolvedObject
	return o.Kind == e.kind && ev.Reason == e.reason && (e.name == "" || o.Name == e.name) && (e.namespace == "" || o.Namespace == e.namespace)
}

// whyStopping is why a failed probe of an agent pod the kubelet was
// stopping is expected: the kubelet keeps probing readiness through a
// container's termination (kubernetes/kubernetes#122824, on purpose: load
// balancers see the pod leave), and liveness until its worker sees the
// pod's deletion; the agent serves its probes until its last moment, but a
// probe sent between the process's exit and the kubelet's next look at the
// container is refused. Nothing is restarted for it. A failure before the
// kubelet's "Killing" of the same pod stays a failure.
const whyStopping = "a probe while the kubelet stopped this agent pod, at or after its Killing event (the kubelet probes through termination)"

// stoppingSince maps the UID of each pod the kubelet stopped a container
// of to the time of its first "Killing" event.
func stoppingSince(evs []corev1.Event) map[string]time.Time {
	since := map[string]time.Time{}
	for _, ev := range evs {
		if ev.Reason != "Killing" || ev.InvolvedObject.Kind != "Pod" {
			continue
		}
		at, uid := eventTime(ev), string(ev.InvolvedObject.UID)
		if t, ok := since[uid]; !ok || at.Before(t) {
			since[uid] = at
		}
	}
	return since
}

// eventTime is when an event first happened (the kubelet sets
// FirstTimestamp, newer recorders EventTime).
func eventTime(ev corev1.Event) time.Time {
	if !ev.FirstTimestamp.IsZero() {
		return ev.FirstTimestamp.Time
	}
	return ev.EventTime.Time
}

// probedWhileStopping: ev is a failed readiness or liveness probe of an
// agent pod at or after the kubelet began to stop it (event times have
// whole seconds).
func probedWhileStopping(ev corev1.Event, stopping map[string]time.Time) bool {
	o := ev.InvolvedObject
	if o.Kind != "Pod" || o.Namespace != agentNS || ev.Reason != "Unhealthy" ||
		!(strings.HasPrefix(ev.Message, "Readiness probe") || strings.HasPrefix(ev.Message, "Liveness probe")) {
		return false
	}
	since, ok := stopping[string(o.UID)]
	return ok && !eventTime(ev).Before(since)
}

// Warnings lists the Warning Events of every namespace, split into the
// expected ones and the others, one line each ("ns/Kind/name Reason
// (count, first hh:mm:ss): message", and when the kubelet began to stop
// that pod).
// The expected ones are those of this host's cgroup mode.
func Warnings(ctx context.Context, list func(context.Context) (*corev1.EventList, error)) (expected, others []string, err error) {
	return WarningsOn(ctx, false, list)
}

// WarningsOn is Warnings of a demo run with Options.Slow = slow.
func WarningsOn(ctx context.Context, slow bool, list func(context.Context) (*corev1.EventList, error)) (expected, others []string, err error) {
	m, err := cgroup.ReadMounts("/proc")
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrDemo, err)
	}
	return warnings(ctx, expectedFor(m.Mode == cgroup.ModeUnified, slow), list)
}

// expectedFor is expectedOn, and emulationWarnings when slow.
func expectedFor(unified, slow bool) []expectedWarning {
	e := expectedOn(unified)
	if slow {
		e = append(append([]expectedWarning{}, e...), emulationWarnings...)
	}
	return e
}

func warnings(ctx context.Context, want []expectedWarning, list func(context.Context) (*corev1.EventList, error)) (expected, others []string, err error) {
	evs, err := list(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: list events: %v", ErrDemo, err)
	}
	stopping := stoppingSince(evs.Items)
	for _, ev := range evs.Items {
		if ev.Type != corev1.EventTypeWarning {
			continue
		}
		o := ev.InvolvedObject
		line := fmt.Sprintf("%s/%s/%s %s (%d, first %s): %s", o.Namespace, o.Kind, o.Name, ev.Reason, max(ev.Count, 1),
			eventTime(ev).UTC().Format("15:04:05"), strings.TrimSpace(ev.Message))
		if t, ok := stopping[string(o.UID)]; ok && o.UID != "" {
			line += fmt.Sprintf(" (the kubelet stopped this pod from %s)", t.UTC().Format("15:04:05"))
		}
		ok := false
		for _, e := range want {
			if e.matches(ev) {
				ok = true
				line += " [expected: " + e.why + "]"
			}
		}
		if !ok && probedWhileStopping(ev, stopping) {
			ok = true
			line += " [expected: " + whyStopping + "]"
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
	expected, others, err := warnings(ctx, expectedFor(r.cr.unified, r.o.Slow), func(ctx context.Context) (*corev1.EventList, error) {
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
