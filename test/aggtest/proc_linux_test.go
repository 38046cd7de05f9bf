package aggtest

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestProcCPUAndRSS reads this process: its CPU time grows while it
// spins, never faster than the wall clock times the CPUs, and its RSS is
// within its peak. (The machine is shared: how much CPU a spin gets is not
// asserted.)
func TestProcCPUAndRSS(t *testing.T) {
	start := time.Now()
	before, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	after := before
	for x := 0; after-before < 50*time.Millisecond && time.Since(start) < 30*time.Second; x++ {
		if x%1_000_000 == 0 {
			after, _ = ProcCPU(os.Getpid())
		}
	}
	wall := time.Since(start)
	if after-before < 50*time.Millisecond || after-before > wall*time.Duration(runtime.NumCPU())+20*time.Millisecond {
		t.Errorf("CPU %v -> %v in %v of spinning", before, after, wall)
	}
	cur, peak, err := ProcRSS(os.Getpid())
	if err != nil || cur == 0 || peak < cur {
		t.Errorf("rss %d peak %d: %v", cur, peak, err)
	}
}
