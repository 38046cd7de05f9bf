package agent

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/cgpilot/cgpilot/agent/pools"
	local "github.com/cgpilot/cgpilot/api/local"
)

// podRef names a pod an Event is about.
type podRef struct{ UID, Namespace, Name string }

// eventLog sends Events to the API server (through client-go's
// aggregating recorder) and keeps the last ones for `cgpilotctl events`.
type eventLog struct {
	rec  record.EventRecorder // nil in unit tests
	node *corev1.ObjectReference
	mu   sync.Mutex
	ring []local.EventRecord
	next int
	full bool
}

const eventRingSize = 512

func newEventLog(rec record.EventRecorder, nodeName string) *eventLog {
	return &eventLog{
		rec:  rec,
		node: &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName), APIVersion: "v1"},
		ring: make([]local.EventRecord, eventRingSize),
	}
}

// emit records ev about who (the Node when nil).
func (l *eventLog) emit(who *podRef, ev pools.Event) {
	typ := corev1.EventTypeNormal
	if ev.Warning {
		typ = corev1.EventTypeWarning
	}
	r := local.EventRecord{Time: time.Now(), Type: typ, Reason: ev.Reason, Message: ev.Message}
	ref := l.node
	if who != nil {
		r.Namespace, r.Pod, r.UID = who.Namespace, who.Name, who.UID
		ref = &corev1.ObjectReference{Kind: "Pod", Namespace: who.Namespace, Name: who.Name, UID: types.UID(who.UID), APIVersion: "v1"}
	}
	if l.rec != nil {
		l.rec.Event(ref, typ, ev.Reason, ev.Message)
	}
	l.mu.Lock()
	l.ring[l.next] = r
	l.next = (l.next + 1) % len(l.ring)
	if l.next == 0 {
		l.full = true
	}
	l.mu.Unlock()
}

// Recent returns the kept events, oldest first; pod filters by
// namespace/name when not empty.
func (l *eventLog) Recent(namespace, pod string) []local.EventRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []local.EventRecord{}
	start, n := 0, l.next
	if l.full {
		start, n = l.next, len(l.ring)
	}
	for i := 0; i < n; i++ {
		r := l.ring[(start+i)%len(l.ring)]
		if pod != "" && (r.Pod != pod || r.Namespace != namespace) {
			continue
		}
		out = append(out, r)
	}
	return out
}
