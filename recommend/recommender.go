package recommend

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
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
// 0 when the policy recommends none. Explain says where Target came from.
type Estimate struct {
	Target  float64     `json:"target"`
	Lower   float64     `json:"lower"`
	Upper   float64     `json:"upper"`
	Limit   float64     `json:"limit,omitempty"`
	Explain Explanation `json:"explain"`
}

// Recommendation is what a container should get at Time.
type Recommendation struct {
	Time   time.Time `json:"time"`
	CPU    Estimate  `json:"cpu"`
	Memory Estimate  `json:"memory"`
}

// Recommender keeps per-container state under one policy. It is safe for
// concurrent use: one mutex serialises every call. Ingest costs well under
// a microsecond per sample (BenchmarkIngest), far below a node's sampling
// rate, so one lock keeps the state simple without limiting the agent.
type Recommender struct {
	mu         sync.Mutex
	policy     Policy // immutable after New
	containers map[string]*container
	// decay memoises decay factors for every histogram of this Recommender
	// (guarded by mu like the histograms that use it).
	decay *decayMemo
	// withOverrides memoises RecommendWith's policies (guarded by mu).
	withOverrides map[OverridesKey]*Policy
	// fleet holds the node-wide violation controllers of CPU and memory
	// (FleetObjective; guarded by mu), members the scratch list of a tick.
	fleet   [2]fleetState
	members []fleetMember
	ids     []string
	// budget holds the node's resize allocators of CPU and memory
	// (ResizeBudget; guarded by mu).
	budget [2]budgetState
}

// New returns a Recommender for a validated copy of p.
func New(p Policy) (*Recommender, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Recommender{policy: p, containers: map[string]*container{}, decay: new(decayMemo)}, nil
}

// Policy returns the policy in use.
func (r *Recommender) Policy() Policy { return r.policy }

// get returns container id, created if needed. r.mu must be held.
func (r *Recommender) get(id string) *container {
	c, ok := r.containers[id]
	if !ok {
		c = newContainer(&r.policy, r.decay)
		r.containers[id] = c
	}
	return c
}

// Add records a sample of container id. A negative, NaN or infinite value
// gives ErrInvalidSample and a sample older than the container's previous
// one gives ErrStaleSample; in both cases nothing changes. Samples at the
// same time are several instances of one container (the pods of one
// workload, sampled in one round): each counts. On the ingest path,
// Recorder.Add does the same without looking the id up per sample.
func (r *Recommender) Add(id string, s Sample) error {
	if err := checkSample(id, s); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.get(id).addChecked(&r.policy, id, s)
}

func checkSample(id string, s Sample) error {
	if !validAmount(s.CPUCores) || !validAmount(s.MemoryBytes) {
		return fmt.Errorf("%w: container %q at %s: cpu %v cores, memory %v bytes", ErrInvalidSample, id, s.Time.Format(time.RFC3339), s.CPUCores, s.MemoryBytes)
	}
	return nil
}

func staleSample(id string, t, prev time.Time) error {
	return fmt.Errorf("%w: container %q at %s, previous sample at %s", ErrStaleSample, id, t.Format(time.RFC3339Nano), prev.Format(time.RFC3339Nano))
}

// addChecked adds a valid sample unless it is older than the previous one.
func (c *container) addChecked(p *Policy, id string, s Sample) error {
	if c.samples > 0 && s.Time.Before(c.last) {
		return staleSample(id, s.Time, c.last)
	}
	c.add(p, s)
	return nil
}

func validAmount(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }

// Recorder is a handle on one container's state for the ingest path: it
// skips the id lookup (string hash and map probe) of Recommender.Add. Keep
// one per container. A Recorder stays valid after Forget or LoadCheckpoint:
// its next Add looks the id up again and records into the id's current (or
// new) state, exactly as Recommender.Add would. It is safe for concurrent
// use (it takes the Recommender's lock).
type Recorder struct {
	r  *Recommender
	id string
	c  *container // guarded by r.mu
}

// Recorder returns a handle on container id, creating its (empty) state.
func (r *Recommender) Recorder(id string) *Recorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &Recorder{r: r, id: id, c: r.get(id)}
}

// ID returns the container id the Recorder records for.
func (h *Recorder) ID() string { return h.id }

// container returns the Recorder's state, looking the id up again when the
// state it held left the Recommender. r.mu must be held.
func (h *Recorder) container() *container {
	if h.c.detached {
		h.c = h.r.get(h.id)
	}
	return h.c
}

// Add records a sample, with the errors and guarantees of Recommender.Add.
func (h *Recorder) Add(s Sample) error {
	if err := checkSample(h.id, s); err != nil {
		return err
	}
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	return h.container().addChecked(&h.r.policy, h.id, s)
}

// AddBatch records samples in order under one lock acquisition. It is all
// or nothing: when any sample is invalid (ErrInvalidSample) or older than
// the one before it (ErrStaleSample), the error names its index and no sample
// of the batch is recorded.
func (h *Recorder) AddBatch(samples []Sample) error {
	for i, s := range samples {
		if err := checkSample(h.id, s); err != nil {
			return fmt.Errorf("sample %d of %d: %w", i, len(samples), err)
		}
	}
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	c := h.container()
	prev, have := c.last, c.samples > 0
	for i, s := range samples {
		if have && s.Time.Before(prev) {
			return fmt.Errorf("sample %d of %d: %w", i, len(samples), staleSample(h.id, s.Time, prev))
		}
		prev, have = s.Time, true
	}
	for _, s := range samples {
		c.add(&h.r.policy, s)
	}
	return nil
}

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
	return c.recommend(&r.policy, now, r.fleetViews(now), r.budgetViews(now))
}

// budgetViews ticks the resize allocators, as often as the fleet
// controllers, and returns them. r.mu must be held.
func (r *Recommender) budgetViews(now time.Time) budgetViews {
	var bv budgetViews
	if r.policy.Engine != EngineCgpilot {
		return bv
	}
	for i := range r.budget {
		b := &r.budget[i]
		if !b.started || now.Sub(b.last) >= fleetMinTick {
			b.tick(now, r.budgetRate(i))
		}
		bv[i] = b
	}
	return bv
}

// budgetRate is the sum of the resize budgets (per day) of the
// established containers for resource i. r.mu must be held.
func (r *Recommender) budgetRate(i int) float64 {
	var rate float64
	for _, c := range r.containers {
		rs := &c.cpu
		if i == 1 {
			rs = &c.mem
		}
		if c.samples > 0 && established(&r.policy, c.last.Sub(c.first)) {
			rate += rs.budget
		}
	}
	return rate
}

// fleetViews ticks the fleet controllers when the policy has any and the
// last tick is older than fleetMinTick (one tick per decision round), and
// returns what the containers are to use. r.mu must be held.
func (r *Recommender) fleetViews(now time.Time) fleetViews {
	var fv fleetViews
	for i, rp := range []*ResourcePolicy{&r.policy.CPU, &r.policy.Memory} {
		if r.policy.Engine != EngineCgpilot || rp.FleetObjective <= 0 {
			continue
		}
		f := &r.fleet[i]
		if f.last.IsZero() || now.Sub(f.last) >= fleetMinTick {
			f.tick(rp, now, r.fleetMembers(i))
		}
		fv[i] = fleetView{lambda: f.lambda, rate: f.rate()}
		if fv[i].lambda == 0 {
			fv[i].lambda = rp.ViolationCost
		}
	}
	return fv
}

// fleetMembers lists resource i's state of every container in id order
// (a tick's sums must not depend on map order). r.mu must be held.
func (r *Recommender) fleetMembers(i int) []fleetMember {
	r.ids = r.ids[:0]
	for id := range r.containers {
		r.ids = append(r.ids, id)
	}
	sort.Strings(r.ids)
	r.members = r.members[:0]
	for _, id := range r.ids {
		c := r.containers[id]
		rs, t := &c.cpu, &c.cpuT
		if i == 1 {
			rs, t = &c.mem, &c.memT
		}
		if c.samples > 0 && !t.noFleet && established(&r.policy, c.last.Sub(c.first)) {
			r.members = append(r.members, fleetMember{hist: rs.hist, t: t})
		}
	}
	return r.members
}

// RecommendWith is Recommend with the estimator settings of the
// Recommender's policy changed by o (a RightsizePolicy's overrides): the
// histograms are shared, only how a target is read from them differs. An
// override the policy does not take is an error wrapping ErrInvalidPolicy.
// The hysteresis state is the container's own, whichever overrides ask.
func (r *Recommender) RecommendWith(id string, now time.Time, o Overrides) (Recommendation, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := &r.policy
	if o.Key() != (OverridesKey{}) {
		q, err := r.overridden(o)
		if err != nil {
			return Recommendation{}, false, err
		}
		p = q
	}
	c, ok := r.containers[id]
	if !ok {
		return Recommendation{}, false, nil
	}
	rec, ok := c.recommend(p, now, r.fleetViews(now), r.budgetViews(now))
	return rec, ok, nil
}

// overridden returns the policy with o applied, memoised: a node has a few
// policies and asks for the same ones every step. r.mu must be held.
func (r *Recommender) overridden(o Overrides) (*Policy, error) {
	k := o.Key()
	if q, ok := r.withOverrides[k]; ok {
		return q, nil
	}
	q, err := r.policy.WithOverrides(o)
	if err != nil {
		return nil, err
	}
	if r.withOverrides == nil || len(r.withOverrides) > 64 {
		r.withOverrides = map[OverridesKey]*Policy{}
	}
	r.withOverrides[k] = &q
	return &q, nil
}

// OverridesKey is Overrides by value (Overrides holds pointers), for
// maps and comparisons.
type OverridesKey [12]struct {
	Set bool
	V   float64
}

// Key returns o by value.
func (o Overrides) Key() OverridesKey {
	var k OverridesKey
	for i, p := range []*float64{o.CPU.TargetSaturation, o.CPU.Percentile, o.CPU.Objective, o.CPU.MinAllowed, o.CPU.MaxAllowed,
		o.Memory.TargetSaturation, o.Memory.Percentile, o.Memory.Objective, o.Memory.MinAllowed, o.Memory.MaxAllowed} {
		if p != nil {
			k[i].Set, k[i].V = true, *p
		}
	}
	if o.MinHistory != nil {
		k[10].Set, k[10].V = true, float64(*o.MinHistory)
	}
	if o.ResizeBudget != nil {
		k[11].Set, k[11].V = true, *o.ResizeBudget
	}
	return k
}

// Forget drops the state of a container that is gone.
func (r *Recommender) Forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.containers[id]; ok {
		c.detached = true
		delete(r.containers, id)
	}
}

// IDs lists the containers with state, sorted.
func (r *Recommender) IDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.containers))
}

// Containers returns the number of containers with state.
func (r *Recommender) Containers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.containers)
}

// Usage summarises a container's decayed usage histograms: CPU cores and
// memory bytes (per-interval peaks where the policy aggregates them) at
// the 50th and 95th percentiles and the top bucket.
type Usage struct {
	CPUP50, CPUP95, CPUMax float64
	MemP50, MemP95, MemMax float64
}

// Usage returns id's usage summary; false when it has no samples.
func (r *Recommender) Usage(id string) (Usage, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok || c.samples == 0 {
		return Usage{}, false
	}
	cpu, mem := c.cpu.hist, c.mem.hist
	if c.vpa != nil {
		cpu, mem = c.vpa.cpu, c.vpa.mem
	}
	return Usage{CPUP50: cpu.Percentile(0.5), CPUP95: cpu.Percentile(0.95), CPUMax: cpu.Percentile(1),
		MemP50: mem.Percentile(0.5), MemP95: mem.Percentile(0.95), MemMax: mem.Percentile(1)}, true
}
