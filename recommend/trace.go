package recommend

import (
	"bufio"
	"compress/gzip"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
)

// Series is the usage of one workload, sorted by strictly increasing TS.
// Mem is nil for a CPU-only trace (no mem_bytes column). CPUMax and MemMax
// are the optional window peaks (nil without their column; NaN where a row
// leaves the field empty).
type Series struct {
	Name           string
	TS             []int64   // unix seconds
	CPU            []float64 // cores, mean over the sample's window
	Mem            []float64 // bytes
	CPUMax, MemMax []float64 // peaks within the window
}

// Trace is a usage trace: series in order of first appearance.
type Trace struct {
	Series       []*Series
	MinTS, MaxTS int64
	Rows         int
	// HasMemory is false for a CPU-only trace (no mem_bytes column).
	HasMemory bool
}

// The trace format, in one place (the agent's history export writes it too):
//
//	ts,series,cpu_cores,mem_bytes[,cpu_cores_max,mem_bytes_max]
//
// ts is unix seconds; series names one workload-container; cpu_cores is the
// mean CPU used over the sample's window (cores) and mem_bytes the memory in
// use (bytes; for windowed sources the window mean). Columns are found by
// name and may come in any order; other columns are ignored. mem_bytes may
// be left out for a CPU-only trace (memory is then not scored).
// cpu_cores_max and mem_bytes_max, when present, are the peaks within each
// window (empty where unknown): recommenders are fed the means, as an agent
// sampling the window's average would see them, and Replay scores
// violations against the peaks when ReplayOptions.ScorePeaks is set.
var traceColumns = [...]string{"ts", "series", "cpu_cores", "mem_bytes", "cpu_cores_max", "mem_bytes_max"}

// traceOptional marks the columns a header may lack.
var traceOptional = [...]bool{false, false, false, true, true, true}

// ReadTraceFile reads a trace CSV, gzip-compressed or not (detected from the
// content, so the .gz suffix is optional).
func ReadTraceFile(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTrace, err)
	}
	defer f.Close()
	return ReadTrace(f, path)
}

// ReadTrace parses a trace in the format above. name labels errors.
//
// Every malformed row is an error naming the line: a missing column, a
// non-numeric or non-integer ts, a non-numeric, negative, NaN or infinite
// usage, an empty series, or a timestamp before the series' previous one.
// Rows of one series with the same timestamp are several instances of it
// (the pods of one workload, as the agent's history records them). Nothing
// is skipped silently; rows of a series need not be contiguous.
func ReadTrace(r io.Reader, name string) (*Trace, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: gzip: %w", ErrTrace, name, err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 1<<20)
	}
	cr := csv.NewReader(br)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %s: empty file, want header ts,series,cpu_cores[,mem_bytes]", ErrTrace, name)
		}
		return nil, fmt.Errorf("%w: %s:1: %w", ErrTrace, name, err)
	}
	var col [len(traceColumns)]int
	for i, want := range traceColumns {
		col[i] = -1
		for j, h := range header {
			if h == want {
				col[i] = j
			}
		}
		if col[i] < 0 && !traceOptional[i] {
			return nil, fmt.Errorf("%w: %s:1: header %q lacks column %q", ErrTrace, name, header, want)
		}
	}
	need := slices.Max(col[:]) + 1
	tr := &Trace{MinTS: math.MaxInt64, MaxTS: math.MinInt64}
	index := map[string]*Series{}
	var cur *Series
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			line := 0
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.StartLine
			}
			return nil, fmt.Errorf("%w: %s:%d: %w", ErrTrace, name, line, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) < need {
			return nil, fmt.Errorf("%w: %s:%d: %d fields, want at least %d", ErrTrace, name, line, len(rec), need)
		}
		ts, err := strconv.ParseInt(rec[col[0]], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: %s:%d: ts %q is not an integer of unix seconds", ErrTrace, name, line, rec[col[0]])
		}
		sname := rec[col[1]]
		if sname == "" {
			return nil, fmt.Errorf("%w: %s:%d: empty series", ErrTrace, name, line)
		}
		cpu, err := parseUsage(rec[col[2]])
		if err != nil {
			return nil, fmt.Errorf("%w: %s:%d: cpu_cores %q: %w", ErrTrace, name, line, rec[col[2]], err)
		}
		var opt [3]float64 // mem_bytes, cpu_cores_max, mem_bytes_max
		for k := range opt {
			c := col[3+k]
			if c < 0 {
				continue
			}
			if k > 0 && rec[c] == "" {
				opt[k] = math.NaN() // an unknown peak
				continue
			}
			if opt[k], err = parseUsage(rec[c]); err != nil {
				return nil, fmt.Errorf("%w: %s:%d: %s %q: %w", ErrTrace, name, line, traceColumns[3+k], rec[c], err)
			}
		}
		if cur == nil || cur.Name != sname {
			cur = index[sname]
			if cur == nil {
				cur = &Series{Name: sname}
				index[sname] = cur
				tr.Series = append(tr.Series, cur)
			}
		}
		if n := len(cur.TS); n > 0 && ts < cur.TS[n-1] {
			return nil, fmt.Errorf("%w: %s:%d: series %q unsorted: ts before the previous sample's %d", ErrTrace, name, line, sname, cur.TS[n-1])
		}
		cur.TS = append(cur.TS, ts)
		cur.CPU = append(cur.CPU, cpu)
		if col[3] >= 0 {
			cur.Mem = append(cur.Mem, opt[0])
		}
		if col[4] >= 0 {
			cur.CPUMax = append(cur.CPUMax, opt[1])
		}
		if col[5] >= 0 {
			cur.MemMax = append(cur.MemMax, opt[2])
		}
		tr.MinTS = min(tr.MinTS, ts)
		tr.MaxTS = max(tr.MaxTS, ts)
		tr.Rows++
	}
	if tr.Rows == 0 {
		return nil, fmt.Errorf("%w: %s: no samples after the header", ErrTrace, name)
	}
	tr.HasMemory = col[3] >= 0
	return tr, nil
}

var errBadUsage = errors.New("not a finite non-negative number")

func parseUsage(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 0) || math.IsInf(v, 0) {
		return 0, errBadUsage
	}
	return v, nil
}

// Subset returns a trace of every n-th series (n ≥ 1), for fast iteration.
func (t *Trace) Subset(n int) *Trace {
	if n <= 1 {
		return t
	}
	s := &Trace{MinTS: t.MinTS, MaxTS: t.MaxTS, HasMemory: t.HasMemory}
	for i := 0; i < len(t.Series); i += n {
		s.Series = append(s.Series, t.Series[i])
		s.Rows += len(t.Series[i].TS)
	}
	return s
}
