package topology

// Summary is the stable JSON view of a Topology that cgpilotctl prints and
// golden files record. Ids are machine-unique; -1 means unknown.
type Summary struct {
	CPUs     []CPUSummary        `json:"cpus"`
	IRQs     []IRQSummary        `json:"irqs"`
	Reserved []int               `json:"reserved"`
	Isolated []int               `json:"isolated"`
	Nodes    []NodeSummary       `json:"numa_nodes"`
	BlockMQ  []BlockQueueSummary `json:"blk_mq,omitempty"`
}

// CPUSummary is one CPU in a Summary.
type CPUSummary struct {
	ID       int   `json:"id"`
	Online   bool  `json:"online"`
	Core     int   `json:"core"`
	Socket   int   `json:"socket"`
	NUMA     int   `json:"numa"`
	L3       int   `json:"l3"`
	Siblings []int `json:"siblings"`
}

// IRQSummary is one interrupt in a Summary; CPUs is where it lands.
type IRQSummary struct {
	IRQ   int     `json:"irq"`
	Name  string  `json:"name"`
	Kind  IRQKind `json:"kind"`
	Queue string  `json:"queue"`
	CPUs  []int   `json:"cpus"`
}

// NodeSummary is one NUMA node in a Summary.
type NodeSummary struct {
	ID        int         `json:"id"`
	CPUs      []int       `json:"cpus"`
	Distances map[int]int `json:"distances,omitempty"`
}

// BlockQueueSummary is one blk-mq hardware queue in a Summary.
type BlockQueueSummary struct {
	Device string `json:"device"`
	Queue  int    `json:"queue"`
	CPUs   []int  `json:"cpus"`
}

// Summarize returns the JSON view of t.
func (t *Topology) Summarize() Summary {
	s := Summary{CPUs: []CPUSummary{}, IRQs: []IRQSummary{}, Reserved: t.Reserved.List(), Isolated: t.Isolated().List(), Nodes: []NodeSummary{}}
	for _, c := range t.CPUs {
		s.CPUs = append(s.CPUs, CPUSummary{ID: c.ID, Online: c.Online, Core: c.Core, Socket: c.Socket, NUMA: c.NUMA, L3: c.L3, Siblings: c.Siblings.List()})
	}
	for _, q := range t.IRQs {
		s.IRQs = append(s.IRQs, IRQSummary{IRQ: q.Number, Name: q.Name, Kind: q.Kind, Queue: q.Queue, CPUs: q.CPUs().List()})
	}
	for _, n := range t.Nodes {
		s.Nodes = append(s.Nodes, NodeSummary{ID: n.ID, CPUs: n.CPUs.List(), Distances: n.Distances})
	}
	for _, b := range t.BlockMQ {
		s.BlockMQ = append(s.BlockMQ, BlockQueueSummary{Device: b.Device, Queue: b.Queue, CPUs: b.CPUs.List()})
	}
	return s
}
