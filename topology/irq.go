package topology

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// IRQKind says what an interrupt serves.
type IRQKind string

// IRQ kinds. Only queue interrupts of these kinds count as IO queues; a
// device's misc/config/admin vector does not.
const (
	IRQNVMe   IRQKind = "nvme"   // nvmeXqY
	IRQNet    IRQKind = "net"    // NIC queues: eth0-TxRx-3, i40e-…-TxRx-N, mlx5_comp3@pci:…, virtioN-input.M
	IRQVirtio IRQKind = "virtio" // other virtio queues: virtio-blk requests, virtqueues
	IRQOther  IRQKind = "other"
)

// IRQ is one numbered line of /proc/interrupts with its affinities.
type IRQ struct {
	Number int
	Chip   string // interrupt controller, e.g. IR-PCI-MSI
	Name   string // the action name(s), e.g. nvme0q3
	Kind   IRQKind
	// Queue is the queue name when the IRQ serves an IO queue ("nvme0q3",
	// "eno1-TxRx-2"); empty otherwise.
	Queue string
	// SMPAffinity is /proc/irq/N/smp_affinity_list (the configured mask);
	// empty when absent.
	SMPAffinity cpuset.CPUSet
	// EffectiveAffinity is /proc/irq/N/effective_affinity_list (where the
	// interrupt really lands); HasEffective is false when the file is absent.
	EffectiveAffinity cpuset.CPUSet
	HasEffective      bool
}

// CPUs returns where the interrupt lands: the effective affinity when known,
// else the configured one.
func (q IRQ) CPUs() cpuset.CPUSet {
	if q.HasEffective && !q.EffectiveAffinity.IsEmpty() {
		return q.EffectiveAffinity
	}
	return q.SMPAffinity
}

// ServesIOQueue reports whether the IRQ is an NVMe, NIC or virtio queue.
func (q IRQ) ServesIOQueue() bool { return q.Queue != "" }

// irqLine is one parsed numbered line of /proc/interrupts.
type irqLine struct {
	number int
	chip   string
	name   string
}

// maxInterruptsBytes bounds the read of /proc/interrupts: a 2-socket server
// with 2,700 IRQs and 112 CPUs writes about 3.5 MB.
const maxInterruptsBytes = 64 << 20

// parseInterrupts parses /proc/interrupts. The header gives the CPU columns;
// numbered lines carry per-CPU counts then the chip, the hardware irq and
// the names. Named lines (NMI:, LOC:, ERR:, …) are skipped. A line with a
// non-numeric label that is not all letters, or a count column that does not
// parse, is an error.
func parseInterrupts(data []byte) ([]irqLine, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxInterruptsBytes)
	if !sc.Scan() {
		return nil, fmt.Errorf("empty file")
	}
	header := strings.Fields(sc.Text())
	if len(header) == 0 {
		return nil, fmt.Errorf("missing CPU header")
	}
	for _, h := range header {
		if !strings.HasPrefix(h, "CPU") {
			return nil, fmt.Errorf("bad header field %q", h)
		}
	}
	ncpu := len(header)
	var out []irqLine
	seen := map[int]bool{}
	for ln := 2; sc.Scan(); ln++ {
		line := sc.Text()
		label, rest, ok := strings.Cut(line, ":")
		label = strings.TrimSpace(label)
		if !ok {
			if strings.TrimSpace(line) == "" {
				continue
			}
			return nil, fmt.Errorf("line %d: no label: %q", ln, truncate(line))
		}
		n, err := strconv.Atoi(label)
		if err != nil {
			if !isWord(label) {
				return nil, fmt.Errorf("line %d: bad label %q", ln, truncate(label))
			}
			continue // architecture counters such as NMI, LOC, ERR
		}
		if n < 0 {
			return nil, fmt.Errorf("line %d: negative irq %d", ln, n)
		}
		if seen[n] {
			return nil, fmt.Errorf("line %d: irq %d listed twice", ln, n)
		}
		seen[n] = true
		fields := strings.Fields(rest)
		i := 0
		for ; i < len(fields) && i < ncpu; i++ {
			if _, err := strconv.ParseUint(fields[i], 10, 64); err != nil {
				break
			}
		}
		// Some architectures print fewer count columns than CPUs, but a
		// numbered line always has at least one.
		if i == 0 {
			return nil, fmt.Errorf("line %d: irq %d has no counts", ln, n)
		}
		l := irqLine{number: n}
		desc := fields[i:]
		if len(desc) > 0 {
			l.chip, desc = desc[0], desc[1:]
		}
		// New kernels print the hardware irq and trigger ("2-edge"); ARM
		// GIC prints them as two fields ("27 Level"). Old kernels print
		// only "IO-APIC-edge  timer".
		if len(desc) > 1 {
			desc = desc[1:]
			if len(desc) > 1 && (strings.EqualFold(desc[0], "level") || strings.EqualFold(desc[0], "edge")) {
				desc = desc[1:]
			}
		}
		l.name = strings.Join(desc, " ")
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func isWord(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

var (
	nvmeQueue   = regexp.MustCompile(`^nvme\d+q(\d+)$`)
	nvmeAdmin   = regexp.MustCompile(`^nvme\d+q0$`)
	netTxRx     = regexp.MustCompile(`(?i)(^|[-_])(txrx|rx|tx|fp|comb)[-_]?\d+$`)
	mlx5Comp    = regexp.MustCompile(`^mlx[45]_comp\d+(@.*)?$`)
	virtioNet   = regexp.MustCompile(`^virtio\d+-(input|output)\.\d+$`)
	virtioQueue = regexp.MustCompile(`^virtio\d+-(req|request|requests)\.\d+$`)
)

// classifyIRQ returns the kind of an interrupt and, for IO queues, the queue
// name. A shared line ("a, b") is classified by its first queue name.
func classifyIRQ(name string) (IRQKind, string) {
	for part := range strings.SplitSeq(name, ",") {
		n := strings.TrimSpace(part)
		switch {
		case nvmeQueue.MatchString(n):
			if nvmeAdmin.MatchString(n) {
				return IRQNVMe, "" // the admin queue carries no IO
			}
			return IRQNVMe, n
		case mlx5Comp.MatchString(n), virtioNet.MatchString(n):
			return IRQNet, n
		case virtioQueue.MatchString(n):
			return IRQVirtio, n
		case netTxRx.MatchString(n):
			return IRQNet, n
		case strings.HasPrefix(n, "virtio"):
			return IRQVirtio, ""
		}
	}
	return IRQOther, ""
}
