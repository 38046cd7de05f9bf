package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cgpilot/cgpilot/recommend"
)

func init() {
	register("replay", command{
		summary: "replay a usage trace through a recommender policy and score it against upstream VPA",
		run:     runReplay,
	})
}

// replaySummary is the --summary-out document.
type replaySummary struct {
	Trace      string            `json:"trace"`
	ElapsedSec float64           `json:"elapsed_seconds"`
	Every      int               `json:"every_nth_series"`
	Result     recommend.Summary `json:"result"`
}

func runReplay(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	trace := fs.String("trace", "", "usage trace CSV (ts,series,cpu_cores,mem_bytes), optionally gzip-compressed (required)")
	policy := fs.String("policy", recommend.DefaultPreset, "policy preset: "+strings.Join(recommend.PresetNames(), ", "))
	config := fs.String("config", "", "JSON policy file (overrides --policy; fields left out come from its \"base\" preset)")
	step := fs.Duration("step", time.Hour, "recommendation interval")
	warmup := fs.Duration("warmup", 24*time.Hour, "history per series before its samples are scored")
	recsOut := fs.String("recs-out", "", "write recommendations CSV (ts,series,cpu_target,mem_target,...) to this file")
	summaryOut := fs.String("summary-out", "", "write the summary JSON to this file")
	every := fs.Int("every", 1, "replay only every n-th series (quick looks at large traces)")
	workers := fs.Int("workers", 1, "series replayed in parallel (the result does not depend on it)")
	quiet := fs.Bool("quiet", false, "no progress display on stderr")
	sweep := fs.Bool("sweep", false, "replay the frontier sweep (VPA percentiles, cgpilot-slo objectives, the default preset) and write CSV + SVG to --sweep-out")
	sweepOut := fs.String("sweep-out", "frontier", "directory for the sweep's <trace>.csv and <trace>.svg")
	peaks := fs.Bool("score-peaks", false, "score violations against the trace's window peaks (cpu_cores_max, mem_bytes_max) where it has them")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: cgpilotctl replay --trace FILE [--policy NAME|--config FILE] [--step 1h] [--warmup 24h] [--recs-out FILE] [--summary-out FILE]")
		fmt.Fprintln(stderr, "\nEvery --step it recommends from samples strictly before the boundary, and scores both the policy and")
		fmt.Fprintln(stderr, "the upstream-VPA-compatible control group with the metrics of traces/README.md.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *trace == "" || fs.NArg() != 0 || *every < 1 || *workers < 1 {
		fs.Usage()
		return 2
	}
	p, err := loadPolicy(*policy, *config)
	if err != nil {
		fmt.Fprintf(stderr, "cgpilotctl replay: %v\n", err)
		return 2
	}
	control, _ := recommend.Preset("vpa")
	start := time.Now()
	if !*quiet {
		fmt.Fprintf(stderr, "replay: reading %s ...\n", *trace)
	}
	tr, err := recommend.ReadTraceFile(*trace)
	if err != nil {
		fmt.Fprintf(stderr, "cgpilotctl replay: %v\n", err)
		return 1
	}
	tr = tr.Subset(*every)
	opt := recommend.ReplayOptions{Step: *step, Warmup: *warmup, Policy: p, Control: control, Workers: *workers, ScorePeaks: *peaks}
	if *sweep {
		name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(*trace), ".gz"), ".csv")
		if *every > 1 {
			name += fmt.Sprintf("-every%d", *every)
		}
		if *peaks {
			name += "-peaks"
		}
		pts, err := runSweep(name, tr, opt, *sweepOut, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "cgpilotctl replay: %v\n", err)
			return 1
		}
		printSweep(stdout, name, pts)
		if err := printGap(stdout, name, gapClosure(pts, tr.HasMemory), filepath.Join(*sweepOut, name+".gap.md")); err != nil {
			fmt.Fprintf(stderr, "cgpilotctl replay: %v\n", err)
			return 1
		}
		return 0
	}
	if !*quiet {
		opt.Progress = progressPrinter(stderr, start)
	}
	var recs *recsWriter
	if *recsOut != "" {
		if recs, err = newRecsWriter(*recsOut); err != nil {
			fmt.Fprintf(stderr, "cgpilotctl replay: %v\n", err)
			return 1
		}
		opt.Rows = recs.write
	}
	sum, err := recommend.Replay(tr, opt)
	if recs != nil {
		if cerr := recs.close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "cgpilotctl replay: %v\n", err)
		return 1
	}
	elapsed := time.Since(start)
	if *summaryOut != "" {
		doc := replaySummary{Trace: filepath.Base(*trace), ElapsedSec: elapsed.Seconds(), Every: *every, Result: sum}
		b, _ := json.MarshalIndent(doc, "", "  ")
		if err := os.WriteFile(*summaryOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(stderr, "cgpilotctl replay: %v\n", err)
			return 1
		}
	}
	printTable(stdout, filepath.Base(*trace), tr, sum, elapsed)
	return 0
}

// printSweep prints the sweep's table with the ratios to the VPA control.
func printSweep(w io.Writer, name string, pts []sweepPoint) {
	var c recommend.PolicyScore
	for _, p := range pts {
		if p.family == "control" {
			c = p.s
		}
	}
	fmt.Fprintf(w, "sweep %s (ratios to VPA's defaults)\n", name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\t CPU slack\t ×VPA\t CPU viol\t CPU resizes/day\t mem slack\t ×VPA\t mem viol\t mem resizes/day\t")
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	for _, p := range pts {
		fmt.Fprintf(tw, "%s\t%.3f\t%s\t%.2f%%\t%.2f\t%.3f\t%s\t%.3f%%\t%.2f\t\n", p.label,
			p.s.CPU.RelativeSlack, ratio(p.s.CPU.RelativeSlack, c.CPU.RelativeSlack), 100*p.s.CPU.ViolationRate, p.s.CPU.ChangesPerSeriesDay,
			p.s.Memory.RelativeSlack, ratio(p.s.Memory.RelativeSlack, c.Memory.RelativeSlack), 100*p.s.Memory.ViolationRate, p.s.Memory.ChangesPerSeriesDay)
	}
	tw.Flush()
}

func loadPolicy(name, config string) (recommend.Policy, error) {
	if config == "" {
		return recommend.Preset(name)
	}
	b, err := os.ReadFile(config)
	if err != nil {
		return recommend.Policy{}, err
	}
	p, err := recommend.ParsePolicy(b)
	if err != nil {
		return p, fmt.Errorf("%s: %w", config, err)
	}
	if p.Name == "" {
		p.Name = filepath.Base(config)
	}
	return p, nil
}

// progressPrinter redraws one status line about every 2 % of the work
// (series, or boundaries when Replay advances the series together).
func progressPrinter(w io.Writer, start time.Time) func(done, total int) {
	last := -1
	return func(done, total int) {
		pct := done * 100 / total
		if pct/2 == last/2 && done != total {
			return
		}
		last = pct
		el := time.Since(start)
		eta := ""
		if done > 0 && done < total {
			eta = fmt.Sprintf(", about %v left", (el * time.Duration(total-done) / time.Duration(done)).Round(time.Second))
		}
		fmt.Fprintf(w, "\rreplay: %d/%d (%d%%), %v%s   ", done, total, pct, el.Round(time.Second), eta)
		if done == total {
			fmt.Fprintln(w)
		}
	}
}

type recsWriter struct {
	f   *os.File
	buf *bufio.Writer
	b   []byte
}

func newRecsWriter(path string) (*recsWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := &recsWriter{f: f, buf: bufio.NewWriterSize(f, 1<<20)}
	w.buf.WriteString("ts,series,cpu_target,mem_target,cpu_lower,cpu_upper,cpu_limit,mem_lower,mem_upper,mem_limit,vpa_cpu_target,vpa_mem_target\n")
	return w, nil
}

// write emits one row; boundaries where the policy has too little history
// are left out, since a row applies until the next one of its series.
func (w *recsWriter) write(r recommend.RecRow) error {
	if !r.OK {
		return nil
	}
	b := strconv.AppendInt(w.b[:0], r.TS, 10)
	b = append(b, ',')
	b = append(b, csvField(r.Series)...)
	for _, v := range []float64{r.Policy.CPU.Target, r.Policy.Memory.Target, r.Policy.CPU.Lower, r.Policy.CPU.Upper, r.Policy.CPU.Limit,
		r.Policy.Memory.Lower, r.Policy.Memory.Upper, r.Policy.Memory.Limit, r.Control.CPU.Target, r.Control.Memory.Target} {
		b = append(b, ',')
		b = strconv.AppendFloat(b, v, 'f', -1, 64)
	}
	b = append(b, '\n')
	w.b = b
	_, err := w.buf.Write(b)
	return err
}

func csvField(s string) string {
	if strings.ContainsAny(s, ",\"\r\n") {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}

func (w *recsWriter) close() error {
	err := w.buf.Flush()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func printTable(w io.Writer, name string, tr *recommend.Trace, s recommend.Summary, elapsed time.Duration) {
	fmt.Fprintf(w, "trace %s: %d series, %d rows; step %s, warmup %s; %d samples scored in %d series; replayed in %v\n\n",
		name, len(tr.Series), tr.Rows, s.Step, s.Warmup, s.Policy.ScoredSamples, s.Policy.ScoredSeries, elapsed.Round(time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\t CPU slack\t CPU viol\t CPU >20%\t CPU resizes/day\t mem slack\t mem viol\t mem >20%\t mem resizes/day\t")
	row := func(label string, p recommend.PolicyScore) {
		fmt.Fprintf(tw, "%s\t%.3f\t%.2f%%\t%.2f%%\t%.2f\t%.3f\t%.3f%%\t%.3f%%\t%.2f\t\n", label,
			p.CPU.RelativeSlack, 100*p.CPU.ViolationRate, 100*p.CPU.ViolationOver20pctRate, p.CPU.ChangesPerSeriesDay,
			p.Memory.RelativeSlack, 100*p.Memory.ViolationRate, 100*p.Memory.ViolationOver20pctRate, p.Memory.ChangesPerSeriesDay)
	}
	row(s.Policy.Policy, s.Policy)
	row(s.Control.Policy+" (control)", s.Control)
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	p, c := s.Policy, s.Control
	fmt.Fprintf(tw, "ratio\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
		ratio(p.CPU.RelativeSlack, c.CPU.RelativeSlack), ratio(p.CPU.ViolationRate, c.CPU.ViolationRate),
		ratio(p.CPU.ViolationOver20pctRate, c.CPU.ViolationOver20pctRate), ratio(p.CPU.ChangesPerSeriesDay, c.CPU.ChangesPerSeriesDay),
		ratio(p.Memory.RelativeSlack, c.Memory.RelativeSlack), ratio(p.Memory.ViolationRate, c.Memory.ViolationRate),
		ratio(p.Memory.ViolationOver20pctRate, c.Memory.ViolationOver20pctRate), ratio(p.Memory.ChangesPerSeriesDay, c.Memory.ChangesPerSeriesDay))
	tw.Flush()
	if p.Unrecommended > 0 {
		fmt.Fprintf(w, "\n%s had no recommendation yet for %d samples past warmup (not scored).\n", p.Policy, p.Unrecommended)
	}
}
