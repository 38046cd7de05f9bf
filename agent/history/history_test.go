package history

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/agent/collector"
	"github.com/cgpilot/cgpilot/recommend"
)

var t0 = time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)

func feed(s *Store, from time.Time, n int, tgs ...*collector.Target) {
	for i := 0; i < n; i++ {
		at := from.Add(time.Duration(i) * 10 * time.Second)
		var round []collector.Sample
		for j, tg := range tgs {
			round = append(round, collector.Sample{Target: tg, Time: at, CPUCores: 0.1 * float64(j+1) * float64(1+i%2), MemoryWorkingSet: uint64(100+i) << 20})
		}
		s.Round(at, round)
	}
}

// TestExportIsATrace: rows per 5-minute window (mean CPU, memory peak, CPU
// peak), the pods of one workload as rows at one time, readable by
// recommend.ReadTrace.
func TestExportIsATrace(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	a := &collector.Target{Key: "ns/Deployment/web/app", PodUID: "p1", Container: "app"}
	b := &collector.Target{Key: "ns/Deployment/web/app", PodUID: "p2", Container: "app"}
	feed(s, t0, 61, a, b) // 10 minutes and one round: two windows closed
	var buf bytes.Buffer
	n, err := s.Export(&buf, t0.Add(-time.Hour))
	if err != nil || n != 4 {
		t.Fatalf("exported %d rows, %v:\n%s", n, err, buf.String())
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if lines[0] != Header || !strings.HasPrefix(lines[1], strconv.FormatInt(t0.Add(Window).Unix(), 10)+",ns/Deployment/web/app,0.15,") {
		t.Fatalf("export:\n%s", buf.String())
	}
	// mean of 0.1 and 0.2 alternating = 0.15; the memory peak is the last
	// sample of the window (100+29 MiB); the cpu peak 0.2.
	if !strings.HasSuffix(lines[1], ","+strconv.Itoa((100+29)<<20)+",0.2") {
		t.Fatalf("row %q", lines[1])
	}
	tr, err := recommend.ReadTrace(strings.NewReader(buf.String()), "history")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Series) != 1 || len(tr.Series[0].TS) != 4 {
		t.Fatalf("trace: %d series, %d rows", len(tr.Series), len(tr.Series[0].TS))
	}
}

// TestTornLineAndRetention: a crash mid-write leaves a torn last line that
// is skipped; days past retention go; the size cap drops rows instead of
// filling the disk.
func TestTornLineAndRetention(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "history-20261101.csv")
	if err := os.WriteFile(old, []byte("1761955200,x,0.1,1,0.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{Dir: dir, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("a day past retention is still there: %v", err)
	}
	tg := &collector.Target{Key: "ns/Pod/x/app", PodUID: "p", Container: "app"}
	feed(s, t0, 31, tg)
	f, _ := os.OpenFile(s.file(t0), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(strconv.FormatInt(t0.Add(2*Window).Unix(), 10) + ",ns/Pod/x/app,0.1,12") // torn: no newline
	f.Close()
	var buf bytes.Buffer
	if n, err := s.Export(&buf, t0); err != nil || n != 1 {
		t.Fatalf("export: %d rows, %v\n%s", n, err, buf.String())
	}
	capped, err := Open(Options{Dir: t.TempDir(), MaxBytes: 100, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	feed(capped, t0, 200, tg, &collector.Target{Key: "ns/Pod/y/app", PodUID: "q", Container: "app"})
	capped.Flush()
	if n, err := capped.Dropped(); n == 0 || err == nil {
		t.Fatalf("size cap not enforced: dropped %d, %v", n, err)
	}
	if sz := capped.size(); sz > 100 {
		t.Fatalf("history grew to %d bytes past its 100-byte cap", sz)
	}
}
