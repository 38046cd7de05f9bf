package runner

import (
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// pending is the latest value asked per pod key ("namespace/name") for a
// worker to apply: the applier's resizes and the recommendation
// annotations. A newer value replaces an older one; the worker removes a
// value only while it is still the one it took, so a value asked while it
// worked waits for the next round. (agent's reconcile keeps a map of
// another kind: the first change's time, taken and cleared at once.)
type pending[V any] struct {
	mu sync.Mutex
	m  map[string]V
	// uid is the pod a value was asked for; same says whether a value is
	// still the one taken.
	uid  func(V) string
	same func(a, b V) bool
}

func newPending[V any](uid func(V) string, same func(a, b V) bool) *pending[V] {
	return &pending[V]{m: map[string]V{}, uid: uid, same: same}
}

// put sets key's value to next(old, ok), old being the value waiting.
func (p *pending[V]) put(key string, next func(old V, ok bool) V) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, ok := p.m[key]
	p.m[key] = next(old, ok)
}

func (p *pending[V]) get(key string) (V, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.m[key]
	return v, ok
}

func (p *pending[V]) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}

// done removes key's value if it is still v.
func (p *pending[V]) done(key string, v V) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, ok := p.m[key]; ok && p.same(cur, v) {
		delete(p.m, key)
	}
}

// take returns key's value and the pod it was asked for, looked up by
// pod; ok is false when no value waits, or when the pod is gone or was
// replaced (another UID), whose value is then done.
func (p *pending[V]) take(key string, pod func(namespace, name string) (*corev1.Pod, error)) (v V, po *corev1.Pod, ok bool) {
	if v, ok = p.get(key); !ok {
		return v, nil, false
	}
	ns, name, _ := strings.Cut(key, "/")
	po, err := pod(ns, name)
	if err != nil || string(po.UID) != p.uid(v) {
		p.done(key, v)
		return v, nil, false
	}
	return v, po, true
}
