package auth

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter bounds how often tokens are sent for review: each source (the
// caller's IP) has its own token bucket, and all sources share one. A
// source that sprays tokens uses up its own bucket and then, at most, its
// share of the shared one; an agent on another node keeps its own rate.
// Reviews answered from a cache are not counted: a real agent's token is
// reviewed once per rotation.
type Limiter struct {
	// PerSource and Burst bound one source (default 1/s, burst 5);
	// Total and TotalBurst all of them (default 50/s, burst 100: the
	// review client's own QPS; 5,000 agents rotate a token each an hour,
	// 1.4 a second);
	// MaxSources bounds the sources remembered (default 10,000).
	PerSource, Total  rate.Limit
	Burst, TotalBurst int
	MaxSources        int
	// Now replaces time.Now (tests).
	Now func() time.Time

	mu                      sync.Mutex
	sources                 map[string]*rate.Limiter
	total                   *rate.Limiter
	perSourceDenied, denied uint64
}

// Denied returns how many reviews were refused over a source's own rate
// and over the shared rate (or for too many sources).
func (l *Limiter) Denied() (perSource, total uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.perSourceDenied, l.denied
}

// NewLimiter returns a Limiter with the defaults.
func NewLimiter() *Limiter {
	return &Limiter{PerSource: 1, Burst: 5, Total: 50, TotalBurst: 100, MaxSources: 10000}
}

// Allow says whether source may have one more review now.
func (l *Limiter) Allow(source string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.Now != nil {
		now = l.Now()
	}
	if l.total == nil {
		l.total = rate.NewLimiter(l.Total, l.TotalBurst)
		l.sources = map[string]*rate.Limiter{}
	}
	s := l.sources[source]
	if s == nil {
		if len(l.sources) >= l.MaxSources {
			// Forget every full bucket: they are the idle sources.
			for k, b := range l.sources {
				if b.TokensAt(now) >= float64(l.Burst) {
					delete(l.sources, k)
				}
			}
			if len(l.sources) >= l.MaxSources {
				l.denied++
				return false // a flood of sources: refuse new ones until buckets refill
			}
		}
		s = rate.NewLimiter(l.PerSource, l.Burst)
		l.sources[source] = s
	}
	r := s.ReserveN(now, 1)
	if !r.OK() || r.DelayFrom(now) > 0 {
		r.CancelAt(now)
		l.perSourceDenied++
		return false
	}
	if !l.total.AllowN(now, 1) {
		r.CancelAt(now) // the source's token back: the refusal was not its doing
		l.denied++
		return false
	}
	return true
}
