package topology

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
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
// parse, is an error. The result is sorted by irq number.
//
// It walks the bytes without splitting them into per-line or per-field
// strings: a large machine's file holds 100-odd count columns on each of
// thousands of lines, and only the chip and name of each line are kept
// (copied, so the result does not pin the file's text).
func parseInterrupts(data []byte) ([]irqLine, error) {
	header, rest, _ := bytes.Cut(data, []byte{'\n'})
	if len(data) == 0 {
		return nil, fmt.Errorf("empty file")
	}
	ncpu := 0
	for f, r := nextField(header); f != nil; f, r = nextField(r) {
		if !bytes.HasPrefix(f, []byte("CPU")) {
			return nil, fmt.Errorf("bad header field %q", truncate(string(f)))
		}
		ncpu++
	}
	if ncpu == 0 {
		return nil, fmt.Errorf("missing CPU header")
	}
	out := make([]irqLine, 0, countNumbered(rest))
	for ln := 2; len(rest) > 0; ln++ {
		if rest[0] == '\n' { // cheap blank lines: no file has many, any input may
			rest = rest[1:]
			continue
		}
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		label, fields, ok := bytes.Cut(line, []byte{':'})
		label = bytes.TrimSpace(label)
		if !ok {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			return nil, fmt.Errorf("line %d: no label: %q", ln, truncate(string(line)))
		}
		n, numbered := irqNumber(label)
		if !numbered {
			if !isWord(string(label)) {
				return nil, fmt.Errorf("line %d: bad label %q", ln, truncate(string(label)))
			}
			continue // architecture counters such as NMI, LOC, ERR
		}
		if n < 0 {
			return nil, fmt.Errorf("line %d: bad irq number %q", ln, truncate(string(label)))
		}
		// Some architectures print fewer count columns than CPUs, but a
		// numbered line always has at least one.
		counts := 0
		f, r := nextField(fields)
		for ; f != nil && counts < ncpu && isUint64(f); f, r = nextField(r) {
			counts++
		}
		if counts == 0 {
			return nil, fmt.Errorf("line %d: irq %d has no counts", ln, n)
		}
		// The description: the chip, then (new kernels) the hardware irq
		// and trigger ("2-edge", or "27 Level" on ARM GIC; old kernels
		// print only "IO-APIC-edge  timer"), then the names.
		l := irqLine{number: n}
		if f != nil {
			l.chip = string(f)
			if d0, r1 := nextField(r); d0 != nil {
				if d1, r2 := nextField(r1); d1 != nil {
					r = r1 // a hardware irq before the names
					if d2, _ := nextField(r2); d2 != nil && (bytes.EqualFold(d1, []byte("level")) || bytes.EqualFold(d1, []byte("edge"))) {
						r = r2
					}
				}
			}
		}
		l.name = joinFields(r)
		out = append(out, l)
	}
	slices.SortStableFunc(out, func(a, b irqLine) int { return cmp.Compare(a.number, b.number) })
	for i := 1; i < len(out); i++ {
		if out[i].number == out[i-1].number {
			return nil, fmt.Errorf("irq %d listed twice", out[i].number)
		}
	}
	return out, nil
}

// irqNumber parses a numbered line's label. numbered is false for a label
// that does not start with a digit (NMI, LOC, …); n is -1 for one that
// starts with a digit but is not a number that fits in an int.
func irqNumber(label []byte) (n int, numbered bool) {
	if len(label) == 0 || label[0] < '0' || label[0] > '9' {
		return 0, false
	}
	for _, c := range label {
		if c < '0' || c > '9' || n > (math.MaxInt-9)/10 {
			return -1, true
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// countNumbered counts the lines of b whose label starts with a digit: the
// most entries parseInterrupts can return, so its result is allocated once.
func countNumbered(b []byte) int {
	n := 0
	for len(b) > 0 {
		if b[0] == '\n' {
			b = b[1:]
			continue
		}
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		if f, _ := nextField(line); len(f) > 0 && f[0] >= '0' && f[0] <= '9' {
			n++
		}
	}
	return n
}

// joinFields returns the space-separated fields of b joined with single
// spaces, as one new string.
func joinFields(b []byte) string {
	size := 0
	for f, r := nextField(b); f != nil; f, r = nextField(r) {
		size += len(f) + 1
	}
	if size == 0 {
		return ""
	}
	var s strings.Builder
	s.Grow(size - 1)
	for f, r := nextField(b); f != nil; f, r = nextField(r) {
		if s.Len() > 0 {
			s.WriteByte(' ')
		}
		s.Write(f)
	}
	return s.String()
}

// nextField returns the first space-separated field of b and what follows
// it; a nil field when there is none.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	if i == len(b) {
		return nil, nil
	}
	j := i
	for j < len(b) && !isSpace(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' }

// isUint64 reports whether b is a decimal that fits in 64 bits, without
// converting it.
func isUint64(b []byte) bool {
	if len(b) == 0 || len(b) > 20 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) < 20 || string(b) <= "18446744073709551615"
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

// maxQueueName bounds the names classifyIRQ matches: queue names are a
// driver or interface name (IFNAMSIZ is 16) with a queue number and perhaps
// a PCI address, far shorter; longer parts are not matched at all.
const maxQueueName = 128

// classifyIRQ returns the kind of an interrupt and, for IO queues, the queue
// name. A shared line ("a, b") is classified by its first queue name.
func classifyIRQ(name string) (IRQKind, string) {
	for part := range strings.SplitSeq(name, ",") {
		n := strings.TrimSpace(part)
		if len(n) > maxQueueName {
			continue
		}
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
