//go:build linux

package cgroup

import (
	"fmt"
	"testing"
)

const (
	v1CPUStat = "nr_periods 21\nnr_throttled 2\nthrottled_time 7194923\nnr_bursts 0\nburst_time 0\n"
	v2CPUStat = "usage_usec 1161800\nuser_usec 1000000\nsystem_usec 161800\nnice_usec 0\nnr_periods 10\nnr_throttled 9\nthrottled_usec 723000\nnr_bursts 0\nburst_usec 0\n"
	v1MemStat = "cache 0\nrss 64065536\ninactive_file 4096\ntotal_cache 0\ntotal_rss 64065536\ntotal_inactive_file 8192\ntotal_active_file 0\n"
	v2MemStat = "anon 64065536\nfile 0\nactive_file 0\ninactive_file 12288\nslab 100\n"
	psiFull   = "some avg10=12.34 avg60=0.50 avg300=0.00 total=7700000\nfull avg10=1.00 avg60=0.05 avg300=100.00 total=7630000\n"
)

func TestParseCPUStat(t *testing.T) {
	tests := []struct {
		in      string
		v2      bool
		want    Stats
		wantErr bool
	}{
		{v1CPUStat, false, Stats{Periods: 21, ThrottledPeriods: 2, ThrottledNs: 7194923, HasThrottling: true}, false},
		{v2CPUStat, true, Stats{CPUUsageNs: 1161800000, Periods: 10, ThrottledPeriods: 9, ThrottledNs: 723000000, HasThrottling: true}, false},
		// v2 without the cpu controller enabled: usage only.
		{"usage_usec 5\nuser_usec 3\nsystem_usec 2\n", true, Stats{CPUUsageNs: 5000}, false},
		{"nr_periods 1\n", false, Stats{}, true},
		{"nr_periods x\nnr_throttled 0\nthrottled_time 0\n", false, Stats{}, true},
		{"nr_periods -1\n", true, Stats{}, true},
		{"usage_usec 99999999999999999999999\n", true, Stats{}, true},
		{"", false, Stats{}, true},
	}
	for _, tc := range tests {
		var got Stats
		err := parseCPUStat([]byte(tc.in), tc.v2, &got)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseCPUStat(%q, v2=%v) err = %v, want error %v", tc.in, tc.v2, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && got != tc.want {
			t.Errorf("parseCPUStat(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestParseMemoryStat(t *testing.T) {
	tests := []struct {
		in      string
		v2      bool
		want    uint64
		wantErr bool
	}{
		{v1MemStat, false, 8192, false}, // hierarchical total_, not the local value
		{v2MemStat, true, 12288, false},
		{"rss 1\n", false, 0, true},
		{"inactive_file abc\n", true, 0, true},
		{"\n\ninactive_file 7", true, 7, false},
	}
	for _, tc := range tests {
		got, err := parseMemoryStat([]byte(tc.in), tc.v2)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseMemoryStat(%q, %v) = %d, %v; want %d, error %v", tc.in, tc.v2, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseOOMKills(t *testing.T) {
	tests := []struct {
		in      string
		n       uint64
		ok, err bool
	}{
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3, true, false},
		{"low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n", 1, true, false},
		{"oom_kill_disable 0\nunder_oom 0\n", 0, false, false}, // kernel < 4.13
		{"oom_kill many\n", 0, false, true},
	}
	for _, tc := range tests {
		n, ok, err := ParseOOMKills([]byte(tc.in))
		if n != tc.n || ok != tc.ok || (err != nil) != tc.err {
			t.Errorf("ParseOOMKills(%q) = %d, %v, %v", tc.in, n, ok, err)
		}
	}
}

func TestParsePSI(t *testing.T) {
	var p Pressure
	if err := parsePSI([]byte(psiFull), &p); err != nil {
		t.Fatal(err)
	}
	want := Pressure{Some: PressureLine{1234, 50, 0, 7700000}, Full: PressureLine{100, 5, 10000, 7630000}, HasFull: true}
	if p != want {
		t.Errorf("got %+v, want %+v", p, want)
	}
	p = Pressure{}
	if err := parsePSI([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), &p); err != nil || p.HasFull {
		t.Errorf("some-only: %+v, %v", p, err)
	}
	for _, bad := range []string{
		"", "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"some avg10=0.00 avg60=0.00 total=0\n", "some avg10=1.234 avg60=0.00 avg300=0.00 total=0\n",
		"some avg10=x avg60=0.00 avg300=0.00 total=0\n", "some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\n",
		"half avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
	} {
		if err := parsePSI([]byte(bad), &p); err == nil {
			t.Errorf("parsePSI(%q) accepted", bad)
		}
	}
}

func TestParseMemoryLimitAndCPUMax(t *testing.T) {
	for _, tc := range []struct {
		in        string
		lim       uint64
		unlimited bool
		err       bool
	}{
		{"max\n", 0, true, false}, {"9223372036854771712\n", 9223372036854771712, true, false},
		{"104857600", 104857600, false, false}, {"-1", 0, false, true}, {"", 0, false, true},
	} {
		l, u, err := parseMemoryLimit([]byte(tc.in))
		if l != tc.lim || u != tc.unlimited || (err != nil) != tc.err {
			t.Errorf("parseMemoryLimit(%q) = %d, %v, %v", tc.in, l, u, err)
		}
	}
	for _, tc := range []struct {
		in   string
		want Quota
		err  bool
	}{
		{"max 100000", Quota{-1, 100000}, false}, {"50000 100000", Quota{50000, 100000}, false},
		{"50000", Quota{}, true}, {"-5 100000", Quota{}, true}, {"max x", Quota{}, true},
	} {
		q, err := parseCPUMax(tc.in)
		if q != tc.want || (err != nil) != tc.err {
			t.Errorf("parseCPUMax(%q) = %+v, %v", tc.in, q, err)
		}
	}
	for in, want := range map[string]bool{"-1": true, "max": true, "max 100000": true, "50000": false,
		"50000 100000": false, "0": false, "": false, "maximal": false, "x": false} {
		if got := QuotaUnlimited(in); got != want {
			t.Errorf("QuotaUnlimited(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestParseFixed2AndUint(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "0.00": 0, "12.34": 1234, "1.5": 150, "100.00": 10000} {
		if got, err := parseFixed2([]byte(in)); err != nil || got != want {
			t.Errorf("parseFixed2(%q) = %d, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", ".", "1.", "1.234", "-1", "1e3", "1.a"} {
		if _, err := parseFixed2([]byte(bad)); err == nil && bad != "1." {
			t.Errorf("parseFixed2(%q) accepted", bad)
		}
	}
	if _, err := parseUint([]byte("18446744073709551616")); err == nil {
		t.Error("parseUint accepted 2^64")
	}
	if n, err := parseUint([]byte("18446744073709551615")); err != nil || n != 1<<64-1 {
		t.Errorf("parseUint(max) = %d, %v", n, err)
	}
}

func TestWeightFormulas(t *testing.T) {
	for _, tc := range []struct {
		shares       uint64
		quad, linear uint64
	}{
		{2, 1, 1}, {1024, 100, 39}, {262144, 10000, 10000}, {512, 0, 20},
	} {
		if got := WeightLinear.SharesToWeight(tc.shares); got != tc.linear {
			t.Errorf("linear(%d) = %d, want %d", tc.shares, got, tc.linear)
		}
		if tc.quad != 0 {
			if got := WeightQuadratic.SharesToWeight(tc.shares); got != tc.quad {
				t.Errorf("quadratic(%d) = %d, want %d", tc.shares, got, tc.quad)
			}
		}
	}
}

func TestSetQuotaSteps(t *testing.T) {
	q := func(quota int64, period uint64) Quota { return Quota{quota, period} }
	tests := []struct {
		name     string
		unified  bool
		old, new Quota
		children bool
		want     string
	}{
		{"v2 one write", true, q(20000, 100000), q(50000, 50000), false, "[{cpu.max 50000 50000}]"},
		{"v2 unlimited", true, q(20000, 100000), q(-1, 100000), false, "[{cpu.max max 100000}]"},
		{"same period", false, q(20000, 100000), q(40000, 100000), false, "[{cpu.cfs_quota_us 40000}]"},
		{"period only", false, q(20000, 100000), q(20000, 50000), true, "[{cpu.cfs_period_us 50000}]"},
		// 2 CPUs → 1 CPU with a halved period: quota first gives 0.5, period first 4.
		{"leaf takes the lower path", false, q(200000, 100000), q(50000, 50000), false, "[{cpu.cfs_quota_us 50000} {cpu.cfs_period_us 50000}]"},
		{"parent takes the higher path", false, q(200000, 100000), q(50000, 50000), true, "[{cpu.cfs_period_us 50000} {cpu.cfs_quota_us 50000}]"},
		{"leaf from unlimited", false, q(-1, 100000), q(50000, 50000), false, "[{cpu.cfs_quota_us 50000} {cpu.cfs_period_us 50000}]"},
		{"parent from unlimited", false, q(-1, 100000), q(50000, 50000), true, "[{cpu.cfs_period_us 50000} {cpu.cfs_quota_us 50000}]"},
	}
	for _, tc := range tests {
		got := fmt.Sprint(setQuotaSteps(tc.unified, tc.old, tc.new, tc.children))
		if got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}

func FuzzParseCPUStat(f *testing.F) {
	f.Add([]byte(v1CPUStat), false)
	f.Add([]byte(v2CPUStat), true)
	f.Add([]byte("nr_periods 1"), false)
	f.Fuzz(func(t *testing.T, b []byte, v2 bool) {
		var s Stats
		if err := parseCPUStat(b, v2, &s); err == nil && !v2 && !s.HasThrottling {
			t.Fatalf("v1 cpu.stat accepted without throttling fields: %q", b)
		}
	})
}

func FuzzParseMemoryStat(f *testing.F) {
	f.Add([]byte(v1MemStat), false)
	f.Add([]byte(v2MemStat), true)
	f.Fuzz(func(t *testing.T, b []byte, v2 bool) {
		n, err := parseMemoryStat(b, v2)
		if err != nil && n != 0 {
			t.Fatalf("error with value %d", n)
		}
		_, _, _ = ParseOOMKills(b)
		_, _, _ = parseMemoryLimit(b)
	})
}

func FuzzParsePSI(f *testing.F) {
	f.Add([]byte(psiFull))
	f.Add([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Pressure
		if err := parsePSI(b, &p); err != nil {
			return
		}
		// Print what was parsed and parse it again: same numbers.
		line := func(kind string, l PressureLine) string {
			return fmt.Sprintf("%s avg10=%d.%02d avg60=%d.%02d avg300=%d.%02d total=%d\n", kind,
				l.Avg10/100, l.Avg10%100, l.Avg60/100, l.Avg60%100, l.Avg300/100, l.Avg300%100, l.TotalUs)
		}
		s := line("some", p.Some)
		if p.HasFull {
			s += line("full", p.Full)
		}
		var q Pressure
		if err := parsePSI([]byte(s), &q); err != nil || q != p {
			t.Fatalf("round trip of %q: %+v vs %+v (%v)", b, q, p, err)
		}
	})
}

func FuzzParseCPUMax(f *testing.F) {
	f.Add("max 100000")
	f.Add("50000 100000")
	f.Fuzz(func(t *testing.T, s string) {
		q, err := parseCPUMax(s)
		if err != nil {
			return
		}
		if r, err := parseCPUMax(cpuMaxValue(q)); err != nil || r != q {
			t.Fatalf("%q → %+v does not round-trip: %+v %v", s, q, r, err)
		}
	})
}

func TestWeightFormulaFor(t *testing.T) {
	for _, tc := range []struct {
		runtime, version string
		want             WeightFormula
	}{
		{"runc", "1.3.2", WeightQuadratic}, {"runc", "1.3.1", WeightLinear}, {"runc", "v1.5.2", WeightQuadratic},
		{"runc", "1.4.0-rc.1", WeightQuadratic}, {"runc", "1.2.6", WeightLinear}, {"runc", "2.0", WeightQuadratic},
		{"crun", "1.23", WeightQuadratic}, {"crun", "1.22.1", WeightLinear}, {"crun", "1.24", WeightQuadratic},
	} {
		got, err := WeightFormulaFor(tc.runtime, tc.version)
		if err != nil || got != tc.want {
			t.Errorf("WeightFormulaFor(%s, %s) = %v, %v; want %v", tc.runtime, tc.version, got, err, tc.want)
		}
	}
	for _, bad := range [][2]string{{"runc", "1"}, {"runc", "x.y"}, {"runc", ""}, {"youki", "0.3.0"}, {"crun", "1.2.3.4"}} {
		if _, err := WeightFormulaFor(bad[0], bad[1]); err == nil {
			t.Errorf("WeightFormulaFor(%q, %q) accepted", bad[0], bad[1])
		}
	}
}
