package local

import (
	"math"
	"testing"
)

func TestFormats(t *testing.T) {
	for _, tc := range []struct {
		v               float64
		cpu, mem, human string
	}{
		{0, "0", "0", "0"},
		{-1, "0", "0", "0"},
		{math.NaN(), "0", "0", "0"},
		{0.25, "250m", "1", "1Mi"},
		{1.0001, "1001m", "2", "1Mi"},
		{1 << 20, "1048576", "1Mi", "1Mi"},
		// CPU above millicpu.MaxCores (1,048,576 cores) is written as the
		// cap, like every CPU amount cgpilot writes (before, FormatCPU
		// wrote it as given, and past 9.2e15 cores wrapped to a negative).
		{100 << 20, "1048576", "100Mi", "100Mi"},
		{215785636, "1048576", "215785636", "206Mi"},
		{2 << 30, "1048576", "2Gi", "2048Mi"},
		{12.5 * (1 << 30), "1048576", "12800Mi", "12.5Gi"},
		{math.Inf(1), "0", "0", "0"},
		// Memory past int64's range is written as its largest (before,
		// 1e20 bytes wrapped to "-8589934592Gi").
		{1 << 62, "1048576", "4294967296Gi", "4294967296.0Gi"},
		{1e20, "1048576", "9223372036854775807", "93132257461.5Gi"},
	} {
		if got := FormatCPU(tc.v); got != tc.cpu {
			t.Errorf("FormatCPU(%v) = %q, want %q", tc.v, got, tc.cpu)
		}
		if got := FormatMemory(tc.v); got != tc.mem {
			t.Errorf("FormatMemory(%v) = %q, want %q", tc.v, got, tc.mem)
		}
		if got := HumanMemory(tc.v); got != tc.human {
			t.Errorf("HumanMemory(%v) = %q, want %q", tc.v, got, tc.human)
		}
	}
}
