//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opencontainers/cgroups"
)

// cpu.go: the cpu and cpuacct controllers. v1 files: cpuacct.usage,
// cpu.stat, cpu.shares, cpu.cfs_quota_us, cpu.cfs_period_us. v2 files:
// cpu.stat, cpu.weight, cpu.max.

// Shares and quota bounds enforced before any write (the kernel clamps
// shares silently and rejects quota < 1 ms with EINVAL).
const (
	MinShares   = 2
	MaxShares   = 262144
	MinQuotaUs  = 1000
	MinPeriodUs = 1000
	MaxPeriodUs = 1000000
)

// DefaultPeriodUs is the CFS period the kubelet sets on every pod and
// container (100 ms).
const DefaultPeriodUs = 100000

// KubeletQuota is the CFS quota the kubelet derives from a CPU limit in
// millicores: limit × period / 1000, at least 1 ms; no limit (0) is
// unlimited. A negative limit (a negative amount, or one that overflowed
// int64 on its way here) is no limit at all: it gives InvalidQuota, which
// the Writer refuses, never "unlimited".
func KubeletQuota(milliCPU int64) Quota {
	switch {
	case milliCPU < 0:
		return InvalidQuota
	case milliCPU == 0:
		return Quota{QuotaUs: -1, PeriodUs: DefaultPeriodUs}
	}
	// Saturate instead of overflowing on absurd limits.
	q := int64(math.MaxInt64)
	if milliCPU <= math.MaxInt64/DefaultPeriodUs {
		q = milliCPU * DefaultPeriodUs / 1000
	}
	return Quota{QuotaUs: max(q, MinQuotaUs), PeriodUs: DefaultPeriodUs}
}

// InvalidQuota is KubeletQuota's answer to a negative limit; the Writer
// refuses it (and any other quota below -1).
var InvalidQuota = Quota{QuotaUs: math.MinInt64, PeriodUs: DefaultPeriodUs}

// Quota is a CFS bandwidth limit: QuotaUs of CPU time per PeriodUs.
// QuotaUs -1 means unlimited (a quota read from the kernel's "max" or -1);
// the Writer refuses any lower value.
type Quota struct {
	QuotaUs  int64
	PeriodUs uint64
}

// Unlimited reports whether the quota is "max".
func (q Quota) Unlimited() bool { return q.QuotaUs < 0 }

// QuotaUnlimited reports whether value, the trimmed content of
// cpu.cfs_quota_us (v1) or cpu.max (v2) as a WatchEvent carries it, is
// no CFS limit: a negative quota or "max", by the rule of Quota.Unlimited.
// A value that does not parse is a limit.
func QuotaUnlimited(value string) bool {
	f := strings.Fields(value)
	if len(f) == 0 {
		return false
	}
	if f[0] == "max" {
		return true
	}
	q, err := strconv.ParseInt(f[0], 10, 64)
	return err == nil && q < 0
}

// CPUs is the quota as a number of CPUs (+Inf when unlimited); it is the
// value the v1 kernel compares between parent and child.
func (q Quota) CPUs() float64 {
	if q.Unlimited() || q.PeriodUs == 0 {
		return math.Inf(1)
	}
	return float64(q.QuotaUs) / float64(q.PeriodUs)
}

func (q Quota) String() string {
	if q.Unlimited() {
		return fmt.Sprintf("max/%d", q.PeriodUs)
	}
	return fmt.Sprintf("%d/%d", q.QuotaUs, q.PeriodUs)
}

func checkQuota(path string, q Quota) error {
	if q.QuotaUs < -1 {
		return &Refusal{Path: path, Value: strconv.FormatInt(q.QuotaUs, 10), Reason: "negative: the only negative quota is -1, unlimited (this one came from a negative or overflowed CPU limit)"}
	}
	if q.PeriodUs < MinPeriodUs || q.PeriodUs > MaxPeriodUs {
		return &Refusal{Path: path, Value: q.String(), Reason: fmt.Sprintf("period must be within [%d, %d] µs", MinPeriodUs, MaxPeriodUs)}
	}
	if !q.Unlimited() && q.QuotaUs < MinQuotaUs {
		return &Refusal{Path: path, Value: q.String(), Reason: fmt.Sprintf("quota below %d µs (1 ms)", MinQuotaUs)}
	}
	return nil
}

func checkShares(path string, shares uint64) error {
	if shares < MinShares || shares > MaxShares {
		return &Refusal{Path: path, Value: strconv.FormatUint(shares, 10), Reason: fmt.Sprintf("cpu shares must be within [%d, %d]", MinShares, MaxShares)}
	}
	return nil
}

// WeightFormula converts cgroup v1 cpu.shares to v2 cpu.weight the way the
// node's OCI runtime does, so that our writes agree with the runtime's.
type WeightFormula int

const (
	// WeightQuadratic is the conversion of runc ≥ 1.3.2 and crun ≥ 1.23
	// (opencontainers/cgroups ConvertCPUSharesToCgroupV2Value): 2→1,
	// 1024→100, 262144→10000.
	WeightQuadratic WeightFormula = iota
	// WeightLinear is the older conversion: 1 + (shares−2)·9999/262142,
	// which maps the default 1024 shares to weight 39.
	WeightLinear
)

// SharesToWeight converts shares (already within [2, 262144]) to a weight.
func (f WeightFormula) SharesToWeight(shares uint64) uint64 {
	if f == WeightLinear {
		if shares < MinShares {
			shares = MinShares
		}
		return 1 + ((shares-2)*9999)/262142
	}
	return cgroups.ConvertCPUSharesToCgroupV2Value(shares)
}

// parseCPUStat fills the CPU fields of st from cpu.stat. v2 reports µs and
// also carries usage_usec; v1 reports throttled_time in ns.
func parseCPUStat(b []byte, v2 bool, st *Stats) error {
	var seen int
	err := eachKV(b, func(key []byte, v uint64) bool {
		switch string(key) {
		case "usage_usec":
			if v2 {
				st.CPUUsageNs = v * 1000
			}
		case "nr_periods":
			st.Periods = v
			seen++
		case "nr_throttled":
			st.ThrottledPeriods = v
			seen++
		case "throttled_time":
			if !v2 {
				st.ThrottledNs = v
				seen++
			}
		case "throttled_usec":
			if v2 {
				st.ThrottledNs = v * 1000
				seen++
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	st.HasThrottling = seen == 3
	if !v2 && !st.HasThrottling {
		return errors.New("cpu.stat lacks nr_periods/nr_throttled/throttled_time")
	}
	return nil
}

func wrapParse(path string, b []byte, err error) error {
	return parseErr(path, b, err.Error())
}

// readQuota reads the current CFS bandwidth limit.
func readQuota(d Dirs) (Quota, error) { return readQuotaWith(d, readFile) }

// readQuotaWith is readQuota through read (the Writer's record).
func readQuotaWith(d Dirs, read func(dir, file string) (string, error)) (Quota, error) {
	if d.Unified {
		s, err := read(d.CPU, "cpu.max")
		if err != nil {
			return Quota{}, err
		}
		q, err := parseCPUMax(s)
		if err != nil {
			return Quota{}, parseErr(filepath.Join(d.CPU, "cpu.max"), []byte(s), err.Error())
		}
		return q, nil
	}
	qs, err := read(d.CPU, "cpu.cfs_quota_us")
	if err != nil {
		return Quota{}, err
	}
	ps, err := read(d.CPU, "cpu.cfs_period_us")
	if err != nil {
		return Quota{}, err
	}
	q, err := strconv.ParseInt(qs, 10, 64)
	if err != nil {
		return Quota{}, parseErr(filepath.Join(d.CPU, "cpu.cfs_quota_us"), []byte(qs), "not an integer")
	}
	p, err := strconv.ParseUint(ps, 10, 64)
	if err != nil {
		return Quota{}, parseErr(filepath.Join(d.CPU, "cpu.cfs_period_us"), []byte(ps), "not an integer")
	}
	if q < 0 {
		q = -1
	}
	return Quota{QuotaUs: q, PeriodUs: p}, nil
}

// parseCPUMax parses v2 cpu.max: "max 100000" or "50000 100000".
func parseCPUMax(s string) (Quota, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return Quota{}, errors.New("want \"<quota|max> <period>\"")
	}
	p, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return Quota{}, errors.New("period not a number")
	}
	if f[0] == "max" {
		return Quota{QuotaUs: -1, PeriodUs: p}, nil
	}
	q, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || q < 0 {
		return Quota{}, errors.New("quota not a number")
	}
	return Quota{QuotaUs: q, PeriodUs: p}, nil
}

func v1QuotaValue(q Quota) string {
	if q.Unlimited() {
		return "-1"
	}
	return strconv.FormatInt(q.QuotaUs, 10)
}

func cpuMaxValue(q Quota) string {
	if q.Unlimited() {
		return "max " + strconv.FormatUint(q.PeriodUs, 10)
	}
	return strconv.FormatInt(q.QuotaUs, 10) + " " + strconv.FormatUint(q.PeriodUs, 10)
}

// quotaWrite is one file write of a quota change.
type quotaWrite struct{ file, value string }

// setQuotaSteps returns the writes that move old to new. On v2 cpu.max is
// one atomic write. On v1 quota and period are two files, so the cgroup
// passes through (new quota, old period) or (old quota, new period). The v1
// kernel rejects a child whose quota, in CPUs, exceeds its parent's, so a
// cgroup with children takes the larger intermediate (it must stay above
// them) and a leaf the smaller one (it must stay below its parent). Both
// intermediates lie on either side of sqrt(old·new), which is between old
// and new, so the leveled passes in writer.go hold for them too.
func setQuotaSteps(unified bool, old, new Quota, hasChildren bool) []quotaWrite {
	if unified {
		return []quotaWrite{{"cpu.max", cpuMaxValue(new)}}
	}
	if old.PeriodUs == new.PeriodUs {
		return []quotaWrite{{"cpu.cfs_quota_us", v1QuotaValue(new)}}
	}
	quota := quotaWrite{"cpu.cfs_quota_us", v1QuotaValue(new)}
	period := quotaWrite{"cpu.cfs_period_us", strconv.FormatUint(new.PeriodUs, 10)}
	if old.QuotaUs == new.QuotaUs {
		return []quotaWrite{period}
	}
	quotaFirst := Quota{QuotaUs: new.QuotaUs, PeriodUs: old.PeriodUs}.CPUs()
	periodFirst := Quota{QuotaUs: old.QuotaUs, PeriodUs: new.PeriodUs}.CPUs()
	if (quotaFirst > periodFirst) == hasChildren {
		return []quotaWrite{quota, period}
	}
	return []quotaWrite{period, quota}
}

// sharesFile returns the file and value that set shares in this mode.
func sharesFile(unified bool, shares uint64, f WeightFormula) (string, string) {
	if unified {
		return "cpu.weight", strconv.FormatUint(f.SharesToWeight(shares), 10)
	}
	return "cpu.shares", strconv.FormatUint(shares, 10)
}

// WeightFormulaFor picks the shares→weight conversion of an OCI runtime
// from its name and version ("runc" "1.3.2", "crun" "1.23", as `runc
// --version` prints them; a "v" prefix and a "-rc.1"-style suffix are
// accepted). runc ≥ 1.3.2 and crun ≥ 1.23 use WeightQuadratic, older
// versions WeightLinear.
func WeightFormulaFor(runtime, version string) (WeightFormula, error) {
	v := strings.TrimPrefix(strings.TrimSpace(version), "v")
	if i := strings.IndexAny(v, "-+ "); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, fmt.Errorf("%w: runtime version %q: want major.minor[.patch]", ErrParse, version)
	}
	var n [3]uint64
	for i, p := range parts {
		x, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%w: runtime version %q: %q is not a number", ErrParse, version, p)
		}
		n[i] = x
	}
	atLeast := func(maj, min, patch uint64) bool {
		if n[0] != maj {
			return n[0] > maj
		}
		if n[1] != min {
			return n[1] > min
		}
		return n[2] >= patch
	}
	var quadratic bool
	switch runtime {
	case "runc":
		quadratic = atLeast(1, 3, 2)
	case "crun":
		quadratic = atLeast(1, 23, 0)
	default:
		return 0, fmt.Errorf("%w: unknown OCI runtime %q (want runc or crun); configure the weight formula", ErrUnsupported, runtime)
	}
	if quadratic {
		return WeightQuadratic, nil
	}
	return WeightLinear, nil
}

// KubeletShares is the cpu.shares the kubelet derives from a CPU request in
// millicores: request × 1024 / 1000, at least MinShares, at most MaxShares
// (on v2 it becomes cpu.weight through the Writer's WeightFormula); no
// request (0) is MinShares. A negative request (a negative amount, or one
// that overflowed int64 on its way here) gives 0, which the Writer
// refuses.
func KubeletShares(milliCPU int64) uint64 {
	switch {
	case milliCPU < 0:
		return 0
	case milliCPU == 0:
		return MinShares
	}
	s := uint64(milliCPU) * 1024 / 1000
	return min(max(s, MinShares), MaxShares)
}
