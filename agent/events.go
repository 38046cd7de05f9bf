package agent

import (
	"context"
	"errors"
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

// gatedSink is the recorder's way to the API server. client-go's
// broadcaster does not wait for a write in flight when it shuts down, so
// the agent does: close refuses new writes, cancels the one in flight
// and waits for it, and no write outlives Run. client-go's writer
// goroutine itself cannot be waited for: after Run it may still drop the
// Events queued before the end, each refused here at once.
type gatedSink struct {
	sink   record.EventSink
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// errSinkClosed is what a write after close gets (the broadcaster logs it
// and drops the Event).
var errSinkClosed = errors.New("the agent is stopping: Event not written")

// newGatedSink returns a sink whose writes use a context of its own.
func newGatedSink(events func(context.Context) record.EventSink) *gatedSink {
	ctx, cancel := context.WithCancel(context.Background())
	return &gatedSink{sink: events(ctx), cancel: cancel}
}

func (g *gatedSink) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

func (g *gatedSink) Create(e *corev1.Event) (*corev1.Event, error) {
	if !g.enter() {
		return nil, errSinkClosed
	}
	defer g.wg.Done()
	return g.sink.Create(e)
}

func (g *gatedSink) Update(e *corev1.Event) (*corev1.Event, error) {
	if !g.enter() {
		return nil, errSinkClosed
	}
	defer g.wg.Done()
	return g.sink.Update(e)
}

func (g *gatedSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	if !g.enter() {
		return nil, errSinkClosed
	}
	defer g.wg.Done()
	return g.sink.Patch(e, data)
}

// close ends the writes: none starts after it, the one in flight is
// cancelled and waited for.
func (g *gatedSink) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
}
