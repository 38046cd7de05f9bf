//go:build linux

package collector

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgpilot/cgpilot/cgroup"
	"github.com/cgpilot/cgpilot/internal/loop"
)

// Target is one container to sample.
type Target struct {
	// Key names what the samples feed: the workload and container name the
	// recommender keys its histograms by ("ns/Deployment/web/app").
	Key string
	// PodUID and Container name the instance; ID is its runtime ID.
	PodUID    string
	Pod       string // namespace/name, for history and messages
	Container string
	ID        string
	Dirs      cgroup.Dirs
}

// Sample is one container's usage over one round.
type Sample struct {
	Target *Target
	Time   time.Time
	// CPUCores is the mean CPU use since the previous round.
	CPUCores float64
	// MemoryWorkingSet and MemoryUsage are bytes now; MemoryLimit is the
	// limit in force (0 when unlimited).
	MemoryWorkingSet uint64
	MemoryUsage      uint64
	MemoryLimit      uint64
	// ThrottledPeriods and Periods are the CFS periods since the previous
	// round; HasThrottling is false without CFS bandwidth data.
	ThrottledPeriods, Periods uint64
	HasThrottling             bool
	// OOMKills since the previous round (the cgroup's own counter).
	OOMKills uint64
	// CPU, memory and IO pressure: share of time some task stalled, over
	// the last 10 s, in [0, 1]; HasPSI is false without PSI files.
	CPUPressure, MemoryPressure, IOPressure float64
	HasPSI                                  bool
}

// Sink receives each round: every sample carries the round's time.
type Sink interface {
	Round(t time.Time, samples []Sample)
}

// Options configure a Collector.
type Options struct {
	Interval time.Duration // default 10 s
	Sinks    []Sink
	// Registerer, when set, gets the collector's metrics.
	Registerer prometheus.Registerer
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
	// Guard, when set, runs each round of Run as an iteration of the
	// loop named Loop: a panic in a reader or a sink costs that round.
	Guard *loop.Guard
	Loop  string
}

// target is a Target with its held files and the previous reading.
type target struct {
	// desc is never changed once set, only replaced: sinks read the
	// samples' Target after the round's lock is released.
	desc     *Target
	r        *cgroup.Reader
	prev     cgroup.Stats
	prevTime time.Time
	have     bool
}

// Collector samples its targets every interval.
type Collector struct {
	opts Options
	m    *metrics

	mu      sync.Mutex
	targets map[string]*target  // by runtime container ID
	byPod   map[string][]string // pod UID -> container IDs
	buf     []Sample
}

// New returns a Collector with no targets.
func New(o Options) *Collector {
	if o.Interval <= 0 {
		o.Interval = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Collector{opts: o, m: newMetrics(o.Registerer), targets: map[string]*target{}, byPod: map[string][]string{}}
}

// Set makes ts the targets of pod uid: new containers are opened (one
// whose cgroup is not there yet, or gone, is skipped and may be set again
// later), containers no longer listed are closed. It returns the first
// error other than a missing cgroup.
func (c *Collector) Set(uid string, ts []Target) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := map[string]bool{}
	var firstErr error
	var ids []string
	for _, t := range ts {
		keep[t.ID] = true
		if cur, ok := c.targets[t.ID]; ok {
			if *cur.desc != t {
				d := t // the key may change with the pod's owner
				cur.desc = &d
			}
			ids = append(ids, t.ID)
			continue
		}
		r, err := cgroup.OpenReader(t.Dirs)
		if err != nil {
			if !errors.Is(err, cgroup.ErrGone) && !errors.Is(err, cgroup.ErrUnsupported) && firstErr == nil {
				firstErr = err
			}
			continue
		}
		d := t
		c.targets[t.ID] = &target{desc: &d, r: r}
		ids = append(ids, t.ID)
	}
	for _, id := range c.byPod[uid] {
		if !keep[id] {
			c.closeLocked(id)
		}
	}
	if len(ids) == 0 {
		delete(c.byPod, uid)
	} else {
		c.byPod[uid] = ids
	}
	return firstErr
}

// Remove stops sampling pod uid.
func (c *Collector) Remove(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range c.byPod[uid] {
		c.closeLocked(id)
	}
	delete(c.byPod, uid)
}

func (c *Collector) closeLocked(id string) {
	if t, ok := c.targets[id]; ok {
		_ = t.r.Close()
		delete(c.targets, id)
	}
}

// Sampled says whether the container with runtime ID id is sampled.
func (c *Collector) Sampled(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.targets[id]
	return ok
}

// Targets returns how many containers are sampled.
func (c *Collector) Targets() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.targets)
}

// Run samples every interval until ctx ends, then closes every target.
func (c *Collector) Run(ctx context.Context) {
	defer func() {
		c.mu.Lock()
		for id := range c.targets {
			c.closeLocked(id)
		}
		c.mu.Unlock()
	}()
	c.opts.Guard.Every(ctx, c.opts.Loop, c.opts.Interval, func() { c.Collect() })
}

// Collect runs one round now and hands it to the sinks; it returns the
// round's samples (valid until the next round). A container's first round
// only primes its counters and yields no sample.
func (c *Collector) Collect() []Sample {
	start := time.Now()
	now, out := c.read()
	for _, sink := range c.opts.Sinks {
		sink.Round(now, out)
	}
	c.m.round.Observe(time.Since(start).Seconds())
	return out
}

// read reads every target once.
func (c *Collector) read() (time.Time, []Sample) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.opts.Now()
	out := c.buf[:0]
	ids := make([]string, 0, len(c.targets))
	for id := range c.targets {
		ids = append(ids, id)
	}
	sort.Strings(ids) // a stable order: sinks see pods of one workload alike
	for _, id := range ids {
		t := c.targets[id]
		var cur cgroup.Stats
		if err := t.r.Read(&cur); err != nil {
			if errors.Is(err, cgroup.ErrGone) {
				c.closeLocked(id) // the container exited
				c.m.gone.Inc()
				continue
			}
			c.m.readErrors.Inc()
			continue
		}
		if t.have {
			s := Sample{Target: t.desc, Time: now}
			dt := now.Sub(t.prevTime)
			ok := true
			for _, col := range collectors {
				err := col.update(&t.prev, &cur, dt, &s)
				c.m.observe(col.name, err)
				if err != nil && !errors.Is(err, ErrNoData) && col.required {
					ok = false
				}
			}
			if ok {
				out = append(out, s)
			}
		}
		t.prev, t.prevTime, t.have = cur, now, true
	}
	c.buf = out
	c.m.targets.Set(float64(len(c.targets)))
	return now, out
}
