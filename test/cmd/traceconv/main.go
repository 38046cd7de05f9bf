package main

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var run func(src string, sums map[string]string) ([]row, report, error)
	switch os.Args[1] {
	case "google2019":
		run = convertGoogle2019
	case "azure2017":
		run = convertAzure2017
	default:
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	src := fs.String("src", "", "checkout of the source repository (required)")
	out := fs.String("out", "", "output .csv.gz (required)")
	sumsFile := fs.String("sums", "hack/traces/SOURCES", "file of expected SHA-256 sums (sha256  source/path)")
	reportOut := fs.String("report", "", "write the conversion report JSON here")
	_ = fs.Parse(os.Args[2:])
	if *src == "" || *out == "" {
		usage()
	}
	sums, err := readSums(*sumsFile, os.Args[1])
	if err == nil {
		var rows []row
		var rep report
		rows, rep, err = run(*src, sums)
		if err == nil {
			err = writeTrace(*out, rows)
		}
		if err == nil && *reportOut != "" {
			b, _ := json.MarshalIndent(rep, "", "  ")
			err = os.WriteFile(*reportOut, append(b, '\n'), 0o644)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "traceconv %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: traceconv google2019|azure2017 --src DIR --out FILE.csv.gz [--sums hack/traces/SOURCES] [--report FILE.json]")
	os.Exit(2)
}

// readSums reads the "sha256  source/path" lines of one source.
func readSums(path, source string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 {
			return nil, fmt.Errorf("%s:%d: want \"sha256  source/path\"", path, i+1)
		}
		if p, ok := strings.CutPrefix(name, source+"/"); ok {
			out[p] = sum
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no checksums for %s", path, source)
	}
	return out, nil
}

// verified reads a file of src after checking its SHA-256.
func verified(src, rel, want string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(src, rel))
	if err != nil {
		return nil, err
	}
	got := sha256.Sum256(b)
	if hex.EncodeToString(got[:]) != want {
		return nil, fmt.Errorf("%s: sha256 %x, want %s", rel, got, want)
	}
	return b, nil
}

// row is one output sample; NaN peaks are written as empty fields.
type row struct {
	series         string
	ts             int64
	cpu, mem       float64
	cpuMax, memMax float64
}

type report struct {
	Source       string         `json:"source"`
	Files        int            `json:"files"`
	Series       int            `json:"series"`
	Rows         int            `json:"rows"`
	Dropped      map[string]int `json:"dropped"`
	Scale        string         `json:"scale"`
	FirstTS      int64          `json:"first_ts"`
	LastTS       int64          `json:"last_ts"`
	PeakToMeanP9 float64        `json:"cpu_peak_to_mean_p90"`
}

// finish sorts rows by (series, ts), drops repeated timestamps of a series
// (keeping the first) and fills the report.
func finish(rows []row, rep *report) []row {
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].series != rows[j].series {
			return rows[i].series < rows[j].series
		}
		return rows[i].ts < rows[j].ts
	})
	out := rows[:0]
	series := map[string]bool{}
	var ratios []float64
	for i, r := range rows {
		if i > 0 && r.series == rows[i-1].series && r.ts == rows[i-1].ts {
			rep.Dropped["duplicate_ts"]++
			continue
		}
		series[r.series] = true
		if r.cpu > 0 && !math.IsNaN(r.cpuMax) {
			ratios = append(ratios, r.cpuMax/r.cpu)
		}
		out = append(out, r)
	}
	rep.Series, rep.Rows = len(series), len(out)
	if len(out) > 0 {
		rep.FirstTS, rep.LastTS = out[0].ts, out[0].ts
		for _, r := range out {
			rep.FirstTS, rep.LastTS = min(rep.FirstTS, r.ts), max(rep.LastTS, r.ts)
		}
	}
	if len(ratios) > 0 {
		sort.Float64s(ratios)
		rep.PeakToMeanP9 = ratios[len(ratios)*9/10]
	}
	return out
}

func writeTrace(path string, rows []row) error {
	if len(rows) == 0 {
		return errors.New("no rows to write")
	}
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(path + ".tmp")
	zw, _ := gzip.NewWriterLevel(f, gzip.BestCompression)
	w := bufio.NewWriterSize(zw, 1<<20)
	// A CPU-only source leaves the memory columns out (see recommend's
	// trace format): an empty mem_bytes is not a valid sample.
	cpuOnly := math.IsNaN(rows[0].mem)
	num := func(v float64, prec int) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', prec, 64)
	}
	if cpuOnly {
		w.WriteString("ts,series,cpu_cores,cpu_cores_max\n")
	} else {
		w.WriteString("ts,series,cpu_cores,mem_bytes,cpu_cores_max,mem_bytes_max\n")
	}
	for _, r := range rows {
		if cpuOnly {
			fmt.Fprintf(w, "%d,%s,%s,%s\n", r.ts, r.series, num(r.cpu, 6), num(r.cpuMax, 6))
			continue
		}
		fmt.Fprintf(w, "%d,%s,%s,%s,%s,%s\n", r.ts, r.series, num(r.cpu, 6), num(r.mem, 0), num(r.cpuMax, 6), num(r.memMax, 0))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// Google cluster-data 2019 (instance_usage, per-task CSVs exported by the
// source repository). Usage is normalised to the largest machine of the
// cell; the trace does not publish the absolute unit, so the converter
// assumes a largest machine of 100 cores and 512 GiB (stated in
// PROVENANCE.md). Relative slack and violation rates do not depend on the
// unit; only the policies' absolute floors (0.1 core, 100 MiB; VPA 25 m,
// 250 MiB) do.
const (
	googleCores = 100
	googleBytes = 512 << 30
	// Trace time 600 s is 2019-05-01 00:00 PDT (ClusterData2019.md).
	googleEpoch = 1556694000 - 600
)

func convertGoogle2019(src string, sums map[string]string) ([]row, report, error) {
	rep := report{Source: "google2019", Dropped: map[string]int{}, Scale: fmt.Sprintf("cpu NCU x %d cores, memory NMU x %d bytes", googleCores, int64(googleBytes))}
	names := sortedKeys(sums)
	var rows []row
	for _, rel := range names {
		b, err := verified(src, rel, sums[rel])
		if err != nil {
			return nil, rep, err
		}
		cr := csv.NewReader(strings.NewReader(string(b)))
		recs, err := cr.ReadAll()
		if err != nil {
			return nil, rep, fmt.Errorf("%s: %w", rel, err)
		}
		if len(recs) < 2 {
			return nil, rep, fmt.Errorf("%s: no rows", rel)
		}
		col := map[string]int{}
		for i, h := range recs[0] {
			col[h] = i
		}
		for _, need := range []string{"time", "unique_id", "avg_cpu_usage", "avg_memory_usage", "max_cpu_usage", "max_memory_usage"} {
			if _, ok := col[need]; !ok {
				return nil, rep, fmt.Errorf("%s: no column %q", rel, need)
			}
		}
		rep.Files++
		for ln, rec := range recs[1:] {
			t, err := strconv.ParseInt(rec[col["time"]], 10, 64)
			vals := make([]float64, 4)
			for i, c := range []string{"avg_cpu_usage", "avg_memory_usage", "max_cpu_usage", "max_memory_usage"} {
				v, perr := strconv.ParseFloat(rec[col[c]], 64)
				if perr != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
					err = fmt.Errorf("%s:%d: %s %q", rel, ln+2, c, rec[col[c]])
				}
				vals[i] = v
			}
			if err != nil {
				rep.Dropped["unparseable"]++
				continue
			}
			rows = append(rows, row{
				series: rec[col["unique_id"]], ts: googleEpoch + t/1_000_000,
				cpu: vals[0] * googleCores, mem: math.Round(vals[1] * googleBytes),
				cpuMax: vals[2] * googleCores, memMax: math.Round(vals[3] * googleBytes),
			})
		}
	}
	return finish(rows, &rep), rep, nil
}

// Azure public dataset V1 (2017): 100 VMs' 5-minute average and maximum
// CPU utilisation (percent of the VM's vCPUs), as matrices in the
// DataCenterSim R package. The sample carries no VM size and no memory:
// the converter reports CPU in units of one vCPU (100 % = 1 core) and
// leaves memory out (a CPU-only trace).
const azureEpoch = 1483228800 // 2017-01-01T00:00Z; the trace's own time is relative

func convertAzure2017(src string, sums map[string]string) ([]row, report, error) {
	rep := report{Source: "azure2017", Dropped: map[string]int{}, Scale: "cpu percent / 100 (one vCPU = 1 core); no memory"}
	mats := map[string]*rObj{}
	for _, name := range []string{"microsoft_avg_100", "microsoft_max_100"} {
		rel := "data/" + name + ".rda"
		want, ok := sums[rel]
		if !ok {
			return nil, rep, fmt.Errorf("no checksum for %s", rel)
		}
		b, err := verified(src, rel, want)
		if err != nil {
			return nil, rep, err
		}
		objs, err := readRDA(strings.NewReader(string(b)))
		if err != nil {
			return nil, rep, fmt.Errorf("%s: %w", rel, err)
		}
		m, ok := objs[name]
		if !ok {
			return nil, rep, fmt.Errorf("%s: no object %s", rel, name)
		}
		mats[name] = m
		rep.Files++
	}
	avg, mx := mats["microsoft_avg_100"], mats["microsoft_max_100"]
	times, vms, err := matrixNames(avg)
	if err != nil {
		return nil, rep, err
	}
	times2, vms2, err := matrixNames(mx)
	if err != nil {
		return nil, rep, err
	}
	if !equalStrings(times, times2) || !equalStrings(vms, vms2) {
		return nil, rep, errors.New("average and maximum matrices have different rows or columns")
	}
	nr := len(times)
	ts := make([]int64, nr)
	for i, s := range times {
		// Row names are the 1-based index of the 5-minute reading.
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 1 {
			return nil, rep, fmt.Errorf("row name %q is not a reading index", s)
		}
		ts[i] = azureEpoch + (v-1)*300
	}
	var rows []row
	for j, vm := range vms {
		for i := range nr {
			a, m := avg.reals[j*nr+i], mx.reals[j*nr+i]
			if math.IsNaN(a) || a < 0 || math.IsNaN(m) || m < 0 {
				rep.Dropped["missing_or_negative"]++
				continue
			}
			rows = append(rows, row{series: vm, ts: ts[i], cpu: a / 100, mem: math.NaN(), cpuMax: m / 100, memMax: math.NaN()})
		}
	}
	return finish(rows, &rep), rep, nil
}

// matrixNames returns a numeric matrix's row and column names.
func matrixNames(m *rObj) (rows, cols []string, err error) {
	dim, dn := m.attr["dim"], m.attr["dimnames"]
	if m.typ != rREAL || dim == nil || len(dim.ints) != 2 || dn == nil || len(dn.elems) != 2 {
		return nil, nil, errors.New("not a numeric matrix with dimnames")
	}
	rows, cols = dn.elems[0].strs, dn.elems[1].strs
	if len(rows) != int(dim.ints[0]) || len(cols) != int(dim.ints[1]) || len(m.reals) != len(rows)*len(cols) {
		return nil, nil, fmt.Errorf("matrix %dx%d with %d values and %d/%d names", dim.ints[0], dim.ints[1], len(m.reals), len(rows), len(cols))
	}
	return rows, cols, nil
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
