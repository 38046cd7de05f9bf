package loop

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

type recorder struct {
	mu  sync.Mutex
	got []*Panic
}

func (r *recorder) guard() *Guard {
	return &Guard{OnPanic: r.add, MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}
}

func (r *recorder) add(p *Panic) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, p)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func TestDo(t *testing.T) {
	var rec recorder
	g := rec.guard()
	if err := g.Do("ok", func() {}); err != nil {
		t.Fatalf("a clean iteration: %v", err)
	}
	var m map[string]int
	err := g.Do("decide", func() { m["x"]++ }) // a nil map write: a runtime error
	var p *Panic
	if !errors.As(err, &p) || p.Loop != "decide" || !strings.Contains(p.Error(), "assignment to entry in nil map") {
		t.Fatalf("Do returned %v, want the decide loop's *Panic", err)
	}
	if rec.count() != 1 || rec.got[0] != p {
		t.Fatalf("OnPanic told %d times, want once with the returned panic", rec.count())
	}
	if !strings.Contains(string(p.Stack), "loop.TestDo") {
		t.Errorf("the stack does not show the panicking function:\n%s", p.Stack)
	}
}

func TestNilGuardDoesNotRecover(t *testing.T) {
	var g *Guard
	defer func() {
		if recover() == nil {
			t.Fatal("a nil Guard recovered a panic")
		}
	}()
	_ = g.Do("x", func() { panic("boom") })
}

// TestRunGoesOnAfterPanics: the loop survives panicking iterations, waits
// a growing backoff between them, resets it after a clean one, and ends
// when step says so.
func TestRunGoesOnAfterPanics(t *testing.T) {
	var rec recorder
	g := rec.guard()
	var at []time.Time
	i := 0
	g.Run(context.Background(), "round", func() bool {
		at = append(at, time.Now())
		i++
		switch i {
		case 1, 2, 3, 5:
			panic(i)
		case 4:
			return true
		}
		return false // 6: done
	})
	if i != 6 || rec.count() != 4 {
		t.Fatalf("%d iterations, %d panics recovered; want 6 and 4", i, rec.count())
	}
	// After panics 1, 2, 3: 1, 2, 4 ms; iteration 4 is clean, so panic 5
	// waits 1 ms again.
	for k, want := range map[int]time.Duration{1: time.Millisecond, 2: 2 * time.Millisecond, 3: 4 * time.Millisecond, 5: time.Millisecond} {
		if d := at[k].Sub(at[k-1]); d < want {
			t.Errorf("iteration %d came %v after the panic of %d, want >= %v", k+1, d, k, want)
		}
	}
	if g.next(4*time.Millisecond) != 4*time.Millisecond {
		t.Errorf("the backoff grew past MaxBackoff")
	}
}

func TestRunEndsWithContext(t *testing.T) {
	var rec recorder
	g := &Guard{OnPanic: rec.add, MinBackoff: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Run(ctx, "x", func() bool { panic("always") })
	}()
	for rec.count() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel() // Run waits its hour of backoff: the context ends it
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end with its context during a backoff")
	}
}

func TestInject(t *testing.T) {
	var rec recorder
	g := rec.guard()
	g.Inject = func(loop string) {
		if loop == "sweep" {
			panic("injected")
		}
	}
	ran := 0
	if err := g.Do("decide", func() { ran++ }); err != nil || ran != 1 {
		t.Fatalf("another loop: err %v, ran %d", err, ran)
	}
	if err := g.Do("sweep", func() { ran++ }); err == nil || ran != 1 {
		t.Fatalf("the injected loop: err %v, ran %d; want a panic before the body", err, ran)
	}
}

func TestHandler(t *testing.T) {
	var rec recorder
	g := rec.guard()
	h := g.Handler("local-api", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			var p *struct{ x int }
			_ = p.x
		case "/abort":
			panic(http.ErrAbortHandler)
		}
		_, _ = w.Write([]byte("ok"))
	}))
	for _, tc := range []struct {
		path   string
		status int
		panics int
	}{{"/", 200, 0}, {"/panic", 500, 1}, {"/", 200, 1}} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", tc.path, nil))
		if w.Code != tc.status || rec.count() != tc.panics {
			t.Errorf("%s: %d, %d panics counted; want %d, %d", tc.path, w.Code, rec.count(), tc.status, tc.panics)
		}
	}
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Errorf("ErrAbortHandler: recovered %v, want it passed on to net/http", v)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/abort", nil))
	}()
	if rec.count() != 1 {
		t.Errorf("a deliberate abort was counted as a panic")
	}
}

// TestSleep: Sleep waits its time with a live context and returns false
// at once with an ended one.
func TestSleep(t *testing.T) {
	start := time.Now()
	if !Sleep(context.Background(), 5*time.Millisecond) {
		t.Error("Sleep with a live context returned false")
	}
	if time.Since(start) < 5*time.Millisecond {
		t.Error("Sleep returned early")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep with an ended context returned true")
	}
	if time.Since(start) > time.Minute {
		t.Error("Sleep waited past the context's end")
	}
}
