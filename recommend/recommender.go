package recommend

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Sample is one usage observation of a container: CPU cores used on average
// since the previous sample, and memory in use at Time.
type Sample struct {
	Time        time.Time
	CPUCores    float64
	MemoryBytes float64
}

// Resources are a container's current requests and limits (0 = unknown or
// unset). Limits are recommended with the same limit/request ratio.
type Resources struct {
	CPURequest, CPULimit       float64
	MemoryRequest, MemoryLimit float64
}

// OOMEvent is one OOM kill of a container.
type OOMEvent struct {
	Time         time.Time
	UsageBytes   float64 // memory usage at the kill
	LimitBytes   float64 // the memory limit in force (0: use Resources)
	RequestBytes float64 // the memory request (VPA engine's input)
}

// Estimate is a recommendation for one resource, in cores or bytes. Limit is
// 0 when the policy recommends none.
type Estimate struct {
	Target, Lower, Upper, Limit float64
}

// Recommendation is what a container should get at Time.
type Recommendation struct {
	Time        time.Time
	CPU, Memory Estimate
}

// Recommender keeps per-container state under one policy. It is safe for
// concurrent use.
type Recommender struct {
	mu         sync.Mutex
	policy     Policy
	containers map[string]*container
}

// New returns a Recommender for a validated copy of p.
func New(p Policy) (*Recommender, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Recommender{policy: p, containers: map[string]*container{}}, nil
}

// Policy returns the policy in use.
func (r *Recommender) Policy() Policy { return r.policy }

func (r *Recommender) get(id string) *container {
	c, ok := r.containers[id]
	if !ok {
		c = newContainer(&r.policy)
		r.containers[id] = c
	}
	return c
}

// Add records a sample of container id. A negative, NaN or infinite value
// gives ErrInvalidSample and a sample not after the container's previous one
// gives ErrStaleSample; in both cases nothing changes.
func (r *Recommender) Add(id string, s Sample) error {
	if !validAmount(s.CPUCores) || !validAmount(s.MemoryBytes) {
		return fmt.Errorf("%w: container %q at %s: cpu %v cores, memory %v bytes", ErrInvalidSample, id, s.Time.Format(time.RFC3339), s.CPUCores, s.MemoryBytes)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.get(id)
	if c.samples > 0 && !s.Time.After(c.last) {
		return fmt.Errorf("%w: container %q at %s, previous sample at %s", ErrStaleSample, id, s.Time.Format(time.RFC3339Nano), c.last.Format(time.RFC3339Nano))
	}
	c.add(&r.policy, s)
	return nil
}

func validAmount(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }

// SetResources tells the recommender the container's current requests and
// limits, used for limit ratios and as the OOM formula's current limit.
func (r *Recommender) SetResources(id string, res Resources) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.get(id).spec = res
}

// RecordOOM records an OOM kill: the memory limit becomes
// OOMLimit(current limit, usage at kill, OOMFactor, kills in OOMWindow,
// Memory.Max) for OOMWindow, and the histogram takes VPA's bump
// max(usage + 100 MiB, usage × 1.2) as a peak.
func (r *Recommender) RecordOOM(id string, ev OOMEvent) error {
	if !validAmount(ev.UsageBytes) || !validAmount(ev.LimitBytes) || !validAmount(ev.RequestBytes) {
		return fmt.Errorf("%w: OOM of %q: usage %v, limit %v, request %v bytes", ErrInvalidSample, id, ev.UsageBytes, ev.LimitBytes, ev.RequestBytes)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.get(id).recordOOM(&r.policy, ev)
	return nil
}

// Recommend returns the recommendation for container id at now, from the
// samples added so far; false while the container has too little history.
// Call it once per decision step: with hysteresis the result becomes the
// target in force that the next call compares against.
func (r *Recommender) Recommend(id string, now time.Time) (Recommendation, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return Recommendation{}, false
	}
	return c.recommend(&r.policy, now)
}

// Forget drops the state of a container that is gone.
func (r *Recommender) Forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.containers, id)
}

// Containers returns the number of containers with state.
func (r *Recommender) Containers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.containers)
}
