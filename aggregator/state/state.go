package state

import (
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cgpilot/cgpilot/api/report"
	"github.com/cgpilot/cgpilot/recommend"
)

// Errors of Apply; each refused report changes nothing.
var (
	// ErrReplayed: a sequence not above the last accepted one of the same
	// agent process (its random ID), or a window its node has reported
	// already.
	ErrReplayed = errors.New("state: replayed report")
	// ErrWindow: a report whose period is not the aggregator's or whose
	// window ends in the future.
	ErrWindow = errors.New("state: report window does not fit the grid")
)

// PolicyInfo is what the store needs of a RightsizePolicy.
type PolicyInfo struct {
	// Preset is the recommender preset; "" means the default.
	Preset    string
	Overrides recommend.Overrides
	// Step is how often a recommendation is recomputed (0: the default).
	Step time.Duration
}

// Config configures a Store.
type Config struct {
	// Period is the report grid (report.DefaultPeriod by default).
	Period time.Duration
	// Grace is how long after a window's end its reports are awaited
	// before the window is merged (default 2 × Period). Reports that come
	// later are merged on arrival ("late").
	Grace time.Duration
	// Step is how often a workload-container's recommendation is
	// recomputed when its policy does not say (default 1 h): with
	// hysteresis, each computation is a decision step, as on the agents.
	Step time.Duration
	// Policies resolves a policy name from a report (nil: none known).
	Policies func(name string) (PolicyInfo, bool)
	// DefaultPreset is used when neither the report nor the policy names
	// one (default recommend.DefaultPreset).
	DefaultPreset string
}

// Stats are counters of the store (for metrics).
type Stats struct {
	Accepted, Replayed, BadWindow   uint64
	LateReports, FoldedWindows      uint64
	OOMKills, MergeErrors           uint64
	Containers, Workloads, Nodes    int
	PendingWindows, PendingEntries  int
	Recommendations, NotMergeable   int
	RecommendSeconds, FoldSeconds   float64
	RecommendCalls, FoldedContainer uint64
}

// Store is the merged state of every workload-container: the windows
// still awaiting reports, the recommenders (one per preset) holding the
// merged histograms, what the latest reports said of each container, and
// per node the replay guard and the keys it reported. It is safe for
// concurrent use: containers are spread over shards, each with its lock,
// so reports of different nodes are applied in parallel.
type Store struct {
	cfg    Config
	seed   maphash.Seed
	shards [nShards]shard

	recMu sync.Mutex
	recs  map[string]*recommend.Recommender // by preset; nil value: not mergeable

	nodeMu sync.Mutex
	nodes  map[string]*Node

	accepted, replayed, badWindow, late, folded, ooms, mergeErrs atomic.Uint64
	recommendNanos, foldNanos, recommendCalls, foldedContainers  atomic.Uint64
}

const nShards = 64

type shard struct {
	mu      sync.Mutex
	pending map[int64]map[report.Key]*pending // by window end (Unix ns)
	entries map[report.Key]*Entry
	// folded is the end of the latest window merged in this shard: a
	// report for it or an earlier one is late.
	folded time.Time
}

type pending struct {
	cpu, mem *recommend.Counts
	nodes    int
}

// Entry is what the store knows of one workload-container besides its
// histograms (which live in the recommender of its preset).
type Entry struct {
	Key report.Key
	// From the latest report that had the container.
	Policy, Mode, Preset string
	Current, Original    report.Resources
	QOS                  string
	Adjustable           bool
	Reason               string
	Conflicts            []string
	LastSeen             time.Time
	// Nodes is how many nodes reported it in the last merged window;
	// Samples how many samples were merged in all.
	Nodes      int
	Samples    int64
	LastWindow time.Time
	// Rec is the latest merged recommendation (nil: none yet);
	// NotMergeable says why there is none when the preset cannot merge.
	Rec          *report.WorkloadRecommendation
	NotMergeable string
	computedAt   time.Time
	dirty        bool
}

// Node is what the store knows of one node.
type Node struct {
	Name       string
	Agent      report.Agent
	Sequence   uint64
	LastWindow time.Time
	LastSeen   time.Time
	// keys are the workload-containers of its last report: pointers to
	// their entries' keys (8 bytes each, not a 64-byte copy).
	keys []*report.Key
	// agents are the node's latest agent processes (by random ID) with
	// the last sequence accepted from each, most recent last.
	agents []agentSeq
	Usage  report.NodeUsage
	Pools  *report.Pools
}

// New returns an empty store.
func New(cfg Config) *Store {
	report.FillTiming(&cfg.Period, &cfg.Grace, nil)
	cfg.Step = cmp.Or(cfg.Step, time.Hour)
	cfg.DefaultPreset = cmp.Or(cfg.DefaultPreset, recommend.DefaultPreset)
	s := &Store{cfg: cfg, seed: maphash.MakeSeed(), recs: map[string]*recommend.Recommender{}, nodes: map[string]*Node{}}
	for i := range s.shards {
		s.shards[i].pending = map[int64]map[report.Key]*pending{}
		s.shards[i].entries = map[report.Key]*Entry{}
	}
	return s
}

// Config returns the store's configuration (defaults filled in).
func (s *Store) Config() Config { return s.cfg }

// shard returns the shard of k's workload: a workload's containers share
// one, so that it can be exported and restored as a whole.
func (s *Store) shard(k report.Key) *shard { return s.workloadShard(k.Workload) }

func (s *Store) workloadShard(w report.Workload) *shard {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(w.Namespace)
	h.WriteByte(0)
	h.WriteString(w.Kind)
	h.WriteByte(0)
	h.WriteString(w.Name)
	return &s.shards[h.Sum64()%nShards]
}

// recommender returns the preset's recommender, or an error saying why
// it cannot merge.
func (s *Store) recommender(preset string) (*recommend.Recommender, error) {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	if r, ok := s.recs[preset]; ok {
		if r == nil {
			return nil, fmt.Errorf("%w: preset %s", recommend.ErrNotMergeable, preset)
		}
		return r, nil
	}
	p, err := recommend.Preset(preset)
	if err == nil {
		err = p.Mergeable()
	}
	if err != nil {
		s.recs[preset] = nil
		return nil, err
	}
	r, err := recommend.New(p)
	if err != nil {
		return nil, err
	}
	s.recs[preset] = r
	return r, nil
}

// preset resolves a container's preset: the policy's, else the report's,
// else the default.
func (s *Store) preset(c *report.Container) (string, PolicyInfo) {
	var pi PolicyInfo
	if c.Policy != "" && s.cfg.Policies != nil {
		if p, ok := s.cfg.Policies(c.Policy); ok {
			pi = p
		}
	}
	switch {
	case pi.Preset != "":
		return pi.Preset, pi
	case c.Preset != "":
		return c.Preset, pi
	}
	return s.cfg.DefaultPreset, pi
}

// Apply merges an authenticated, decoded report received at now. It
// refuses (changing nothing) a replay (ErrReplayed) and a report off the
// grid (ErrWindow). A report for a window still open is summed into it;
// one for a window already merged is merged at once ("late").
func (s *Store) Apply(d *report.Decoded, now time.Time) error {
	period := time.Duration(d.PeriodSeconds) * time.Second
	if period != s.cfg.Period {
		s.badWindow.Add(1)
		return fmt.Errorf("%w: period %v, the aggregator's is %v", ErrWindow, period, s.cfg.Period)
	}
	if d.WindowEnd.After(now.Add(s.cfg.Period)) {
		s.badWindow.Add(1)
		return fmt.Errorf("%w: window ends at %s, after now (%s) plus a period", ErrWindow, d.WindowEnd.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	if err := s.admit(d, now); err != nil {
		s.replayed.Add(1)
		return err
	}
	s.accepted.Add(1)
	w := d.WindowEnd.UnixNano()
	keyRefs := make([]*report.Key, len(d.Containers))
	for i := range d.Containers {
		c := &d.Containers[i]
		cc := d.Counts[i]
		preset, _ := s.preset(c)
		sh := s.shard(c.Key)
		sh.mu.Lock()
		e := sh.entries[c.Key]
		if e == nil {
			e = &Entry{Key: c.Key}
			sh.entries[c.Key] = e
		}
		// The report's strings are fresh copies every minute: keep the
		// stored ones when equal, and hand the stored key on (observers
		// and the node's key list then share its strings).
		c.Key = e.Key
		keyRefs[i] = &e.Key
		keep(&e.Policy, c.Policy)
		keep(&e.Mode, c.Mode)
		keep(&e.Preset, preset)
		keep(&e.QOS, c.QOS)
		keep(&e.Reason, c.Reason)
		e.Current, e.Original = c.Current, c.Original
		e.Adjustable = c.Adjustable
		if !slices.Equal(e.Conflicts, c.Conflicts) {
			e.Conflicts = c.Conflicts
		}
		e.LastSeen = now
		if !d.WindowEnd.After(sh.folded) {
			s.late.Add(1)
			s.mergeLocked(e, d.WindowEnd, cc.CPU, cc.Memory, 1)
		} else {
			win := sh.pending[w]
			if win == nil {
				win = map[report.Key]*pending{}
				sh.pending[w] = win
			}
			p := win[c.Key]
			if p == nil {
				win[c.Key] = &pending{cpu: cc.CPU.Clone(), mem: cc.Memory.Clone(), nodes: 1}
			} else if p.cpu.Merge(cc.CPU) == nil && p.mem.Merge(cc.Memory) == nil {
				p.nodes++
			} else {
				s.mergeErrs.Add(1)
			}
		}
		sh.mu.Unlock()
		if r, err := s.recommender(preset); err == nil {
			r.SetResources(c.Key.String(), recommend.Resources{CPURequest: c.Current.CPURequest, CPULimit: c.Current.CPULimit,
				MemoryRequest: c.Current.MemoryRequest, MemoryLimit: c.Current.MemoryLimit})
		}
	}
	s.nodeMu.Lock()
	if n := s.nodes[d.Node]; n != nil && n.Sequence == d.Sequence && n.Agent.ID == d.Agent.ID {
		n.keys = n.keys[:0]
		for i := range d.Containers {
			n.keys = append(n.keys, keyRefs[i])
		}
	}
	s.nodeMu.Unlock()
	for _, k := range d.OOMKills {
		s.ooms.Add(1)
		sh := s.shard(k.Key)
		sh.mu.Lock()
		e := sh.entries[k.Key]
		preset := s.cfg.DefaultPreset
		if e != nil {
			preset = e.Preset
			e.dirty = true
		}
		sh.mu.Unlock()
		if r, err := s.recommender(preset); err == nil {
			_ = r.RecordOOM(k.Key.String(), recommend.OOMEvent{Time: k.Time, UsageBytes: k.UsageBytes, LimitBytes: k.LimitBytes, RequestBytes: k.RequestBytes})
		}
	}
	return nil
}

// maxAgents is how many agent processes per node the replay guard
// remembers: restarts, and the old and new process of a rolling update.
const maxAgents = 16

type agentSeq struct {
	id  string
	seq uint64
}

// admit checks the replay guard of d's node and records d as its latest.
// The guard is keyed on the agent process's random ID: a sequence at or
// below the last accepted one of the same process is a replay (a retry
// after a lost answer, or a captured report sent again). A new process is
// accepted whatever its start time says, so that an agent restarted with
// its clock behind its previous start is not refused. And a node reports
// each window once: a report must end after the node's latest accepted
// window (agents send their windows in order, a backlog oldest first), so
// that no node weighs a window's merge with two reports of it.
func (s *Store) admit(d *report.Decoded, now time.Time) error {
	s.nodeMu.Lock()
	defer s.nodeMu.Unlock()
	n := s.nodes[d.Node]
	if n == nil {
		n = &Node{Name: d.Node}
		s.nodes[d.Node] = n
	}
	if !d.WindowEnd.After(n.LastWindow) {
		return fmt.Errorf("%w: node %s has reported the window ending %s already (its latest ends %s)", ErrReplayed, d.Node,
			d.WindowEnd.Format(time.RFC3339), n.LastWindow.Format(time.RFC3339))
	}
	i := slices.IndexFunc(n.agents, func(a agentSeq) bool { return a.id == d.Agent.ID })
	if i >= 0 {
		if last := n.agents[i].seq; d.Sequence <= last {
			return fmt.Errorf("%w: node %s agent %s sequence %d, already at %d", ErrReplayed, d.Node, d.Agent.ID, d.Sequence, last)
		}
		n.agents = slices.Delete(n.agents, i, i+1)
	} else if len(n.agents) >= maxAgents {
		n.agents = slices.Delete(n.agents, 0, 1)
	}
	n.agents = append(n.agents, agentSeq{id: d.Agent.ID, seq: d.Sequence})
	n.Agent, n.Sequence, n.LastSeen, n.LastWindow = d.Agent, d.Sequence, now, d.WindowEnd
	n.Usage, n.Pools = d.Usage, d.Pools
	return nil
}

// keep sets *dst to v unless it already holds an equal string.
func keep(dst *string, v string) {
	if *dst != v {
		*dst = v
	}
}

// mergeLocked adds counts to e's recommender state (the shard is locked).
func (s *Store) mergeLocked(e *Entry, at time.Time, cpu, mem *recommend.Counts, nodes int) {
	r, err := s.recommender(e.Preset)
	if err != nil {
		e.NotMergeable = err.Error()
		return
	}
	e.NotMergeable = ""
	if err := r.AddCounts(e.Key.String(), at, cpu, mem); err != nil {
		s.mergeErrs.Add(1)
		return
	}
	s.foldedContainers.Add(1)
	e.Samples += int64(cpu.Total())
	e.Nodes = nodes
	if at.After(e.LastWindow) {
		e.LastWindow = at
	}
	e.dirty = true
}

// Fold merges every window that ended at least Grace before now, oldest
// first, each window's counts summed over its nodes and added once (the
// exact merge, see recommend.AddCounts), then recomputes the
// recommendations that are due. It returns how many windows it merged.
func (s *Store) Fold(now time.Time) int {
	t0 := time.Now()
	cutoff := now.Add(-s.cfg.Grace).UnixNano()
	windows := map[int64]struct{}{}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		var due []int64
		for w := range sh.pending {
			if w <= cutoff {
				due = append(due, w)
			}
		}
		slices.Sort(due)
		for _, w := range due {
			at := time.Unix(0, w).UTC()
			win := sh.pending[w]
			// Sorted keys: the same merge order on every replica and run.
			keys := make([]report.Key, 0, len(win))
			for k := range win {
				keys = append(keys, k)
			}
			sort.Slice(keys, func(a, b int) bool { return keys[a].String() < keys[b].String() })
			for _, k := range keys {
				p := win[k]
				e := sh.entries[k]
				if e == nil { // restored state dropped in between; keep the data
					e = &Entry{Key: k, Preset: s.cfg.DefaultPreset}
					sh.entries[k] = e
				}
				s.mergeLocked(e, at, p.cpu, p.mem, p.nodes)
			}
			delete(sh.pending, w)
			if at.After(sh.folded) {
				sh.folded = at
			}
			windows[w] = struct{}{}
		}
		sh.mu.Unlock()
	}
	s.folded.Add(uint64(len(windows)))
	s.foldNanos.Add(uint64(time.Since(t0)))
	s.recommendDue(now)
	return len(windows)
}

// recommendDue recomputes the recommendation of every container whose
// last one is older than its step (or that has none).
func (s *Store) recommendDue(now time.Time) {
	t0 := time.Now()
	var calls uint64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, e := range sh.entries {
			if e.Samples == 0 || e.NotMergeable != "" {
				continue
			}
			preset, pi := s.preset(&report.Container{Key: e.Key, Policy: e.Policy, Preset: e.Preset})
			step := pi.Step
			if step == 0 {
				step = s.cfg.Step
			}
			if e.Rec != nil && now.Sub(e.computedAt) < step {
				continue
			}
			r, err := s.recommender(preset)
			if err != nil {
				e.NotMergeable = err.Error()
				continue
			}
			calls++
			rec, ok, err := r.RecommendWith(e.Key.String(), now, pi.Overrides)
			if err != nil || !ok {
				continue
			}
			e.computedAt = now
			e.dirty = true
			e.Rec = &report.WorkloadRecommendation{
				Key: e.Key, Policy: e.Policy, Preset: preset, Nodes: e.Nodes, Samples: e.Samples, Updated: now,
				FreshUntil: now.Add(report.FreshFor(step, s.cfg.Period, s.cfg.Grace)),
				Recommendation: report.Recommendation{
					CPU:    report.Estimate{Target: rec.CPU.Target, Lower: rec.CPU.Lower, Upper: rec.CPU.Upper, Limit: rec.CPU.Limit},
					Memory: report.Estimate{Target: rec.Memory.Target, Lower: rec.Memory.Lower, Upper: rec.Memory.Upper, Limit: rec.Memory.Limit},
				},
			}
		}
		sh.mu.Unlock()
	}
	s.recommendCalls.Add(calls)
	s.recommendNanos.Add(uint64(time.Since(t0)))
}

// Recommendation returns the merged recommendation of k (nil: none).
func (s *Store) Recommendation(k report.Key) *report.WorkloadRecommendation {
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.entries[k]; e != nil && e.Rec != nil {
		r := *e.Rec
		return &r
	}
	return nil
}

// ForNode returns the merged recommendations of the keys node reported
// last, and false when the node never reported.
func (s *Store) ForNode(node string) ([]report.WorkloadRecommendation, bool) {
	s.nodeMu.Lock()
	n := s.nodes[node]
	var keys []*report.Key
	if n != nil {
		keys = slices.Clone(n.keys)
	}
	s.nodeMu.Unlock()
	if n == nil {
		return nil, false
	}
	out := make([]report.WorkloadRecommendation, 0, len(keys))
	for _, k := range keys {
		if r := s.Recommendation(*k); r != nil {
			out = append(out, *r)
		}
	}
	return out, true
}

// Nodes returns a copy of every node's state.
func (s *Store) Nodes() []Node {
	s.nodeMu.Lock()
	defer s.nodeMu.Unlock()
	out := make([]Node, 0, len(s.nodes))
	for _, n := range s.nodes {
		c := *n
		c.keys, c.agents = nil, nil
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Node returns a copy of one node's state.
func (s *Store) Node(name string) (Node, bool) {
	s.nodeMu.Lock()
	defer s.nodeMu.Unlock()
	n, ok := s.nodes[name]
	if !ok {
		return Node{}, false
	}
	c := *n
	c.keys, c.agents = nil, nil
	return c, true
}

// Entries calls fn with a copy of every entry (in no particular order).
func (s *Store) Entries(fn func(Entry)) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		list := make([]Entry, 0, len(sh.entries))
		for _, e := range sh.entries {
			list = append(list, *e)
		}
		sh.mu.Unlock()
		for _, e := range list {
			fn(e)
		}
	}
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	st := Stats{
		Accepted: s.accepted.Load(), Replayed: s.replayed.Load(), BadWindow: s.badWindow.Load(),
		LateReports: s.late.Load(), FoldedWindows: s.folded.Load(), OOMKills: s.ooms.Load(), MergeErrors: s.mergeErrs.Load(),
		RecommendSeconds: float64(s.recommendNanos.Load()) / 1e9, FoldSeconds: float64(s.foldNanos.Load()) / 1e9,
		RecommendCalls: s.recommendCalls.Load(), FoldedContainer: s.foldedContainers.Load(),
	}
	workloads := map[report.Workload]struct{}{}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Containers += len(sh.entries)
		for k, e := range sh.entries {
			workloads[k.Workload] = struct{}{}
			if e.Rec != nil {
				st.Recommendations++
			}
			if e.NotMergeable != "" {
				st.NotMergeable++
			}
		}
		st.PendingWindows = max(st.PendingWindows, len(sh.pending))
		for _, w := range sh.pending {
			st.PendingEntries += len(w)
		}
		sh.mu.Unlock()
	}
	st.Workloads = len(workloads)
	s.nodeMu.Lock()
	st.Nodes = len(s.nodes)
	s.nodeMu.Unlock()
	return st
}
