package recommend

import (
	"math"
	"sync"
	"time"
)

// Time-of-day awareness (ResourcePolicy.DailyPeriods).
//
// A container whose usage follows a daily cycle wastes, under any
// marginal-distribution estimator (VPA's, ours), the headroom its peak
// hours need during the rest of the day. The season keeps, beside the
// container's histogram, (1) the hourly means of the last seasonDays days,
// from which a daily cycle is detected without lookahead, and (2) one
// decaying histogram per period of the day (DailyPeriods periods, aligned
// to UTC), from which a cyclic container's target for the coming period is
// read with the same cost objective as its main target.
//
// Detection follows AUTOPERIOD (Vlachos, Yu and Castelli, "On Periodicity
// Detection and Structural Periodic Similarity", SDM 2005), the method
// behind Crane's DSP predictor: a candidate period is accepted when (a) its
// periodogram power is above what random permutations of the same series
// reach (no period in noise), and (b) the autocorrelation at that lag is on
// a hill (a local maximum, and positive). Only one candidate is tested,
// the day (with its second and third harmonics, which a sawtooth or a
// business-hours plateau puts its power in), since only a daily cycle can
// be followed with a target per period of the day. The hourly means are
// detrended by their own day's mean first, so that level shifts are not
// mistaken for a cycle. It is written here (no library in the module's
// dependencies does periodicity detection) in a few dozen lines: a DFT at
// three frequencies and an autocorrelation at three lags.

const (
	seasonDays    = 7 // hourly means kept
	seasonMinDays = 3 // history before a cycle can be found
	seasonHours   = seasonDays * 24
	// seasonPerms is the number of permutations of the null: the cycle's
	// power must beat all of them (p < 1/(seasonPerms+1)).
	seasonPerms = 39
	// seasonMinACF is the least autocorrelation at 24 h of the detrended
	// hourly means for a cycle.
	seasonMinACF = 0.3
	// seasonHalfLife is the period histograms' half-life: a period gets
	// samples once a day, so its memory is counted in days.
	seasonHalfLife = 48 * time.Hour
	// seasonBand: a cyclic container's target moves when the period's
	// estimate leaves ±seasonBand of the target in force.
	seasonBand = 0.1
)

// season is the time-of-day state of one resource of one container.
type season struct {
	hour    [seasonHours]int64 // absolute hour (unix/3600) each slot holds
	sum, n  [seasonHours]float64
	periods []*Histogram
	// cyclic is the last detection's verdict, made at checked (an hour).
	cyclic    bool
	checked   int64
	acf, pval float64
}

func newSeason(periods int, base HistogramOptions, memo *decayMemo) *season {
	s := &season{periods: make([]*Histogram, periods), checked: math.MinInt64}
	o := base
	o.HalfLife = seasonHalfLife
	for i := range s.periods {
		s.periods[i] = mustHistogram(o, memo)
	}
	for i := range s.hour {
		s.hour[i] = math.MinInt64
	}
	return s
}

// period returns the period of the day of t.
func (s *season) period(t time.Time) int {
	h := floorDiv(t.Unix(), 3600)
	return int((h%24+24)%24) * len(s.periods) / 24
}

func (s *season) add(t time.Time, v float64) {
	h := floorDiv(t.Unix(), 3600)
	slot := int((h%seasonHours + seasonHours) % seasonHours)
	if s.hour[slot] != h {
		s.hour[slot], s.sum[slot], s.n[slot] = h, 0, 0
	}
	s.sum[slot] += v
	s.n[slot]++
	s.periods[s.period(t)].AddSample(v, 1, t)
}

// detect decides, once per hour, whether the hours before now follow a
// daily cycle.
func (s *season) detect(now time.Time) bool {
	h := floorDiv(now.Unix(), 3600)
	if h == s.checked {
		return s.cyclic
	}
	s.checked = h
	s.cyclic, s.acf, s.pval = false, 0, 1
	// The whole days of hourly means before the current hour, oldest first,
	// gaps filled by linear interpolation (at most a quarter missing).
	days := 0
	for d := seasonDays; d >= seasonMinDays; d-- {
		missing := 0
		for k := h - int64(d*24); k < h; k++ {
			if s.hour[int((k%seasonHours+seasonHours)%seasonHours)] != k {
				missing++
			}
		}
		if missing <= d*24/4 {
			days = d
			break
		}
	}
	if days == 0 {
		return false
	}
	n := days * 24
	x := make([]float64, n)
	known := make([]bool, n)
	for i := range n {
		k := h - int64(n) + int64(i)
		slot := int((k%seasonHours + seasonHours) % seasonHours)
		if s.hour[slot] == k && s.n[slot] > 0 {
			x[i], known[i] = s.sum[slot]/s.n[slot], true
		}
	}
	if !fillGaps(x, known) {
		return false
	}
	// Detrend: each day (of the window) less its own mean.
	var total float64
	for d := range days {
		var m float64
		for _, v := range x[d*24 : d*24+24] {
			m += v
		}
		m /= 24
		for i := d * 24; i < d*24+24; i++ {
			x[i] -= m
			total += x[i] * x[i]
		}
	}
	if !(total > 0) {
		return false
	}
	acf := func(lag int) float64 {
		var c float64
		for i := lag; i < n; i++ {
			c += x[i] * x[i-lag]
		}
		return c / total
	}
	// The hill first: it is cheap, and most containers fail it.
	s.acf = acf(24)
	if !(s.acf >= seasonMinACF && s.acf >= acf(23) && s.acf >= acf(25)) {
		return false
	}
	tw := dailyTwiddles(days)
	power := dailyPower(x, tw)
	// The null: the same values in random order (a fixed sequence, so that
	// replay and the live agent decide alike).
	rng := uint64(0x9e3779b97f4a7c15)
	perm := make([]float64, n)
	beaten := 0
	for range seasonPerms {
		copy(perm, x)
		for i := n - 1; i > 0; i-- {
			rng ^= rng << 13
			rng ^= rng >> 7
			rng ^= rng << 17
			j := int(rng % uint64(i+1))
			perm[i], perm[j] = perm[j], perm[i]
		}
		if dailyPower(perm, tw) >= power {
			beaten++
		}
	}
	s.pval = float64(beaten+1) / float64(seasonPerms+1)
	s.cyclic = beaten == 0
	return s.cyclic
}

// twiddles holds dailyTwiddles by the number of days (seasonMinDays to
// seasonDays), computed once.
var twiddles [seasonDays + 1]struct {
	once sync.Once
	tw   [3][2][]float64
}

// dailyTwiddles are the DFT's cos and sin terms of days·24 hourly values at
// one, two and three cycles a day (read-only, shared).
func dailyTwiddles(days int) [3][2][]float64 {
	t := &twiddles[days]
	t.once.Do(func() { t.tw = computeTwiddles(days*24, days) })
	return t.tw
}

func computeTwiddles(n, days int) [3][2][]float64 {
	var tw [3][2][]float64
	for h, k := range []int{days, 2 * days, 3 * days} {
		tw[h][0], tw[h][1] = make([]float64, n), make([]float64, n)
		for i := range n {
			tw[h][1][i], tw[h][0][i] = math.Sincos(2 * math.Pi * float64(k) * float64(i) / float64(n))
		}
	}
	return tw
}

// dailyPower is the periodogram power of x at one, two and three cycles a
// day.
func dailyPower(x []float64, tw [3][2][]float64) float64 {
	var p float64
	for h := range tw {
		var re, im float64
		for i, v := range x {
			re += v * tw[h][0][i]
			im += v * tw[h][1][i]
		}
		p += re*re + im*im
	}
	return p
}

// fillGaps interpolates the unknown values of x linearly between known
// neighbours (ends copy the nearest); false when none is known.
func fillGaps(x []float64, known []bool) bool {
	prev := -1
	for i := range x {
		if !known[i] {
			continue
		}
		if prev < 0 {
			for j := range i {
				x[j] = x[i]
			}
		} else {
			for j := prev + 1; j < i; j++ {
				x[j] = x[prev] + (x[i]-x[prev])*float64(j-prev)/float64(i-prev)
			}
		}
		prev = i
	}
	if prev < 0 {
		return false
	}
	for j := prev + 1; j < len(x); j++ {
		x[j] = x[prev]
	}
	return true
}
