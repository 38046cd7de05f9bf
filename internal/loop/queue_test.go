package loop

import (
	"errors"
	"testing"
)

// fakeQueue records what Work does with each key.
type fakeQueue struct {
	keys                   []string
	done, forgot, requeued []string
}

func (q *fakeQueue) Get() (string, bool) {
	if len(q.keys) == 0 {
		return "", true
	}
	k := q.keys[0]
	q.keys = q.keys[1:]
	return k, false
}
func (q *fakeQueue) Done(k string)           { q.done = append(q.done, k) }
func (q *fakeQueue) Forget(k string)         { q.forgot = append(q.forgot, k) }
func (q *fakeQueue) AddRateLimited(k string) { q.requeued = append(q.requeued, k) }

// TestWork: a handled key is forgotten, a failed one is reported and
// requeued with backoff, every key is marked done, and Work returns at
// shutdown.
func TestWork(t *testing.T) {
	q := &fakeQueue{keys: []string{"a", "b", "c"}}
	var failed []string
	Work[string](q, func(k string) error {
		if k == "b" {
			return errors.New("boom")
		}
		return nil
	}, func(k string, err error) { failed = append(failed, k+": "+err.Error()) })
	want := func(name string, got []string, w ...string) {
		t.Helper()
		if len(got) != len(w) {
			t.Fatalf("%s = %v, want %v", name, got, w)
		}
		for i := range w {
			if got[i] != w[i] {
				t.Fatalf("%s = %v, want %v", name, got, w)
			}
		}
	}
	want("done", q.done, "a", "b", "c")
	want("forgot", q.forgot, "a", "c")
	want("requeued", q.requeued, "b")
	want("failed", failed, "b: boom")
}
