package aggtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/cgpilot/cgpilot/api/report"
)

// FleetConfig sizes a synthetic cluster.
type FleetConfig struct {
	Nodes, PodsPerNode int
	// Namespaces (default 20); the first half are under a policy.
	Namespaces int
	Seed       uint64
	// Period (default 1 min) and SamplesPerWindow (default 6: every 10 s).
	Period           time.Duration
	SamplesPerWindow int
	// NodeCPU and NodeMemory are each node's allocatable (default 64
	// cores, 256 GiB).
	NodeCPU, NodeMemory float64
	// Start is when the agents started (default 2026-11-01); RolloutOver,
	// when set, spreads the right-sizing of the containers that get it
	// over that time after Start (each is adjusted, with an Adjustment
	// event, at its own moment), so released capacity grows over a run.
	Start       time.Time
	RolloutOver time.Duration
	// ConflictRate is the share of covered containers matched by two
	// policies (default 0.005).
	ConflictRate float64
	// EventRate is the chance per pod and window of an adjustment (a tenth
	// of them failed writes) and a tenth of it of an OOM kill (default 0.002).
	EventRate float64
}

type fleetContainer struct {
	name                 string
	cpu, mem             float64 // mean usage per pod
	burst                float64
	original, current    report.Resources
	rightsized           bool
	adjustAt             time.Duration // after Start
	adjustable           bool
	reason, policy, mode string
	conflicts            []string
	qos                  string
}

type fleetWorkload struct {
	w          report.Workload
	containers []fleetContainer
	phase      float64 // of the daily shape
}

type fleetPod struct {
	wl   int
	name string
}

// Fleet is a deterministic synthetic cluster: workloads (Deployments,
// StatefulSets, a few DaemonSets) with 1-3 containers, spread over nodes,
// with daily usage shapes, overprovisioned declared requests, some
// already right-sized, policies in half the namespaces, and rare
// adjustments, failed writes, OOM kills and conflicting policies.
type Fleet struct {
	cfg       FleetConfig
	workloads []fleetWorkload
	nodes     [][]fleetPod
	agents    []report.Agent
	seq       []uint64
	rng       *rand.Rand
}

// NewFleet builds the cluster.
func NewFleet(cfg FleetConfig) *Fleet {
	if cfg.Namespaces == 0 {
		cfg.Namespaces = 20
	}
	if cfg.Period == 0 {
		cfg.Period = report.DefaultPeriod
	}
	if cfg.SamplesPerWindow == 0 {
		cfg.SamplesPerWindow = 6
	}
	if cfg.NodeCPU == 0 {
		cfg.NodeCPU = 64
	}
	if cfg.NodeMemory == 0 {
		cfg.NodeMemory = 256 << 30
	}
	if cfg.ConflictRate == 0 {
		cfg.ConflictRate = 0.005
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	}
	if cfg.EventRate == 0 {
		cfg.EventRate = 0.002
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	f := &Fleet{cfg: cfg, nodes: make([][]fleetPod, cfg.Nodes), agents: make([]report.Agent, cfg.Nodes), seq: make([]uint64, cfg.Nodes), rng: rng}
	for i := range f.agents {
		f.agents[i] = report.Agent{ID: fmt.Sprintf("agent-%d", i), Started: cfg.Start}
	}
	newWorkload := func(kind, name string, ns int) int {
		nsName := fmt.Sprintf("team-%02d", ns)
		w := fleetWorkload{w: report.Workload{Namespace: nsName, Kind: kind, Name: name}, phase: rng.Float64() * 2 * math.Pi}
		nc := 1
		switch u := rng.Float64(); {
		case u > 0.95:
			nc = 3
		case u > 0.70:
			nc = 2
		}
		for c := range nc {
			cpu := 0.02 + 0.25*rng.ExpFloat64()
			mem := (64 + 400*rng.ExpFloat64()) * (1 << 20)
			over := 1.5 + 2.5*rng.Float64()
			fc := fleetContainer{name: []string{"app", "sidecar", "proxy"}[c], cpu: cpu, mem: mem, burst: 0.2 + rng.Float64(),
				original: report.Resources{CPURequest: round(cpu*over, 0.01), MemoryRequest: round(mem*over, 1<<20)}, qos: "Burstable"}
			fc.original.CPULimit, fc.original.MemoryLimit = 2*fc.original.CPURequest, 2*fc.original.MemoryRequest
			fc.current = fc.original
			if ns < cfg.Namespaces/2 {
				fc.policy = nsName
				fc.mode = []string{"InPlace", "InPlace", "Auto", "DryRun"}[rng.IntN(4)]
				fc.adjustable = true
				switch u := rng.Float64(); {
				case u < 0.03:
					fc.adjustable, fc.reason = false, "ExclusiveCPUs"
				case u < 0.08:
					fc.adjustable, fc.reason = false, "NoResizeSupport"
				case u < 0.08+cfg.ConflictRate:
					fc.adjustable, fc.reason, fc.conflicts = false, "MatchedByTwoPolicies", []string{nsName, "cluster-default"}
				}
				if fc.adjustable && fc.mode != "DryRun" && rng.Float64() < 0.7 {
					fc.rightsized = true
					fc.current = report.Resources{CPURequest: round(cpu*1.3, 0.001), MemoryRequest: round(mem*1.25, 1<<20)}
					fc.current.CPULimit, fc.current.MemoryLimit = 2*fc.current.CPURequest, 2*fc.current.MemoryRequest
					if cfg.RolloutOver > 0 {
						fc.adjustAt = time.Duration(rng.Int64N(int64(cfg.RolloutOver)))
					}
				}
			}
			w.containers = append(w.containers, fc)
		}
		f.workloads = append(f.workloads, w)
		return len(f.workloads) - 1
	}
	total := cfg.Nodes * cfg.PodsPerNode
	placed := 0
	// Three DaemonSets: one pod on every node.
	for d := 0; d < 3 && cfg.PodsPerNode > 3; d++ {
		wl := newWorkload(report.KindDaemonSet, fmt.Sprintf("node-daemon-%d", d), d%cfg.Namespaces)
		for n := range cfg.Nodes {
			f.nodes[n] = append(f.nodes[n], fleetPod{wl: wl, name: fmt.Sprintf("node-daemon-%d-%d", d, n)})
			placed++
		}
	}
	node := 0
	for i := 0; placed < total; i++ {
		replicas := int(math.Exp(rng.Float64() * math.Log(40)))
		kind := report.KindDeployment
		if rng.Float64() < 0.15 {
			kind = report.KindStatefulSet
		}
		wl := newWorkload(kind, fmt.Sprintf("svc-%d", i), rng.IntN(cfg.Namespaces))
		for r := 0; r < replicas && placed < total; r++ {
			for len(f.nodes[node]) >= cfg.PodsPerNode {
				node = (node + 1) % cfg.Nodes
			}
			f.nodes[node] = append(f.nodes[node], fleetPod{wl: wl, name: fmt.Sprintf("svc-%d-%d", i, r)})
			placed++
			node = (node + 1 + rng.IntN(7)) % cfg.Nodes
		}
	}
	return f
}

func round(v, q float64) float64 { return math.Ceil(v/q) * q }

// Workloads returns the number of workloads and workload-containers.
func (f *Fleet) Workloads() (workloads, containers int) {
	for _, w := range f.workloads {
		containers += len(w.containers)
	}
	return len(f.workloads), containers
}

// NodeName names node i.
func (f *Fleet) NodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

// Agent is node i's agent identity.
func (f *Fleet) Agent(i int) report.Agent { return f.agents[i] }

// Keys returns the workload-containers running on node i.
func (f *Fleet) Keys(i int) []report.Key {
	var out []report.Key
	seen := map[report.Key]bool{}
	for _, p := range f.nodes[i] {
		w := f.workloads[p.wl]
		for _, c := range w.containers {
			k := report.Key{Workload: w.w, Container: c.name}
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// shape is the daily usage factor at t for a workload's phase.
func shape(t time.Time, phase float64) float64 {
	day := float64(t.Unix()%86400) / 86400
	return 1 + 0.5*math.Sin(2*math.Pi*day+phase)
}

// current is a container's requests in force at t.
func (f *Fleet) current(c *fleetContainer, t time.Time) report.Resources {
	if c.rightsized && t.Before(f.cfg.Start.Add(c.adjustAt)) {
		return c.original
	}
	return c.current
}

// Report builds node i's report of the window ending at windowEnd,
// stamped with its agent and next sequence number, through the real
// report.Builder (samples every Period/SamplesPerWindow).
func (f *Fleet) Report(i int, windowEnd time.Time) *report.Report {
	cfg := f.cfg
	b, err := report.NewBuilder(report.BuilderConfig{Node: f.NodeName(i), Period: cfg.Period, SampleInterval: cfg.Period / time.Duration(cfg.SamplesPerWindow)})
	if err != nil {
		panic(err)
	}
	start := windowEnd.Add(-cfg.Period)
	var reqCPU, reqMem float64
	for _, p := range f.nodes[i] {
		w := f.workloads[p.wl]
		for _, c := range w.containers {
			k := report.Key{Workload: w.w, Container: c.name}
			cur := f.current(&c, windowEnd)
			b.Describe(k, report.ContainerInfo{Current: cur, Original: c.original, QOS: c.qos, Policy: c.policy, Mode: c.mode,
				Preset: "cgpilot-balanced", Conflicts: c.conflicts, Adjustable: c.adjustable, Reason: c.reason})
			reqCPU += cur.CPURequest
			reqMem += cur.MemoryRequest
			if at := cfg.Start.Add(c.adjustAt); c.rightsized && cfg.RolloutOver > 0 && !at.Before(start) && at.Before(windowEnd) {
				b.Adjusted(report.Adjustment{Key: k, Pod: p.name, Time: at, Resource: report.ResourceCPU, From: c.original.CPURequest, To: c.current.CPURequest, Reason: report.ReasonRecommendation})
				b.Adjusted(report.Adjustment{Key: k, Pod: p.name, Time: at, Resource: report.ResourceMemory, From: c.original.MemoryRequest, To: c.current.MemoryRequest, Reason: report.ReasonRecommendation})
			}
		}
	}
	var nodeCPU, nodeMem float64
	step := cfg.Period / time.Duration(cfg.SamplesPerWindow)
	for s := range cfg.SamplesPerWindow {
		ts := start.Add(time.Duration(s+1) * step).Add(-time.Millisecond)
		nodeCPU, nodeMem = 0.3, 2<<30
		for _, p := range f.nodes[i] {
			w := f.workloads[p.wl]
			sh := shape(ts, w.phase)
			for _, c := range w.containers {
				cpu := c.cpu * sh * math.Exp(c.burst*f.rng.NormFloat64()-c.burst*c.burst/2)
				mem := c.mem * (0.9 + 0.1*sh) * (1 + 0.03*f.rng.NormFloat64())
				b.Sample(report.Key{Workload: w.w, Container: c.name}, p.name, ts, cpu, max(mem, 0))
				nodeCPU += cpu
				nodeMem += mem
			}
		}
		b.NodeSample(ts, nodeCPU, nodeMem)
	}
	b.SetNode(report.NodeUsage{CPUCapacity: cfg.NodeCPU + 0.5, CPUAllocatable: cfg.NodeCPU, CPURequests: reqCPU,
		MemoryCapacity: cfg.NodeMemory + 2<<30, MemoryAllocatable: cfg.NodeMemory, MemoryRequests: reqMem, Pods: len(f.nodes[i])})
	b.SetPools(&report.Pools{SharedCPUs: int(cfg.NodeCPU) - 2, ExclusiveCPUs: 2, ExclusivePods: 1})
	for _, p := range f.nodes[i] {
		if f.rng.Float64() >= cfg.EventRate {
			continue
		}
		w := f.workloads[p.wl]
		c := w.containers[0]
		k := report.Key{Workload: w.w, Container: c.name}
		at := start.Add(time.Duration(f.rng.Int64N(int64(cfg.Period))))
		switch u := f.rng.Float64(); {
		case !c.rightsized && u >= 0.1:
			// Nothing to adjust on a container right-sizing leaves alone.
		case u < 0.1:
			b.OOM(report.OOMKill{Key: k, Pod: p.name, Time: at, UsageBytes: c.current.MemoryLimit, LimitBytes: c.current.MemoryLimit, RequestBytes: c.current.MemoryRequest})
		case u < 0.2:
			b.Adjusted(report.Adjustment{Key: k, Pod: p.name, Time: at, Resource: report.ResourceCPU, From: c.original.CPURequest, To: c.current.CPURequest,
				Reason: report.ReasonRecommendation, Error: "pods/resize: the node does not support in-place resize"})
		default:
			b.Adjusted(report.Adjustment{Key: k, Pod: p.name, Time: at, Resource: report.ResourceMemory, From: c.original.MemoryRequest, To: c.current.MemoryRequest,
				Reason: report.ReasonRecommendation})
		}
	}
	rs := b.Cut(windowEnd)
	if len(rs) != 1 {
		panic(fmt.Sprintf("aggtest: %d reports for one window", len(rs)))
	}
	r := rs[0]
	f.seq[i]++
	r.APIVersion, r.Agent, r.Sequence = report.APIVersion, f.agents[i], f.seq[i]
	return r
}

// PodInfo is one pod of the fleet as the API server holds it: its
// controller (a Deployment's pods a ReplicaSet of pod-template-hash
// "fleet0") and labels.
type PodInfo struct {
	Namespace, Name      string
	OwnerKind, OwnerName string
	Labels               map[string]string
}

// fleetHash is the pod-template-hash of the fleet's Deployments' pods.
const fleetHash = "fleet0"

// Pods returns node i's pods: what the aggregator must see bound to the
// node before it believes the node's reports of their workloads.
func (f *Fleet) Pods(i int) []PodInfo {
	var out []PodInfo
	for _, p := range f.nodes[i] {
		w := f.workloads[p.wl].w
		pi := PodInfo{Namespace: w.Namespace, Name: p.name, OwnerKind: w.Kind, OwnerName: w.Name, Labels: map[string]string{"app": w.Name}}
		if w.Kind == report.KindDeployment {
			pi.OwnerKind, pi.OwnerName = report.KindReplicaSet, w.Name+"-"+fleetHash
			pi.Labels["pod-template-hash"] = fleetHash
		}
		out = append(out, pi)
	}
	return out
}
