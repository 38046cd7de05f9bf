//go:build linux

package topology

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cgpilot/cgpilot/internal/cpulist"
)

// Parser bounds. Sysfs and procfs text is read once, bounded, and parsed by
// pure functions; whatever the text, a parse of boundInput bytes either
// fails or finishes within boundTime of CPU and boundAlloc bytes of heap.
// Fuzz targets check the same bounds on every input (scaled to its size),
// and TestParserBounds on crafted worst cases.
//
// /proc/interrupts is the one parser whose result grows with its input (an
// 8-byte line "1:0 c q" is a 40-byte entry plus two strings): it gets
// interruptsAllocFactor times the heap bound, still linear in the input.
const (
	boundInput            = 256 << 10
	boundTime             = 10 * time.Millisecond
	boundAlloc            = 1 << 20
	interruptsAllocFactor = 2
)

// parseCost is what one parse took: CPU time of its thread and bytes it
// allocated.
type parseCost struct {
	cpu   time.Duration
	alloc uint64
}

// measureParse runs parse on this goroutine, locked to its thread, and
// returns the thread's CPU time and the heap bytes allocated. Thread CPU
// time, not wall time: on a loaded machine a parse may wait for a CPU
// for longer than it runs.
func measureParse(parse func()) parseCost {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after runtime.MemStats
	var t0, t1 unix.Timespec
	runtime.ReadMemStats(&before)
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &t0)
	parse()
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &t1)
	runtime.ReadMemStats(&after)
	return parseCost{cpu: time.Duration(t1.Nano() - t0.Nano()), alloc: after.TotalAlloc - before.TotalAlloc}
}

// boundsFor scales the bounds to an input of n bytes: an input of up to
// boundInput bytes gets the full bounds, a larger one proportionally more;
// allocFactor multiplies the heap bound. Under the race detector (and its
// 5-20x slowdown) time is not checked.
func boundsFor(n int, allocFactor float64) parseCost {
	scale := max(1, float64(n)/boundInput)
	b := parseCost{cpu: time.Duration(float64(boundTime) * scale), alloc: uint64(float64(boundAlloc) * scale * allocFactor)}
	if raceEnabled {
		b.cpu = time.Hour
	}
	return b
}

// checkBounds fails t when parse of an n-byte input exceeds the bounds in
// its best of three runs (one run over them may be a GC cycle or a page
// fault storm; three in a row are the parser).
func checkBounds(t testing.TB, what string, n int, allocFactor float64, parse func()) parseCost {
	t.Helper()
	limit := boundsFor(n, allocFactor)
	best := parseCost{cpu: time.Duration(1<<63 - 1), alloc: 1<<64 - 1}
	for range 3 {
		c := measureParse(parse)
		best.cpu, best.alloc = min(best.cpu, c.cpu), min(best.alloc, c.alloc)
		if best.cpu <= limit.cpu && best.alloc <= limit.alloc {
			return best
		}
	}
	t.Fatalf("%s of a %d-byte input: %v CPU and %d bytes allocated, bounds %v and %d bytes", what, n, best.cpu, best.alloc, limit.cpu, limit.alloc)
	return best
}

// TestParserBounds feeds each parser crafted boundInput-byte inputs built to
// make it work hardest: the most fields, lines, names or ids per byte.
func TestParserBounds(t *testing.T) {
	// fill repeats unit after head up to boundInput bytes (the last
	// repetition cut short).
	fill := func(head, unit string) []byte {
		b := []byte(head)
		for len(b) < boundInput {
			b = append(b, unit...)
		}
		return b[:boundInput]
	}
	header := func(ncpu int) string {
		var b strings.Builder
		for i := range ncpu {
			fmt.Fprintf(&b, " CPU%d", i)
		}
		return b.String() + "\n"
	}
	lines := func(ncpu int) []byte {
		b := []byte(header(ncpu))
		for i := 0; ; i++ {
			line := fmt.Sprintf("%d:%s c q\n", i, strings.Repeat(" 0", ncpu))
			if len(b)+len(line) > boundInput {
				return b
			}
			b = append(b, line...)
		}
	}
	// Each parse gets its input as bytes and as a string, converted before
	// the measurement.
	interrupts := func(b []byte, _ string) { _, _ = parseInterrupts(b) }
	cases := []struct {
		name        string
		input       []byte
		allocFactor float64
		parse       func([]byte, string)
	}{
		{"interrupts: one CPU, shortest lines", lines(1), interruptsAllocFactor, interrupts},
		{"interrupts: 8192 CPUs", lines(8192), interruptsAllocFactor, interrupts},
		{"interrupts: header only", fill("", " CPU0"), interruptsAllocFactor, interrupts},
		{"interrupts: one long name", fill(header(2)+"1: 0 0 c 1-edge ", "a "), interruptsAllocFactor, interrupts},
		{"interrupts: named lines", fill(header(2), "NMI: 0 0\n"), interruptsAllocFactor, interrupts},
		{"interrupts: blank lines", fill(header(2), "\n"), interruptsAllocFactor, interrupts},
		{"distance row", fill("", "10 "), 1, func(_ []byte, s string) { _, _ = parseDistances(s) }},
		{"cmdline: isolcpus of ranges", fill("isolcpus=", "0-8191,"), 1, func(_ []byte, s string) { _, _ = isolatedFromCmdline(s) }},
		{"cmdline: isolcpus of flags", fill("isolcpus=", "domain,"), 1, func(_ []byte, s string) { _, _ = isolatedFromCmdline(s) }},
		{"cmdline: short words", fill("", "a "), 1, func(_ []byte, s string) { _, _ = isolatedFromCmdline(s) }},
		{"cmdline: longest list", append(fill("isolcpus=", "1,")[:cpulist.MaxLen+8], '1'), 1, func(_ []byte, s string) { _, _ = isolatedFromCmdline(s) }},
		{"blk-mq cpu_list", fill("", "1, "), 1, func(b []byte, _ string) { _, _ = parseBlockCPUList(b) }},
		{"blk-mq cpu_list, longest", fill("", "1, ")[:maxBlockCPUList], 1, func(b []byte, _ string) { _, _ = parseBlockCPUList(b) }},
		{"irq name of queues", fill("", "nvme0q1,"), 1, func(_ []byte, s string) { classifyIRQ(s) }},
		{"irq name, no queue", fill("", "x"), 1, func(_ []byte, s string) { classifyIRQ(s) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.input) > boundInput {
				t.Fatalf("input of %d bytes, more than %d", len(tc.input), boundInput)
			}
			str := string(tc.input)
			c := checkBounds(t, tc.name, len(tc.input), tc.allocFactor, func() { tc.parse(tc.input, str) })
			t.Logf("%d bytes: %v CPU, %d bytes allocated", len(tc.input), c.cpu, c.alloc)
		})
	}
}

// TestCheckBoundsCatchesUnboundedParsers proves the check has teeth: a
// parse that allocates 4 MiB, and one that burns 3x boundTime of CPU, fail
// it.
func TestCheckBoundsCatchesUnboundedParsers(t *testing.T) {
	var sink []byte
	r := &failRecorder{TB: t}
	checkBounds(r, "4 MiB allocation", 100, 1, func() { sink = make([]byte, 4<<20) })
	_ = sink
	if !strings.Contains(r.msg, "bytes allocated") {
		t.Errorf("a 4 MiB allocation passed the bounds (%q)", r.msg)
	}
	if raceEnabled {
		return
	}
	r = &failRecorder{TB: t}
	checkBounds(r, "spin", 100, 1, func() {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
		for end := ts.Nano() + int64(3*boundTime); ts.Nano() < end; {
			_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
		}
	})
	if !strings.Contains(r.msg, "CPU") {
		t.Errorf("a parse burning %v of CPU passed the bounds (%q)", 3*boundTime, r.msg)
	}
}

// failRecorder keeps a Fatalf message instead of ending the test.
type failRecorder struct {
	testing.TB
	msg string
}

func (r *failRecorder) Helper() {}

func (r *failRecorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

func FuzzParseDistances(f *testing.F) {
	for _, s := range []string{"10 21 31\n", "10", "", "10 -1", strings.Repeat("10 ", maxNUMANodes+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkBounds(t, "parseDistances", len(s), 1, func() { _, _ = parseDistances(s) })
		row, err := parseDistances(s)
		if err != nil {
			return
		}
		if len(row) == 0 || len(row) > maxNUMANodes {
			t.Fatalf("%q: %d distances", s, len(row))
		}
		for _, d := range row {
			if d < 0 {
				t.Fatalf("%q: negative distance %d", s, d)
			}
		}
	})
}

func FuzzClassifyIRQ(f *testing.F) {
	for _, s := range []string{"nvme0q1", "nvme0q0", "i40e-eno12399-TxRx-0", "PCIe PME, pciehp", "mlx5_comp3@pci:0000:3b:00.0",
		"virtio0-input.0", "virtio1-req.0", "virtio1-config", strings.Repeat("a", maxQueueName+1) + ", nvme1q2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkBounds(t, "classifyIRQ", len(s), 1, func() { classifyIRQ(s) })
		kind, queue := classifyIRQ(s)
		if queue != "" && (kind == IRQOther || !strings.Contains(s, queue) || len(queue) > maxQueueName) {
			t.Fatalf("%q: kind %s queue %q", s, kind, queue)
		}
	})
}
