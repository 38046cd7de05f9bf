package agent

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// EventRecord is one Event as the local API serves it.
type EventRecord struct {
	Time      time.Time `json:"time"`
	Type      string    `json:"type"` // Normal | Warning
	Reason    string    `json:"reason"`
	Namespace string    `json:"namespace,omitempty"`
	Pod       string    `json:"pod,omitempty"`
	UID       string    `json:"uid,omitempty"`
	Message   string    `json:"message"`
}

// eventLog sends Events to the API server (through client-go's
// aggregating recorder) and keeps the last ones for `cgpilotctl events`.
type eventLog struct {
	rec     record.EventRecorder // nil in unit tests
	node    *corev1.ObjectReference
	metrics *metrics
	mu      sync.Mutex
	ring    []EventRecord
	next    int
	full    bool
}

const eventRingSize = 512

func newEventLog(rec record.EventRecorder, nodeName string, m *metrics) *eventLog {
	return &eventLog{
		rec:     rec,
		node:    &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName), APIVersion: "v1"},
		metrics: m,
		ring:    make([]EventRecord, eventRingSize),
	}
}

func (l *eventLog) emit(_ context.Context, who *knownPod, ev podEvent) {
	typ := corev1.EventTypeNormal
	if ev.Warning {
		typ = corev1.EventTypeWarning
	}
	r := EventRecord{Time: time.Now(), Type: typ, Reason: ev.Reason, Message: ev.Message}
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
func (l *eventLog) Recent(namespace, pod string) []EventRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []EventRecord
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
