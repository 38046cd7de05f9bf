//go:build linux

package topology

import (
	"bytes"
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"
)

// readIRQs reads the interrupts file (<proc>/interrupts) and, for every numbered IRQ,
// <proc>/irq/N/smp_affinity_list (else smp_affinity) and
// effective_affinity_list. A missing, empty (masked) or unreadable
// /proc/interrupts yields a warning and no IRQs; a garbled one is an error.
func readIRQs(procRoot, path string) ([]IRQ, []Warning, error) {
	b, err := readBounded(path, maxInterruptsBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, []Warning{{path, "absent: no IO-queue information"}}, nil
	}
	// Container runtimes mask the file (an empty /dev/null bind mount) or
	// deny it: the rest of the topology is still good.
	if errors.Is(err, fs.ErrPermission) {
		return nil, []Warning{{path, "unreadable (" + err.Error() + "): no IO-queue information"}}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, []Warning{{path, "empty (masked): no IO-queue information"}}, nil
	}
	lines, err := parseInterrupts(b)
	if err != nil {
		return nil, nil, parseErr(path, "", err)
	}
	var warns []Warning
	irqs := make([]IRQ, 0, len(lines))
	noAffinity := 0
	for _, l := range lines {
		q := IRQ{Number: l.number, Chip: l.chip, Name: l.name}
		q.Kind, q.Queue = classifyIRQ(l.name)
		dir := filepath.Join(procRoot, "irq", strconv.Itoa(l.number))
		set, ok, err := readFirstSet(dir, "smp_affinity_list", "smp_affinity")
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			noAffinity++
		}
		q.SMPAffinity = set
		if q.EffectiveAffinity, q.HasEffective, err = readCPUList(filepath.Join(dir, "effective_affinity_list")); err != nil {
			return nil, nil, err
		}
		irqs = append(irqs, q)
	}
	if noAffinity > 0 {
		warns = append(warns, Warning{filepath.Join(procRoot, "irq"), strconv.Itoa(noAffinity) + " IRQs have no smp_affinity file: their CPUs are unknown"})
	}
	return irqs, warns, nil
}
