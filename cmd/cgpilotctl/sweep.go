package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cgpilot/cgpilot/recommend"
)

// The frontier sweep (replay --sweep): per trace, VPA with its target
// percentile swept (margin kept at its 15 %), cgpilot-slo with its
// per-container CPU objective swept and cgpilot-fleet with its node-wide
// CPU objective swept (memory objectives a tenth of CPU's), the default
// preset and upstream VPA's default, all replayed against the same VPA
// control and scored alike; and the hindsight bound at VPA's violation
// rates (recommend.HindsightBound, one target per series per day). It
// writes <out>/<trace>.csv and <out>/<trace>.svg.

// sweepPoint is one replayed policy.
type sweepPoint struct {
	family string // "vpa", "cgpilot-slo", "cgpilot-fleet", "default", "control", "bound"
	label  string
	param  float64 // the swept value (VPA percentile, CPU objective)
	s      recommend.PolicyScore
}

var (
	sweepVPAPercentiles = []float64{0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.995}
	sweepObjectives     = []float64{0.002, 0.005, 0.01, 0.02, 0.05, 0.1}
	sweepFleet          = []float64{0.005, 0.01, 0.015, 0.03, 0.06}
	// sweepBoundBlocks are how long the hindsight bounds hold a target: a
	// day (about the resize budget of issue 13) and half a day (a policy
	// that follows a daily cycle in two steps).
	sweepBoundBlocks = []time.Duration{24 * time.Hour, 12 * time.Hour}
	// sweepChangeBudget is the resize budget of the budgeted bound and of
	// the gap closure: counted changes per series per day, on average.
	sweepChangeBudget = 1.0
)

func sweepPolicies() []struct {
	family string
	param  float64
	p      recommend.Policy
} {
	var out []struct {
		family string
		param  float64
		p      recommend.Policy
	}
	add := func(family string, param float64, p recommend.Policy) {
		out = append(out, struct {
			family string
			param  float64
			p      recommend.Policy
		}{family, param, p})
	}
	for _, q := range sweepVPAPercentiles {
		p, _ := recommend.Preset("vpa")
		p.Name = fmt.Sprintf("vpa p%g", 100*q)
		p.VPA.TargetCPUPercentile, p.VPA.TargetMemoryPercentile = q, q
		add("vpa", q, p)
	}
	for _, o := range sweepObjectives {
		add(recommend.SLOPreset, o, recommend.SLOPolicy(fmt.Sprintf("%s %g%%", recommend.SLOPreset, 100*o), o, o/10))
	}
	for _, o := range sweepFleet {
		add(recommend.FleetPreset, o, recommend.FleetPolicy(fmt.Sprintf("%s %g%%", recommend.FleetPreset, 100*o), o, o/10))
	}
	def, _ := recommend.Preset(recommend.DefaultPreset)
	add("default", 0, def)
	cyc, _ := recommend.Preset(recommend.CyclicPreset)
	add("preset", 0, cyc)
	return out
}

// runSweep replays every sweep policy on tr and writes the CSV and SVG.
func runSweep(name string, tr *recommend.Trace, base recommend.ReplayOptions, outDir string, stderr io.Writer) ([]sweepPoint, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	var pts []sweepPoint
	var control recommend.PolicyScore
	for _, sp := range sweepPolicies() {
		start := time.Now()
		opt := base
		opt.Policy = sp.p
		sum, err := recommend.Replay(tr, opt)
		if err != nil {
			return nil, err
		}
		control = sum.Control
		pts = append(pts, sweepPoint{family: sp.family, label: sp.p.Name, param: sp.param, s: sum.Policy})
		fmt.Fprintf(stderr, "sweep %s: %-22s CPU %.3f/%.4f/%.2f  memory %.3f/%.5f/%.2f  (%v)\n", name, sp.p.Name,
			sum.Policy.CPU.RelativeSlack, sum.Policy.CPU.ViolationRate, sum.Policy.CPU.ChangesPerSeriesDay,
			sum.Policy.Memory.RelativeSlack, sum.Policy.Memory.ViolationRate, sum.Policy.Memory.ChangesPerSeriesDay,
			time.Since(start).Round(time.Millisecond))
	}
	control.Policy = "vpa (control)"
	pts = append(pts, sweepPoint{family: "control", label: "vpa (upstream default)", param: 0.9, s: control})
	for _, block := range sweepBoundBlocks {
		label := fmt.Sprintf("hindsight bound (1 target per series per %v)", strings.TrimSuffix(block.String(), "0m0s"))
		bound, err := sweepBound(tr, control, func(viol float64, mem bool) (recommend.Bound, error) {
			return recommend.HindsightBound(tr, viol, recommend.BoundOptions{Block: block, Warmup: base.Warmup, Memory: mem})
		})
		if err != nil {
			return nil, err
		}
		bound.Policy = label
		pts = append(pts, sweepPoint{family: "bound", label: label, param: block.Hours(), s: bound})
	}
	start := time.Now()
	label := fmt.Sprintf("budgeted hindsight bound (≤ %g counted change/series/day)", sweepChangeBudget)
	bound, err := sweepBound(tr, control, func(viol float64, mem bool) (recommend.Bound, error) {
		return recommend.BudgetBound(tr, viol, recommend.BudgetBoundOptions{Warmup: base.Warmup, Memory: mem,
			ChangesPerSeriesDay: sweepChangeBudget, Workers: base.Workers})
	})
	if err != nil {
		return nil, err
	}
	bound.Policy = label
	pts = append(pts, sweepPoint{family: "budget-bound", label: label, param: sweepChangeBudget, s: bound})
	fmt.Fprintf(stderr, "sweep %s: %s CPU %.3f/%.4f/%.2f  memory %.3f/%.5f/%.2f  (%v)\n", name, label,
		bound.CPU.RelativeSlack, bound.CPU.ViolationRate, bound.CPU.ChangesPerSeriesDay,
		bound.Memory.RelativeSlack, bound.Memory.ViolationRate, bound.Memory.ChangesPerSeriesDay, time.Since(start).Round(time.Millisecond))
	base.Policy = recommend.Policy{}
	if err := writeSweepCSV(filepath.Join(outDir, name+".csv"), name, pts); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(outDir, name+".svg"))
	if err != nil {
		return nil, err
	}
	writeSweepSVG(f, name, tr.HasMemory, pts)
	return pts, f.Close()
}

// sweepBound scores one hindsight bound at the control's violation rates,
// per resource (memory only when the trace has it).
func sweepBound(tr *recommend.Trace, control recommend.PolicyScore, at func(viol float64, mem bool) (recommend.Bound, error)) (recommend.PolicyScore, error) {
	out := recommend.PolicyScore{ScoredSamples: control.ScoredSamples}
	for _, r := range []struct {
		mem bool
		c   recommend.Metrics
		m   *recommend.Metrics
	}{{false, control.CPU, &out.CPU}, {true, control.Memory, &out.Memory}} {
		if r.mem && !tr.HasMemory {
			continue
		}
		b, err := at(r.c.ViolationRate, r.mem)
		if err != nil {
			return out, err
		}
		*r.m = recommend.Metrics{RelativeSlack: b.RelativeSlack, ViolationRate: b.ViolationRate, ChangesPerSeriesDay: b.ChangesPerSeriesDay}
	}
	return out, nil
}

func writeSweepCSV(path, trace string, pts []sweepPoint) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"trace", "family", "policy", "param", "scored_samples",
		"cpu_relative_slack", "cpu_violation_rate", "cpu_resizes_per_series_day",
		"mem_relative_slack", "mem_violation_rate", "mem_resizes_per_series_day"})
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	for _, p := range pts {
		w.Write([]string{trace, p.family, p.label, g(p.param), strconv.FormatInt(p.s.ScoredSamples, 10),
			g(p.s.CPU.RelativeSlack), g(p.s.CPU.ViolationRate), g(p.s.CPU.ChangesPerSeriesDay),
			g(p.s.Memory.RelativeSlack), g(p.s.Memory.ViolationRate), g(p.s.Memory.ChangesPerSeriesDay)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeSweepSVG draws one panel per resource: relative slack against the
// violation rate (log scale), each family a line, resizes/day as labels.
// Hand-written because the chart is two panels of lines and markers and no
// plotting library is in the module's dependencies.
func writeSweepSVG(w io.Writer, trace string, memory bool, pts []sweepPoint) {
	panels := []string{"CPU"}
	if memory {
		panels = append(panels, "memory")
	}
	const pw, ph, ml, mt, mb, mr = 460, 330, 60, 46, 52, 16
	width := max(len(panels)*(pw+ml+mr)+10, 640)
	height := ph + mt + mb + 186 // the legend: eight lines and a note
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="10" y="20" font-size="15" font-weight="bold">%s: slack against violations (lower left is better; compare at equal violations)</text>`+"\n", xmlEscape(trace))
	colors := map[string]string{"vpa": "#d62728", recommend.SLOPreset: "#1f77b4", recommend.FleetPreset: "#9467bd", "default": "#2ca02c", "control": "#7f7f7f", "bound": "#000000", "budget-bound": "#ff7f0e", "preset": "#17becf"}
	for i, res := range panels {
		x0 := 10 + i*(pw+ml+mr) + ml
		metric := func(p sweepPoint) recommend.Metrics {
			if res == "CPU" {
				return p.s.CPU
			}
			return p.s.Memory
		}
		// Axis ranges over the plotted points; violations on a log axis.
		vmin, vmax, smax := math.Inf(1), 0.0, 0.0
		for _, p := range pts {
			m := metric(p)
			if m.ViolationRate > 0 {
				vmin, vmax = min(vmin, m.ViolationRate), max(vmax, m.ViolationRate)
			}
			smax = max(smax, m.RelativeSlack)
		}
		if vmax == 0 {
			vmin, vmax = 1e-4, 1e-1
		}
		lo, hi := math.Floor(math.Log10(vmin)), math.Ceil(math.Log10(vmax))
		if hi <= lo {
			hi = lo + 1
		}
		smax = niceCeil(smax * 1.05)
		px := func(v float64) float64 {
			v = max(v, math.Pow(10, lo))
			return float64(x0) + (math.Log10(v)-lo)/(hi-lo)*pw
		}
		py := func(s float64) float64 { return float64(mt+ph) - s/smax*ph }
		fmt.Fprintf(w, `<g><text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x0, mt-8, res)
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", x0, mt, pw, ph)
		for e := lo; e <= hi; e++ {
			x := px(math.Pow(10, e))
			fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
				x, mt, x, mt+ph, x, mt+ph+16, pctLabel(math.Pow(10, e)))
		}
		for k := 0; k <= 4; k++ {
			s := smax * float64(k) / 4
			fmt.Fprintf(w, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%.3g</text>`+"\n",
				x0, py(s), x0+pw, py(s), x0-6, py(s)+4, s)
		}
		fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="middle">violation rate (share of samples above the target, log)</text>`+"\n", x0+pw/2, mt+ph+34)
		fmt.Fprintf(w, `<text transform="translate(%d,%d) rotate(-90)" text-anchor="middle">relative slack (Σ slack / Σ usage)</text>`+"\n", x0-44, mt+ph/2)
		for _, fam := range []string{"vpa", recommend.SLOPreset, recommend.FleetPreset, "default", "preset", "control", "bound", "budget-bound"} {
			var line []sweepPoint
			for _, p := range pts {
				if p.family == fam {
					line = append(line, p)
				}
			}
			sort.Slice(line, func(a, b int) bool { return metric(line[a]).ViolationRate < metric(line[b]).ViolationRate })
			if len(line) > 1 && fam != "bound" && fam != "budget-bound" { // the bounds are points, not a curve
				var d strings.Builder
				for k, p := range line {
					fmt.Fprintf(&d, "%s%.1f,%.1f ", map[bool]string{true: "M", false: "L"}[k == 0], px(metric(p).ViolationRate), py(metric(p).RelativeSlack))
				}
				fmt.Fprintf(w, `<path d="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.TrimSpace(d.String()), colors[fam])
			}
			for _, p := range line {
				m := metric(p)
				x, y := px(m.ViolationRate), py(m.RelativeSlack)
				shape := fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>`, x, y, colors[fam])
				switch fam {
				case "default", "control", "preset":
					shape = fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s" stroke="black"/>`, x-5, y-5, colors[fam])
				case "bound", "budget-bound":
					shape = fmt.Sprintf(`<path d="M%.1f,%.1f l10,10 m0,-10 l-10,10" stroke="%s" stroke-width="2"/>`, x-5, y-5, colors[fam])
				}
				fmt.Fprintf(w, `%s<title>%s: slack %.3f, violations %s, %.2f resizes/series/day</title>`+"\n", shape, xmlEscape(p.label), m.RelativeSlack, pctLabel(m.ViolationRate), m.ChangesPerSeriesDay)
				fmt.Fprintf(w, `<text x="%.1f" y="%.1f" font-size="9" fill="#555">%.2f/d</text>`+"\n", x+6, y-5, m.ChangesPerSeriesDay)
			}
		}
		fmt.Fprintln(w, `</g>`)
	}
	// Legend.
	ly := mt + ph + mb + 10
	lx := 10 + ml
	for _, l := range []struct{ fam, text string }{
		{"vpa", "VPA, target percentile swept 50–99.5 % (+15 % margin)"},
		{recommend.SLOPreset, "cgpilot-slo, per-container CPU objective swept 0.2–10 % (memory a tenth)"},
		{recommend.FleetPreset, "cgpilot-fleet, node-wide CPU objective swept 0.5–6 % (memory a tenth)"},
		{"default", recommend.DefaultPreset + " (default preset)"},
		{"preset", recommend.CyclicPreset + " (time of day, within the resize budget)"},
		{"control", "VPA 1.8.1 defaults (p90 + 15 %)"},
		{"bound", "hindsight bounds at VPA's violation rate: one target per series per day (upper ×) and per half day"},
		{"budget-bound", "budgeted hindsight bound at VPA's violation rate: per-series blocks, ≤ 1 counted change/series/day"},
	} {
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", lx, ly-10, colors[l.fam], lx+18, ly, xmlEscape(l.text))
		ly += 18
	}
	fmt.Fprintf(w, `<text x="%d" y="%d" font-size="10" fill="#555">labels: resizes per series per day (target changes over 10 %%)</text>`+"\n", 10+ml, height-6)
	fmt.Fprintln(w, `</svg>`)
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

func pctLabel(v float64) string { return strconv.FormatFloat(100*v, 'g', 3, 64) + "%" }

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// gapRow is the gap closure of one policy (or one swept family) on one
// resource: G = (VPA's slack − ours) / (VPA's slack − the budgeted bound),
// with "ours" at no more than VPA's violation rate and within the change
// budget.
type gapRow struct {
	resource, policy  string
	slack, viol, rz   float64
	g                 float64 // NaN: not defined (over VPA's violations or the budget)
	vsCurve           float64 // slack ÷ VPA's swept curve at the same violation rate; NaN off the curve's range
	note              string
	vpaSlack, vpaViol float64
	bound, boundViol  float64
	boundRz           float64
}

// gapClosure computes the rows of the gap-closure table: every preset
// point (the default, the control's own point excluded) and every swept
// family's frontier interpolated at VPA's violation rate.
func gapClosure(pts []sweepPoint, memory bool) []gapRow {
	var control, bound recommend.PolicyScore
	for _, p := range pts {
		switch p.family {
		case "control":
			control = p.s
		case "budget-bound":
			bound = p.s
		}
	}
	var out []gapRow
	resources := []string{"CPU"}
	if memory {
		resources = append(resources, "memory")
	}
	for _, res := range resources {
		m := func(s recommend.PolicyScore) recommend.Metrics {
			if res == "CPU" {
				return s.CPU
			}
			return s.Memory
		}
		c, b := m(control), m(bound)
		row := func(policy string, x recommend.Metrics, note string) gapRow {
			r := gapRow{resource: res, policy: policy, slack: x.RelativeSlack, viol: x.ViolationRate, rz: x.ChangesPerSeriesDay,
				vpaSlack: c.RelativeSlack, vpaViol: c.ViolationRate, bound: b.RelativeSlack, boundViol: b.ViolationRate,
				boundRz: b.ChangesPerSeriesDay, g: math.NaN(), note: note}
			r.vsCurve = x.RelativeSlack / frontierAt(pts, "vpa", m, x.ViolationRate, math.Inf(1)).RelativeSlack
			switch {
			case x.ViolationRate > c.ViolationRate*(1+1e-9):
				r.note = "violations above VPA's"
			case x.ChangesPerSeriesDay > sweepChangeBudget:
				r.note = "resizes over the budget"
			case c.RelativeSlack > b.RelativeSlack:
				r.g = (c.RelativeSlack - x.RelativeSlack) / (c.RelativeSlack - b.RelativeSlack)
			}
			return r
		}
		for _, p := range pts {
			if p.family == "default" {
				out = append(out, row(p.label+" (default)", m(p.s), "at its own point"))
			}
			if p.family == recommend.FleetPreset && p.param == 0.015 || p.family == "preset" {
				out = append(out, row(p.label+" (preset)", m(p.s), "at its own point"))
			}
		}
		for _, fam := range []string{recommend.FleetPreset, recommend.SLOPreset} {
			x := frontierAt(pts, fam, m, c.ViolationRate, sweepChangeBudget)
			if math.IsNaN(x.RelativeSlack) {
				out = append(out, gapRow{resource: res, policy: fam + " frontier", g: math.NaN(), vsCurve: math.NaN(), slack: math.NaN(),
					viol: math.NaN(), rz: math.NaN(), note: "VPA's rate outside the swept range", vpaSlack: c.RelativeSlack,
					vpaViol: c.ViolationRate, bound: b.RelativeSlack, boundViol: b.ViolationRate, boundRz: b.ChangesPerSeriesDay})
				continue
			}
			out = append(out, row(fam+" frontier", x, "interpolated at VPA's violation rate"))
		}
	}
	return out
}

// frontierAt interpolates a swept family's slack and resizes at violation
// rate v (linear in log violations between the two neighbouring points),
// over the points within maxRz resizes per series per day; the slack is
// NaN when v is outside their range.
func frontierAt(pts []sweepPoint, family string, m func(recommend.PolicyScore) recommend.Metrics, v, maxRz float64) recommend.Metrics {
	var line []recommend.Metrics
	for _, p := range pts {
		if x := m(p.s); p.family == family && x.ChangesPerSeriesDay <= maxRz && x.ViolationRate > 0 {
			line = append(line, x)
		}
	}
	sort.Slice(line, func(a, b int) bool { return line[a].ViolationRate < line[b].ViolationRate })
	for i := 1; i < len(line); i++ {
		a, b := line[i-1], line[i]
		if v < a.ViolationRate || v > b.ViolationRate {
			continue
		}
		f := 0.0
		if b.ViolationRate > a.ViolationRate {
			f = math.Log(v/a.ViolationRate) / math.Log(b.ViolationRate/a.ViolationRate)
		}
		return recommend.Metrics{ViolationRate: v, RelativeSlack: a.RelativeSlack + f*(b.RelativeSlack-a.RelativeSlack),
			ChangesPerSeriesDay: a.ChangesPerSeriesDay + f*(b.ChangesPerSeriesDay-a.ChangesPerSeriesDay)}
	}
	return recommend.Metrics{RelativeSlack: math.NaN()}
}

// printGap prints the gap-closure table and writes it as Markdown rows
// (<out>/<trace>.gap.md) for hack/traces/frontier.sh to collect.
func printGap(w io.Writer, name string, rows []gapRow, mdPath string) error {
	fmt.Fprintf(w, "\ngap closure %s: G = (VPA − ours) / (VPA − budgeted bound), at ≤ VPA's violations and ≤ %g counted resize/series/day\n", name, sweepChangeBudget)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "resource\t policy\t slack\t viol\t resizes/day\t G\t ×VPA curve\t VPA slack\t bound\t note\t")
	var md strings.Builder
	f := func(v float64, format string) string {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return "–"
		}
		return fmt.Sprintf(format, v)
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.3f\t%.3f\t%s\t\n", r.resource, r.policy, f(r.slack, "%.3f"), f(100*r.viol, "%.2f%%"),
			f(r.rz, "%.2f"), f(r.g, "%.2f"), f(r.vsCurve, "%.2f×"), r.vpaSlack, r.bound, r.note)
		fmt.Fprintf(&md, "| %s | %s | %s | %s | %s | %s | %s | **%s** | %s | %s | %s |\n", name, r.resource, r.policy,
			f(r.slack, "%.3f"), f(100*r.viol, "%.2f %%"), f(r.rz, "%.2f"), f(r.vsCurve, "%.2f×"), f(r.g, "%.2f"),
			fmt.Sprintf("%.3f / %.3g %%", r.vpaSlack, 100*r.vpaViol), fmt.Sprintf("%.3f (%s)", r.bound, f(r.boundRz, "%.2f rz")), r.note)
	}
	tw.Flush()
	if mdPath == "" {
		return nil
	}
	return os.WriteFile(mdPath, []byte(md.String()), 0o644)
}
