package recommend

import (
	"bytes"
	"compress/gzip"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadTrace(t *testing.T) {
	in := "series,extra,mem_bytes,ts,cpu_cores\n" +
		"a,x,100,10,0.5\n" +
		"a,x,200,20,1.5e-1\n" +
		"b,y,0,5,0\n" +
		"a,z,300,30,2\n" // rows of a series need not be contiguous
	tr, err := ReadTrace(strings.NewReader(in), "t.csv")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Rows != 4 || tr.MinTS != 5 || tr.MaxTS != 30 || len(tr.Series) != 2 {
		t.Fatalf("rows %d min %d max %d series %d", tr.Rows, tr.MinTS, tr.MaxTS, len(tr.Series))
	}
	a := tr.Series[0]
	if a.Name != "a" || len(a.TS) != 3 || a.TS[2] != 30 || a.CPU[1] != 0.15 || a.Mem[2] != 300 {
		t.Errorf("series a = %+v", a)
	}
	if tr.Series[1].Name != "b" {
		t.Errorf("series order %q, want first appearance", tr.Series[1].Name)
	}
}

// TestReadTraceOptionalColumns: a CPU-only trace and the window peaks; the
// 4-column form keeps its meaning.
func TestReadTraceOptionalColumns(t *testing.T) {
	tr, err := ReadTrace(strings.NewReader("ts,series,cpu_cores,cpu_cores_max\n1,a,0.5,2\n2,a,0.25,\n"), "t.csv")
	if err != nil {
		t.Fatal(err)
	}
	a := tr.Series[0]
	if tr.HasMemory || a.Mem != nil || a.MemMax != nil || a.CPUMax[0] != 2 || !math.IsNaN(a.CPUMax[1]) {
		t.Errorf("CPU-only trace: %+v (memory %v)", a, tr.HasMemory)
	}
	tr, err = ReadTrace(strings.NewReader("ts,series,cpu_cores,mem_bytes\n1,a,0.5,7\n"), "t.csv")
	if err != nil || !tr.HasMemory || tr.Series[0].CPUMax != nil || tr.Series[0].Mem[0] != 7 {
		t.Errorf("4-column trace: %+v, %v", tr, err)
	}
}

func TestReadTraceGzip(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte("ts,series,cpu_cores,mem_bytes\n1,s,0.1,10\n2,s,0.2,20\n"))
	zw.Close()
	path := filepath.Join(t.TempDir(), "t.csv.gz")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := ReadTraceFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Rows != 2 || tr.Series[0].CPU[1] != 0.2 {
		t.Errorf("gzip trace: %+v", tr.Series[0])
	}
	if _, err := ReadTraceFile(filepath.Join(t.TempDir(), "missing.csv")); !errors.Is(err, ErrTrace) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestReadTraceErrors(t *testing.T) {
	const h = "ts,series,cpu_cores,mem_bytes\n"
	for _, tc := range []struct {
		name string
		in   string
		want string // substring: file:line and the reason
	}{
		{"empty file", "", "empty file"},
		{"header only", h, "no samples"},
		{"missing column in header", "ts,series,mem_bytes\n1,a,1\n", `t.csv:1: header ["ts" "series" "mem_bytes"] lacks column "cpu_cores"`},
		{"bad peak", h[:len(h)-1] + ",cpu_cores_max\n1,a,0.1,5,x\n", `t.csv:2: cpu_cores_max "x"`},
		{"short row", h + "1,a,0.1,5\n2,a,0.1\n", "t.csv:3: 3 fields, want at least 4"},
		{"non-numeric ts", h + "x,a,0.1,5\n", `t.csv:2: ts "x" is not an integer`},
		{"fractional ts", h + "1.5,a,0.1,5\n", `t.csv:2: ts "1.5" is not an integer`},
		{"non-numeric cpu", h + "1,a,abc,5\n", `t.csv:2: cpu_cores "abc"`},
		{"negative cpu", h + "1,a,-0.1,5\n", `t.csv:2: cpu_cores "-0.1": not a finite non-negative number`},
		{"NaN cpu", h + "1,a,NaN,5\n", `t.csv:2: cpu_cores "NaN"`},
		{"infinite memory", h + "1,a,0.1,+Inf\n", `t.csv:2: mem_bytes "+Inf"`},
		{"negative memory", h + "1,a,0.1,-5\n", `t.csv:2: mem_bytes "-5"`},
		{"empty memory", h + "1,a,0.1,\n", `t.csv:2: mem_bytes ""`},
		{"empty series", h + "1,,0.1,5\n", "t.csv:2: empty series"},
		{"unsorted", h + "5,a,0.1,5\n6,a,0.1,5\n4,a,0.1,5\n", `t.csv:4: series "a" unsorted: ts before the previous sample's 6`},
		{"unsorted across interleaving", h + "5,a,0.1,5\n1,b,0.1,5\n4,a,0.1,5\n", "t.csv:4: series \"a\" unsorted"},
		{"bad quoting", h + "1,\"a,0.1,5\n", "t.csv:2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadTrace(strings.NewReader(tc.in), "t.csv")
			if !errors.Is(err, ErrTrace) {
				t.Fatalf("err = %v, want ErrTrace", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestTraceSubset(t *testing.T) {
	tr := &Trace{MinTS: 1, MaxTS: 9}
	for i := range 5 {
		tr.Series = append(tr.Series, &Series{Name: string(rune('a' + i)), TS: []int64{1, 2}})
	}
	s := tr.Subset(2)
	if len(s.Series) != 3 || s.Series[1].Name != "c" || s.Rows != 6 || s.MinTS != 1 {
		t.Errorf("Subset(2) = %d series, rows %d", len(s.Series), s.Rows)
	}
	if tr.Subset(1) != tr || tr.Subset(0) != tr {
		t.Error("Subset(≤1) should return the trace itself")
	}
}

func FuzzReadTrace(f *testing.F) {
	f.Add([]byte("ts,series,cpu_cores,mem_bytes\n1,a,0.5,100\n2,a,0.25,200\n1,b,0,0\n"))
	f.Add([]byte("mem_bytes,cpu_cores,series,ts\n1,2,x,3\n"))
	f.Add([]byte("ts,series\n1,a\n"))
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadTrace(bytes.NewReader(data), "fuzz.csv")
		if err != nil {
			if !errors.Is(err, ErrTrace) {
				t.Fatalf("error %v does not wrap ErrTrace", err)
			}
			return
		}
		rows := 0
		for _, s := range tr.Series {
			rows += len(s.TS)
			for i := range s.TS {
				if i > 0 && s.TS[i] <= s.TS[i-1] {
					t.Fatalf("series %q not strictly increasing", s.Name)
				}
				if !(s.CPU[i] >= 0) || !(s.Mem[i] >= 0) {
					t.Fatalf("negative usage accepted")
				}
			}
		}
		if rows != tr.Rows || rows == 0 {
			t.Fatalf("rows %d, counted %d", tr.Rows, rows)
		}
	})
}
