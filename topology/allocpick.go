package topology

import (
	"sort"

	"k8s.io/utils/cpuset"
)

// coreInfo is one physical core (or one CPU of unknown core) for the
// allocator: positions of its CPUs in Topology.CPUs.
type coreInfo struct {
	cpus []int
	numa int
	llc  int
}

type allocIndex struct {
	cores []coreInfo
	smt   int // the most threads of any core
	// ioCore marks, per CPU position, CPUs on a core that serves IO-queue
	// interrupts; ioLoad scores each core by minus the queues it serves.
	ioCore []bool
	ioLoad []int
}

func (t *Topology) allocIndex() *allocIndex {
	if t.ai != nil {
		return t.ai
	}
	return buildAllocIndex(t)
}

func buildAllocIndex(t *Topology) *allocIndex {
	ix := &allocIndex{smt: 1}
	byCore := map[int]int{}
	for i, c := range t.CPUs {
		if !c.Online {
			continue
		}
		if c.Core == Unknown {
			ix.cores = append(ix.cores, coreInfo{cpus: []int{i}, numa: c.NUMA, llc: c.L3})
			continue
		}
		k, ok := byCore[c.Core]
		if !ok {
			k = len(ix.cores)
			byCore[c.Core] = k
			ix.cores = append(ix.cores, coreInfo{numa: c.NUMA, llc: c.L3})
		}
		ix.cores[k].cpus = append(ix.cores[k].cpus, i)
		ix.smt = max(ix.smt, len(ix.cores[k].cpus))
	}
	ix.ioCore = make([]bool, len(t.CPUs))
	for _, id := range coresOf(t, t.IOCPUs()).UnsortedList() {
		if i, ok := t.index[id]; ok {
			ix.ioCore[i] = true
		}
	}
	ix.ioLoad = ioLoadScores(t, ix)
	return ix
}

// picker holds one allocation's working state, as flags per CPU position.
type picker struct {
	t      *Topology
	ix     *allocIndex
	free   []bool // candidate CPUs
	taken  []bool // CPUs granted exclusively to others
	policy Policy
	numa   NUMAPolicy
	// ioScore orders cores (higher first) when not nil: IO queues newly
	// covered under IOSpread, minus queues served under IOAvoid's fallback.
	ioScore []int
}

func newPicker(t *Topology, ix *allocIndex, m masks, req Request) *picker {
	p := &picker{t: t, ix: ix, free: append([]bool(nil), m.free...), taken: m.taken, policy: req.Policy, numa: req.NUMA}
	if req.IOQueues == IOSpread {
		var taken []int
		for i, tk := range m.taken {
			if tk {
				taken = append(taken, t.CPUs[i].ID)
			}
		}
		p.ioScore = ioSpreadScores(t, ix, cpuset.New(taken...))
	}
	return p
}

// ioSpreadScores counts, per core, the IO queues its CPUs serve that no
// taken CPU serves.
func ioSpreadScores(t *Topology, ix *allocIndex, taken cpuset.CPUSet) []int {
	used := map[string]bool{}
	byCPU := t.IOQueuesByCPU()
	for _, id := range taken.UnsortedList() {
		for _, q := range byCPU[id] {
			used[q] = true
		}
	}
	scores := make([]int, len(ix.cores))
	for k, c := range ix.cores {
		for _, i := range c.cpus {
			for _, q := range byCPU[t.CPUs[i].ID] {
				if !used[q] {
					scores[k]++
				}
			}
		}
	}
	return scores
}

// ioLoadScores scores each core by minus the IO queues its CPUs serve, so
// that the ordering by score prefers the least loaded cores.
func ioLoadScores(t *Topology, ix *allocIndex) []int {
	byCPU := t.IOQueuesByCPU()
	scores := make([]int, len(ix.cores))
	for k, c := range ix.cores {
		for _, i := range c.cpus {
			scores[k] -= len(byCPU[t.CPUs[i].ID])
		}
	}
	return scores
}

// coreFree returns how many of core k's CPUs are candidates, and whether
// the whole core is.
func (p *picker) coreFree(k int) (n int, whole bool) {
	for _, i := range p.ix.cores[k].cpus {
		if p.free[i] {
			n++
		}
	}
	return n, n == len(p.ix.cores[k].cpus)
}

// eligible says whether Spread may use core k: it has a candidate CPU and no
// CPU granted to another exclusive instance.
func (p *picker) eligible(k int) bool {
	has := false
	for _, i := range p.ix.cores[k].cpus {
		if p.taken[i] {
			return false
		}
		has = has || p.free[i]
	}
	return has
}

// capacity returns how many CPUs the cores can give under the policy.
func (p *picker) capacity(cores []int) int {
	total := 0
	for _, k := range cores {
		if p.policy == Spread {
			if p.eligible(k) {
				total++
			}
			continue
		}
		n, _ := p.coreFree(k)
		total += n
	}
	return total
}

// group is a NUMA node or a cache group: its cores, its capacity, and the
// plan chosen for it.
type group struct {
	key   int
	cores []int
	total int
	quota int
	plan  plan
}

// groupBy splits cores by key, in key order.
func (p *picker) groupBy(cores []int, key func(coreInfo) int) []group {
	pos := map[int]int{}
	var gs []group
	for _, k := range cores {
		v := key(p.ix.cores[k])
		i, ok := pos[v]
		if !ok {
			i = len(gs)
			pos[v] = i
			gs = append(gs, group{key: v})
		}
		gs[i].cores = append(gs[i].cores, k)
	}
	for i := range gs {
		gs[i].total = p.capacity(gs[i].cores)
	}
	sort.Slice(gs, func(a, b int) bool { return gs[a].key < gs[b].key })
	return gs
}

// plan is a choice of CPU positions, not yet applied, and how many cores it
// splits (takes some of a core's candidate CPUs and leaves others).
type plan struct {
	cpus    []int
	splits  int
	partial int // CPUs taken from cores that were already partly used
}

// better orders (plan, capacity, key): fewer splits, fewer threads of partly
// used cores (whole cores are what full-cores promises), then the group with the
// least capacity (best fit: keep large blocks free), then the lower key.
func better(a, b group) bool {
	if a.plan.splits != b.plan.splits {
		return a.plan.splits < b.plan.splits
	}
	if a.plan.partial != b.plan.partial {
		return a.plan.partial < b.plan.partial
	}
	if a.total != b.total {
		return a.total < b.total
	}
	return a.key < b.key
}

// choose picks the groups that give n CPUs: one group when one holds n (the
// best by better), else (unless single) the largest groups in full and, for
// the rest, the best group among those left.
func (p *picker) choose(gs []group, n int, single bool) ([]group, bool) {
	best := -1
	for i := range gs {
		if gs[i].total < n {
			continue
		}
		gs[i].plan = p.fill(gs[i].cores, n)
		if best < 0 || better(gs[i], gs[best]) {
			best = i
		}
	}
	if best >= 0 {
		g := gs[best]
		g.quota = n
		return []group{g}, true
	}
	if single {
		return nil, false
	}
	order := make([]int, len(gs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return gs[order[a]].total > gs[order[b]].total })
	var out []group
	need := n
	for j, i := range order {
		g := gs[i]
		if g.total == 0 {
			break
		}
		if g.total < need {
			g.quota = g.total
			g.plan = p.fill(g.cores, g.total)
			out = append(out, g)
			need -= g.total
			continue
		}
		last := -1
		for _, r := range order[j:] {
			if gs[r].total < need {
				continue
			}
			gs[r].plan = p.fill(gs[r].cores, need)
			if last < 0 || better(gs[r], gs[last]) {
				last = r
			}
		}
		g = gs[last]
		g.quota = need
		out = append(out, g)
		return out, true
	}
	return nil, false
}

// spreadGroups balances n over the groups with capacity, one unit (a core's
// worth of threads, or one thread under Spread) at a time, largest first.
func spreadGroups(gs []group, n, unit int) ([]group, bool) {
	var out []group
	for _, g := range gs {
		if g.total > 0 {
			out = append(out, g)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].total > out[b].total })
	need := n
	for need > 0 {
		progress := false
		for i := range out {
			if need == 0 {
				break
			}
			step := min(unit, need, out[i].total-out[i].quota)
			if step > 0 {
				out[i].quota += step
				need -= step
				progress = true
			}
		}
		if !progress {
			return nil, false
		}
	}
	kept := out[:0]
	for _, g := range out {
		if g.quota > 0 {
			kept = append(kept, g)
		}
	}
	return kept, true
}

func (p *picker) allocate(n int) (cpuset.CPUSet, error) {
	all := make([]int, len(p.ix.cores))
	for i := range all {
		all[i] = i
	}
	if total := p.capacity(all); total < n {
		what := "free allocatable CPUs"
		if p.policy == Spread {
			what = "free cores with no exclusive thread"
		}
		return cpuset.New(), refuse(ReasonNotEnoughCPUs, cpuset.New(), "%d CPUs requested, %d %s", n, total, what)
	}
	nodes := p.groupBy(all, func(c coreInfo) int { return c.numa })
	var chosen []group
	var ok bool
	if p.numa == NUMASpread {
		unit := p.ix.smt
		if p.policy == Spread {
			unit = 1
		}
		chosen, ok = spreadGroups(nodes, n, unit)
	} else {
		chosen, ok = p.choose(nodes, n, true)
		if !ok && p.numa == NUMAPreferSingle {
			chosen, ok = p.multiNode(nodes, all, n)
		}
	}
	if !ok {
		most := 0
		for _, g := range nodes {
			most = max(most, g.total)
		}
		return cpuset.New(), refuse(ReasonNUMANoFit, cpuset.New(), "%d CPUs requested, the freest NUMA node has %d", n, most)
	}
	ids := make([]int, 0, n)
	for _, node := range chosen {
		for _, i := range p.inNode(node) {
			ids = append(ids, p.t.CPUs[i].ID)
		}
	}
	if len(ids) != n {
		return cpuset.New(), refuse(ReasonNotEnoughCPUs, cpuset.New(), "picked %d of %d CPUs", len(ids), n)
	}
	return cpuset.New(ids...), nil
}

// multiNode spreads a request that no node holds over the fewest nodes
// that hold it without splitting more cores than the whole machine must:
// the largest nodes first, one more node at a time. Each node's quota is
// its share of a split-minimal plan over the chosen nodes together.
func (p *picker) multiNode(nodes []group, all []int, n int) ([]group, bool) {
	floor := p.fill(all, n).splits
	order := make([]group, len(nodes))
	copy(order, nodes)
	sort.SliceStable(order, func(a, b int) bool { return order[a].total > order[b].total })
	// After the largest node, the nearest ones (node*/distance) first.
	if dist := p.t.distancesFrom(order[0].key); dist != nil {
		rest := order[1:]
		sort.SliceStable(rest, func(a, b int) bool {
			da, oka := dist[rest[a].key]
			db, okb := dist[rest[b].key]
			if oka && okb && da != db {
				return da < db
			}
			return rest[a].total > rest[b].total
		})
	}
	var cores []int
	total := 0
	for k := range order {
		cores = append(cores, order[k].cores...)
		total += order[k].total
		if total < n {
			continue
		}
		pl := p.fill(cores, n)
		if pl.splits > floor && k < len(order)-1 {
			continue
		}
		share := map[int]int{}
		for _, i := range pl.cpus {
			share[p.t.CPUs[i].NUMA]++
		}
		var out []group
		for _, g := range order[:k+1] {
			if share[g.key] > 0 {
				g.quota = share[g.key]
				out = append(out, g)
			}
		}
		return out, true
	}
	return nil, false
}

// inNode takes node.quota CPUs from one NUMA node: in the fewest cache
// groups, unless that would split more cores than ignoring caches does.
// It marks the CPUs taken and returns their positions.
func (p *picker) inNode(node group) []int {
	whole := p.fill(node.cores, node.quota)
	caches := p.groupBy(node.cores, func(c coreInfo) int { return c.llc })
	var out []int
	if parts, ok := p.choose(caches, node.quota, false); ok {
		splits := 0
		for _, g := range parts {
			splits += g.plan.splits
		}
		if splits <= whole.splits {
			// Plans of different groups touch different cores, so they
			// can be applied one after the other.
			for _, g := range parts {
				out = append(out, p.apply(g.plan)...)
			}
			return out
		}
	}
	return p.apply(whole)
}

func (p *picker) apply(pl plan) []int {
	for _, i := range pl.cpus {
		p.free[i] = false
	}
	return pl.cpus
}

// ordered returns cores in preference order: as given, or by IO queues
// newly covered under IOSpread.
func (p *picker) ordered(cores []int) []int {
	if p.ioScore == nil {
		return cores
	}
	out := append([]int(nil), cores...)
	sort.SliceStable(out, func(a, b int) bool { return p.ioScore[out[a]] > p.ioScore[out[b]] })
	return out
}

// fill plans quota CPUs from cores without applying them.
//
// Spread: the first free thread of each eligible core. FullCores: a subset
// of cores whose free threads add up to quota exactly, so that no core is
// split, found by a bounded subset-sum over core sizes that prefers whole
// free cores and uses the leftover threads of already split cores only to
// complete the count; when no exact subset exists, one core gives the
// remainder (one split).
func (p *picker) fill(cores []int, quota int) plan {
	cores = p.ordered(cores)
	var pl plan
	if p.policy == Spread {
		for _, k := range cores {
			if len(pl.cpus) == quota {
				break
			}
			if !p.eligible(k) {
				continue
			}
			for _, i := range p.ix.cores[k].cpus {
				if p.free[i] {
					pl.cpus = append(pl.cpus, i)
					break
				}
			}
		}
		return pl
	}
	// Item classes: whole cores by size (largest first), then partial cores
	// by free count (smallest first). Earlier classes are preferred.
	smt := p.ix.smt
	wholeBy := make([][]int, smt+1)
	partBy := make([][]int, smt+1)
	for _, k := range cores {
		n, whole := p.coreFree(k)
		switch {
		case n == 0:
		case whole:
			wholeBy[n] = append(wholeBy[n], k)
		default:
			partBy[n] = append(partBy[n], k)
		}
	}
	type class struct {
		size  int
		cores []int
	}
	var classes []class
	for v := smt; v >= 1; v-- {
		if len(wholeBy[v]) > 0 {
			classes = append(classes, class{v, wholeBy[v]})
		}
	}
	for v := 1; v <= smt; v++ {
		if len(partBy[v]) > 0 {
			classes = append(classes, class{v, partBy[v]})
		}
	}
	// Bounded subset-sum: reach[s] says s is a sum; used[c][s] is how many
	// cores of class c the first reaching combination uses.
	reach := make([]bool, quota+1)
	reach[0] = true
	used := make([][]int32, len(classes))
	for c, cl := range classes {
		u := make([]int32, quota+1)
		for s := 0; s <= quota; s++ {
			if reach[s] {
				continue
			}
			if s >= cl.size && reach[s-cl.size] && int(u[s-cl.size]) < len(cl.cores) {
				reach[s] = true
				u[s] = u[s-cl.size] + 1
			}
		}
		used[c] = u
	}
	pick := func(s int) (cores []int, inPlan map[int]bool) {
		inPlan = map[int]bool{}
		for c := len(classes) - 1; c >= 0; c-- {
			k := int(used[c][s])
			for _, core := range classes[c].cores[:k] {
				cores = append(cores, core)
				inPlan[core] = true
			}
			s -= k * classes[c].size
		}
		return cores, inPlan
	}
	takeAll := func(cs []int) {
		for _, k := range cs {
			n, whole := p.coreFree(k)
			if !whole {
				pl.partial += n
			}
			for _, i := range p.ix.cores[k].cpus {
				if p.free[i] {
					pl.cpus = append(pl.cpus, i)
				}
			}
		}
	}
	if reach[quota] {
		cs, _ := pick(quota)
		takeAll(cs)
		return pl
	}
	// One split: the largest reachable s below quota for which a core
	// outside the combination has more than quota-s free threads.
	for s := quota - 1; s >= 0 && s > quota-smt-1; s-- {
		if !reach[s] {
			continue
		}
		cs, inPlan := pick(s)
		rest := quota - s
		donor, donorFree := -1, 0
		for _, k := range cores {
			if inPlan[k] {
				continue
			}
			if n, _ := p.coreFree(k); n > rest && (donor < 0 || n < donorFree) {
				donor, donorFree = k, n
			}
		}
		if donor < 0 {
			continue
		}
		takeAll(cs)
		for _, i := range p.ix.cores[donor].cpus {
			if p.free[i] && rest > 0 {
				pl.cpus = append(pl.cpus, i)
				rest--
			}
		}
		pl.splits = 1
		return pl
	}
	// Fallback (not expected with cores of at most smt threads): whole
	// cores first, then threads in order, counting the splits.
	taken := map[int]bool{}
	for _, k := range cores {
		if n, whole := p.coreFree(k); whole && len(pl.cpus)+n <= quota {
			takeAll([]int{k})
			taken[k] = true
		}
	}
	for _, k := range cores {
		if taken[k] {
			continue
		}
		got, n := 0, 0
		for _, i := range p.ix.cores[k].cpus {
			if p.free[i] {
				n++
				if len(pl.cpus) < quota {
					pl.cpus = append(pl.cpus, i)
					got++
				}
			}
		}
		if got > 0 && got < n {
			pl.splits++
		}
	}
	return pl
}

// distancesFrom returns the NUMA distances from node id, or nil.
func (t *Topology) distancesFrom(id int) map[int]int {
	for _, n := range t.Nodes {
		if n.ID == id {
			return n.Distances
		}
	}
	return nil
}
