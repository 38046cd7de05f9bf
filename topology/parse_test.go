package topology

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	good := map[string]string{
		"":             "",
		"0":            "0",
		"0-3":          "0-3",
		"3-3":          "3",
		"0-3,8,10-11":  "0-3,8,10-11",
		"8,0-3":        "0-3,8",
		"0-3,2-5":      "0-5",
		" 0-1\n":       "0-1",
		"0, 1, 2":      "0-2", // blk-mq cpu_list
		"8191":         "8191",
		"1,3,5,7,9,11": "1,3,5,7,9,11",
	}
	for in, want := range good {
		got, err := parseCPUList(in)
		if err != nil || got.String() != want {
			t.Errorf("parseCPUList(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	bad := []string{
		"a", "0-a", "x-3", // non-numeric
		"0-", "-3", "0,", ",0", "0,,1", "1--3", // incomplete
		"-1", "+1", "0-+3", // signs
		"3-1",                  // reversed
		"8192", "0-2000000000", // above MaxCPUID
		"0x1", "1.5", "0-3:2", // other syntaxes
	}
	for _, in := range bad {
		if got, err := parseCPUList(in); err == nil {
			t.Errorf("parseCPUList(%q) = %s, want error", in, got)
		}
	}
}

func TestParseCPUMask(t *testing.T) {
	good := map[string]string{
		"1":                      "0",
		"00000000,000aaaa0":      "5,7,9,11,13,15,17,19",
		"0000,00000000,00000033": "0-1,4-5",
		"ffffffff,ffffffff":      "0-63",
		"80000000,00000000":      "63",
		"0\n":                    "",
	}
	for in, want := range good {
		got, err := parseCPUMask(in)
		if err != nil || got.String() != want {
			t.Errorf("parseCPUMask(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	bad := []string{"", "g", "0x1", "123456789", "1,,1", ",1", "1,", "-1", strings.Repeat("0,", 3000) + "0"}
	for _, in := range bad {
		if got, err := parseCPUMask(in); err == nil {
			t.Errorf("parseCPUMask(%q) = %s, want error", in, got)
		}
	}
}

func TestIsolatedFromCmdline(t *testing.T) {
	tests := []struct{ cmdline, want string }{
		{"ro quiet", ""},
		{"isolcpus=1-3", "1-3"},
		{"isolcpus=managed_irq,0-4,11-79 nohz_full=0-4,11-79", "0-4,11-79"},
		{"isolcpus=domain,nohz,managed_irq,2,4", "2,4"},
		{"isolcpus=1 isolcpus=5", "5"},
		{"isolcpus=nohz", ""},
	}
	for _, tc := range tests {
		got, err := isolatedFromCmdline(tc.cmdline)
		if err != nil || got.String() != tc.want {
			t.Errorf("%q: got %s, %v; want %s", tc.cmdline, got, err, tc.want)
		}
	}
	for _, bad := range []string{"isolcpus=foo,1", "isolcpus=1-", "isolcpus=9999999"} {
		if got, err := isolatedFromCmdline(bad); err == nil {
			t.Errorf("%q: got %s, want error", bad, got)
		}
	}
}

func TestParseDistances(t *testing.T) {
	got, err := parseDistances("10 21 31\n")
	if err != nil || len(got) != 3 || got[0] != 10 || got[2] != 31 {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "10 x", "-1", "10 2.5"} {
		if _, err := parseDistances(bad); err == nil {
			t.Errorf("parseDistances(%q): want error", bad)
		}
	}
}

const sampleInterrupts = `           CPU0       CPU1       CPU2       CPU3
  0:         66          0          0          0  IR-IO-APIC    2-edge      timer
  8:          0          0          0          0  IR-IO-APIC    8-edge      rtc0
 24:          0          0          0          0  PCI-MSI 1048576-edge      nvme0q0
 25:       1234          0          0          0  IR-PCI-MSI-0000:00:1c.0    0-edge      PCIe PME, pciehp
 26:          0         12          0          0  PCI-MSI 1048577-edge      nvme0q1
 27:          0          0         44          0  IR-PCI-MSI-0000:3b:00.0  0-edge  i40e-eno12399-TxRx-0
 28:          0          0          0          5  GICv3  27 Level     arch_timer
 29:          1          0          0          0  PCI-MSI 2048-edge      mlx5_comp3@pci:0000:3b:00.0
 30:          1          0          0          0  PCI-MSI 2049-edge      virtio0-input.0
 31:          1          0          0          0  PCI-MSI 2050-edge      virtio1-req.0
 32:          1          0          0          0  PCI-MSI 2051-edge      virtio1-config
 33:          1          0          0          0  PCI-MSI 2052-edge      megasas0-msix5
 34:          1          0
NMI:          0          0          0          0   Non-maskable interrupts
LOC:    1234567    2345678    3456789    4567890   Local timer interrupts
ERR:          0
MIS:          0
`

func TestParseInterrupts(t *testing.T) {
	lines, err := parseInterrupts([]byte(sampleInterrupts))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		n          int
		chip, name string
		kind       IRQKind
		queue      string
	}
	want := []row{
		{0, "IR-IO-APIC", "timer", IRQOther, ""},
		{8, "IR-IO-APIC", "rtc0", IRQOther, ""},
		{24, "PCI-MSI", "nvme0q0", IRQNVMe, ""},
		{25, "IR-PCI-MSI-0000:00:1c.0", "PCIe PME, pciehp", IRQOther, ""},
		{26, "PCI-MSI", "nvme0q1", IRQNVMe, "nvme0q1"},
		{27, "IR-PCI-MSI-0000:3b:00.0", "i40e-eno12399-TxRx-0", IRQNet, "i40e-eno12399-TxRx-0"},
		{28, "GICv3", "arch_timer", IRQOther, ""},
		{29, "PCI-MSI", "mlx5_comp3@pci:0000:3b:00.0", IRQNet, "mlx5_comp3@pci:0000:3b:00.0"},
		{30, "PCI-MSI", "virtio0-input.0", IRQNet, "virtio0-input.0"},
		{31, "PCI-MSI", "virtio1-req.0", IRQVirtio, "virtio1-req.0"},
		{32, "PCI-MSI", "virtio1-config", IRQVirtio, ""},
		{33, "PCI-MSI", "megasas0-msix5", IRQOther, ""},
		{34, "", "", IRQOther, ""},
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d: %+v", len(lines), len(want), lines)
	}
	for i, w := range want {
		l := lines[i]
		kind, queue := classifyIRQ(l.name)
		if l.number != w.n || l.chip != w.chip || l.name != w.name || kind != w.kind || queue != w.queue {
			t.Errorf("line %d: got %d %q %q %s %q, want %+v", i, l.number, l.chip, l.name, kind, queue, w)
		}
	}
	bad := map[string]string{
		"empty":              "",
		"no header":          "  0: 1 2 timer\n",
		"garbage label":      "CPU0\n a-b: 1\n",
		"no counts":          "CPU0 CPU1\n 5: timer\n",
		"duplicate":          "CPU0\n 5: 1 x\n 5: 2 y\n",
		"line without colon": "CPU0\n garbage\n",
	}
	for name, in := range bad {
		if got, err := parseInterrupts([]byte(in)); err == nil {
			t.Errorf("%s: got %+v, want error", name, got)
		}
	}
}

func TestClassifyIRQ(t *testing.T) {
	tests := map[string]IRQKind{
		"nvme12q31":          IRQNVMe,
		"eth0-TxRx-3":        IRQNet,
		"ice-ens1f0-TxRx-7":  IRQNet,
		"eno1-rx-0":          IRQNet,
		"eno1-tx-0":          IRQNet,
		"eth0-fp-2":          IRQNet,
		"mlx5_comp0":         IRQNet,
		"virtio3-output.1":   IRQNet,
		"virtio2-request.0":  IRQVirtio,
		"virtio2-virtqueues": IRQVirtio,
		"xhci_hcd":           IRQOther,
		"ahci[0000:00:17.0]": IRQOther,
		"nvme0":              IRQOther,
		"eno1":               IRQOther,
	}
	for name, want := range tests {
		if got, _ := classifyIRQ(name); got != want {
			t.Errorf("classifyIRQ(%q) = %s, want %s", name, got, want)
		}
	}
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-3,8", "0, 1", "", "3-1", "8191", "0-8191", "0-8192"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkBounds(t, "parseCPUList", len(s), 1, func() { _, _ = parseCPUList(s) })
		set, err := parseCPUList(s)
		if err != nil {
			return
		}
		// Whatever parses must round-trip through the canonical form.
		again, err := parseCPUList(set.String())
		if err != nil || !again.Equals(set) {
			t.Fatalf("%q -> %s -> %s, %v", s, set, again, err)
		}
		for _, id := range set.UnsortedList() {
			if id < 0 || id > MaxCPUID {
				t.Fatalf("%q: id %d out of range", s, id)
			}
		}
	})
}

func FuzzParseCPUMask(f *testing.F) {
	for _, s := range []string{"ff", "00000000,000aaaa0", "0", "ffffffff,ffffffff,ffffffff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkBounds(t, "parseCPUMask", len(s), 1, func() { _, _ = parseCPUMask(s) })
		set, err := parseCPUMask(s)
		if err != nil {
			return
		}
		for _, id := range set.UnsortedList() {
			if id < 0 || id > MaxCPUID {
				t.Fatalf("%q: id %d out of range", s, id)
			}
		}
	})
}

func FuzzParseInterrupts(f *testing.F) {
	f.Add([]byte(sampleInterrupts))
	f.Add([]byte("CPU0\n 1: 0 x y z\n"))
	f.Add([]byte("CPU0 CPU1\n 0: 1\nERR: 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkBounds(t, "parseInterrupts", len(b), interruptsAllocFactor, func() { _, _ = parseInterrupts(b) })
		lines, err := parseInterrupts(b)
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for _, l := range lines {
			if l.number < 0 || seen[l.number] {
				t.Fatalf("bad or duplicate irq %d", l.number)
			}
			seen[l.number] = true
			classifyIRQ(l.name)
		}
	})
}

func FuzzParseBlockCPUList(f *testing.F) {
	for _, s := range []string{"0, 1", "0, 1, 2, 3\n", "4", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkBounds(t, "parseBlockCPUList", len(b), 1, func() { _, _ = parseBlockCPUList(b) })
		if set, err := parseBlockCPUList(b); err == nil && set.Size() > MaxCPUID+1 {
			t.Fatalf("%d CPUs", set.Size())
		}
	})
}

func FuzzIsolatedFromCmdline(f *testing.F) {
	f.Add("isolcpus=managed_irq,0-4,11-79 nohz_full=0-4")
	f.Add("isolcpus=")
	f.Fuzz(func(t *testing.T, s string) {
		checkBounds(t, "isolatedFromCmdline", len(s), 1, func() { _, _ = isolatedFromCmdline(s) })
	})
}

// TestCPUListBounds: the worst 256 KiB inputs of the list and mask parsers
// stay within the parser bounds (a blk-mq-style ", " list, a mask of many
// words), and their errors do not quote the input whole.
func TestCPUListBounds(t *testing.T) {
	for _, tc := range []struct {
		what  string
		in    string
		parse func(string) error
	}{
		{"parseCPUList of spaced ids", strings.Repeat("1, ", boundInput/3), func(s string) error { _, err := parseCPUList(s); return err }},
		{"parseCPUList of full ranges", strings.Repeat("0-8191,", boundInput/7), func(s string) error { _, err := parseCPUList(s); return err }},
		{"parseCPUMask of words", strings.Repeat("f,", boundInput/2), func(s string) error { _, err := parseCPUMask(s); return err }},
	} {
		var err error
		checkBounds(t, tc.what, len(tc.in), 1, func() { err = tc.parse(tc.in) })
		if err == nil || len(err.Error()) > 300 {
			t.Errorf("%s: error %.80v (%d bytes)", tc.what, err, len(fmt.Sprint(err)))
		}
	}
}
