package recommend

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// seasonSeries feeds a season with 5-minute samples of f for days days
// from t0 and returns it.
func seasonSeries(days int, f func(t time.Time) float64) (*season, time.Time) {
	s := newSeason(8, CPUHistogramOptions(), nil)
	t0 := time.Unix(1375315200, 0)
	end := t0.Add(time.Duration(days) * 24 * time.Hour)
	for t := t0; t.Before(end); t = t.Add(5 * time.Minute) {
		s.add(t, f(t))
	}
	return s, end
}

// TestSeasonNoCycleInNoise: white noise, a random walk, noise with level
// shifts and a 7-hour cycle are not daily cycles, in many draws (the
// permutation test's false-positive rate is at most 1/40 per check, the
// autocorrelation hill lowers it further).
func TestSeasonNoCycleInNoise(t *testing.T) {
	found := 0
	const draws = 60
	for d := range draws {
		rng := rand.New(rand.NewPCG(uint64(d), 3))
		level, walk := 1.0, 1.0
		shapes := []func(t time.Time) float64{
			func(time.Time) float64 { return 1 + 0.3*rng.NormFloat64() },
			func(time.Time) float64 { walk = max(0.01, walk+0.01*rng.NormFloat64()); return walk },
			func(time.Time) float64 {
				if rng.IntN(400) == 0 {
					level = math.Exp(rng.NormFloat64())
				}
				return level * (1 + 0.2*rng.NormFloat64())
			},
			func(t time.Time) float64 {
				return 1 + 0.5*math.Sin(2*math.Pi*float64(t.Unix())/(7*3600)) + 0.1*rng.NormFloat64()
			},
		}
		s, end := seasonSeries(7, shapes[d%len(shapes)])
		if s.detect(end) {
			found++
			t.Logf("draw %d (shape %d): cycle found, acf %.2f, p %.3f", d, d%len(shapes), s.acf, s.pval)
		}
	}
	if found > 1 {
		t.Errorf("a daily cycle found in %d of %d noise series", found, draws)
	}
}

// TestSeasonFindsDailyCycle: a noisy diurnal series (a business-day
// plateau and a sawtooth) is found cyclic once three days are seen, never
// before, and only from the past: the verdict at a time does not change
// when everything after it is replaced.
func TestSeasonFindsDailyCycle(t *testing.T) {
	shapes := map[string]func(rng *rand.Rand, t time.Time) float64{
		"plateau": func(rng *rand.Rand, t time.Time) float64 {
			h := t.UTC().Hour()
			v := 0.3
			if h >= 8 && h < 18 {
				v = 1.5
			}
			return v * (1 + 0.3*rng.NormFloat64())
		},
		"sawtooth": func(rng *rand.Rand, t time.Time) float64 {
			return (2.6 - 1.6*float64(t.UTC().Hour())/23) * (1 + 0.2*rng.NormFloat64())
		},
	}
	for name, f := range shapes {
		rng := rand.New(rand.NewPCG(5, 5))
		s, end := seasonSeries(6, func(t time.Time) float64 { return f(rng, t) })
		if !s.detect(end) {
			t.Errorf("%s: no cycle found in 6 days (acf %.2f, p %.3f)", name, s.acf, s.pval)
		}
		// With two days only: too early to tell.
		rng = rand.New(rand.NewPCG(5, 5))
		s2, end2 := seasonSeries(2, func(t time.Time) float64 { return f(rng, t) })
		if s2.detect(end2) {
			t.Errorf("%s: a cycle found from 2 days", name)
		}
	}
}

// cyclicTrace is a fleet of flat series (noise around a constant) and
// cyclic ones (a business-day plateau, 5× its night level), 5-minute
// samples for days days.
func cyclicTrace(flat, cyclic, days int, seed uint64) *Trace {
	rng := rand.New(rand.NewPCG(seed, 7))
	const t0 = int64(1375315200)
	tr := &Trace{MinTS: t0, HasMemory: true}
	for s := range flat + cyclic {
		sr := &Series{Name: string(rune('a'+s%26)) + string(rune('a'+s/26))}
		size := 0.5 + 2*rng.Float64()
		for ts := t0; ts < t0+int64(days)*86400; ts += 300 {
			u := size * (1 + 0.1*rng.NormFloat64())
			if s >= flat {
				if h := (ts / 3600) % 24; h < 8 || h >= 18 {
					u /= 5
				}
			}
			sr.TS, sr.CPU, sr.Mem = append(sr.TS, ts), append(sr.CPU, max(u, 0)), append(sr.Mem, 1e9)
		}
		tr.Series = append(tr.Series, sr)
		tr.MaxTS = sr.TS[len(sr.TS)-1]
		tr.Rows += len(sr.TS)
	}
	return tr
}

// TestCyclicFollowsTheDay: on a node of diurnal series, with a budget
// that allows two changes a day, the cyclic preset, once the cycle is
// found, holds a lower target at night than by day, and scores less slack
// than cgpilot-balanced at no more violations.
func TestCyclicFollowsTheDay(t *testing.T) {
	tr := cyclicTrace(0, 3, 8, 1)
	vpa := mustPreset(t, "vpa")
	var rows []RecRow
	p := mustPreset(t, CyclicPreset)
	p.ResizeBudget = 2.5
	cyc, err := Replay(tr, ReplayOptions{Policy: p, Control: vpa,
		Rows: func(r RecRow) error { rows = append(rows, r); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	bal, err := Replay(tr, ReplayOptions{Policy: mustPreset(t, DefaultPreset), Control: vpa})
	if err != nil {
		t.Fatal(err)
	}
	var day, night, nd, nn float64
	for _, r := range rows {
		if !r.OK || r.TS < tr.MinTS+5*86400 {
			continue
		}
		if h := (r.TS / 3600) % 24; h >= 9 && h < 17 {
			day, nd = day+r.Policy.CPU.Target, nd+1
		} else if h < 7 || h >= 19 {
			night, nn = night+r.Policy.CPU.Target, nn+1
		}
	}
	if !(night/nn < 0.6*day/nd) {
		t.Errorf("night target %.3f not below 0.6 × day target %.3f", night/nn, day/nd)
	}
	c, b := cyc.Policy.CPU, bal.Policy.CPU
	if !(c.RelativeSlack < 0.8*b.RelativeSlack) || c.ViolationRate > b.ViolationRate+0.002 {
		t.Errorf("cyclic %.3f at %.4f, balanced %.3f at %.4f", c.RelativeSlack, c.ViolationRate, b.RelativeSlack, b.ViolationRate)
	}
	t.Logf("cyclic: slack %.3f viol %.4f rz %.2f; balanced: %.3f %.4f %.2f; day %.2f night %.2f",
		c.RelativeSlack, c.ViolationRate, c.ChangesPerSeriesDay, b.RelativeSlack, b.ViolationRate, b.ChangesPerSeriesDay, day/nd, night/nn)
}

// TestBudgetGoesToCyclic: on a node of flat and cyclic containers with a
// budget of one change per container per day, the cyclic ones get the
// changes (they follow the day), the flat ones hold still, and the node's
// changes stay within the budget.
func TestBudgetGoesToCyclic(t *testing.T) {
	const flat, cyclic = 12, 4
	tr := cyclicTrace(flat, cyclic, 8, 2)
	var rows []RecRow
	p := mustPreset(t, CyclicPreset)
	if _, err := Replay(tr, ReplayOptions{Policy: p, Control: mustPreset(t, "vpa"),
		Rows: func(r RecRow) error { rows = append(rows, r); return nil }}); err != nil {
		t.Fatal(err)
	}
	changes := map[string]int{}
	prev := map[string]float64{}
	from := tr.MinTS + 2*86400 // established (1 day) and on
	for _, r := range rows {
		if !r.OK {
			continue
		}
		if old, ok := prev[r.Series]; ok && r.TS >= from && r.Policy.CPU.Target != old {
			changes[r.Series]++
		}
		prev[r.Series] = r.Policy.CPU.Target
	}
	var flatN, cycN int
	for i, s := range tr.Series {
		if i < flat {
			flatN += changes[s.Name]
		} else {
			cycN += changes[s.Name]
		}
	}
	days := float64(tr.MaxTS-from) / 86400
	perDay := float64(flatN+cycN) / (days * float64(flat+cyclic))
	if perDay > p.ResizeBudget*1.05 {
		t.Errorf("%.2f changes per container per day, budget %v", perDay, p.ResizeBudget)
	}
	if float64(cycN)/cyclic < 4*float64(flatN)/flat || float64(cycN)/cyclic/days < 1.5 {
		t.Errorf("cyclic containers got %d changes, flat ones %d (%d and %d containers, %.1f days)", cycN, flatN, cyclic, flat, days)
	}
	t.Logf("%.1f days: cyclic %d changes (%.2f/container/day), flat %d (%.2f); node %.2f/container/day",
		days, cycN, float64(cycN)/cyclic/days, flatN, float64(flatN)/flat/days, perDay)
}
