package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// blockingSink answers a write only when its context ends, as an API
// server that stopped answering does.
type blockingSink struct {
	ctx            context.Context
	started, ended chan struct{}
}

func (s blockingSink) wait() (*corev1.Event, error) {
	s.started <- struct{}{}
	<-s.ctx.Done()
	s.ended <- struct{}{} // before the write returns to the gate
	return nil, s.ctx.Err()
}
func (s blockingSink) Create(*corev1.Event) (*corev1.Event, error)        { return s.wait() }
func (s blockingSink) Update(*corev1.Event) (*corev1.Event, error)        { return s.wait() }
func (s blockingSink) Patch(*corev1.Event, []byte) (*corev1.Event, error) { return s.wait() }

// TestGatedSinkCloseEndsTheWriteInFlight: the shutdown's close cancels a
// write the API server does not answer and waits for it, and no write
// starts after it (the goroutine-leak check of Run depends on both).
func TestGatedSinkCloseEndsTheWriteInFlight(t *testing.T) {
	started, ended := make(chan struct{}, 4), make(chan struct{}, 4)
	g := newGatedSink(func(ctx context.Context) record.EventSink { return blockingSink{ctx, started, ended} })
	done := make(chan error, 1)
	go func() {
		_, err := g.Patch(&corev1.Event{}, nil)
		done <- err
	}()
	<-started
	select {
	case err := <-done:
		t.Fatalf("the write returned before close: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	closed := make(chan struct{})
	go func() { g.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close did not return: the write in flight was not cancelled")
	}
	// The sink's write must have ended before close returned (the caller's
	// own goroutine gets its answer just after: it is not the gate's).
	select {
	case <-ended:
	default:
		t.Fatal("close returned while the write was still in flight")
	}
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the write in flight ended with %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write's caller never got its answer")
	}
	for name, write := range map[string]func() error{
		"create": func() error { _, err := g.Create(&corev1.Event{}); return err },
		"update": func() error { _, err := g.Update(&corev1.Event{}); return err },
		"patch":  func() error { _, err := g.Patch(&corev1.Event{}, nil); return err },
	} {
		if err := write(); !errors.Is(err, errSinkClosed) {
			t.Errorf("%s after close: %v, want errSinkClosed", name, err)
		}
	}
	if len(started) != 0 {
		t.Errorf("%d writes reached the API after close", len(started))
	}
}
