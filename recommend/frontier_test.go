package recommend

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/test/tier"
)

// TestFrontier measures policies against the VPA control on the real
// Bitbrains traces and prints the frontier. It is a measurement tool, gated
// by CGPILOT_FRONTIER=1 (CGPILOT_FRONTIER_EVERY=n keeps every n-th series;
// CGPILOT_FRONTIER_MONTHS=07,08).
func TestFrontier(t *testing.T) {
	if os.Getenv("CGPILOT_FRONTIER") != "1" {
		t.Skip("frontier measurement: set CGPILOT_FRONTIER=1 (minutes of CPU)")
	}
	dir := tier.SharedData(t, "traces")
	every, _ := strconv.Atoi(os.Getenv("CGPILOT_FRONTIER_EVERY"))
	months := strings.Split(os.Getenv("CGPILOT_FRONTIER_MONTHS"), ",")
	if months[0] == "" {
		months = []string{"07", "08"}
	}
	files := map[string]string{}
	for i, m := range months {
		files[m] = dir + "/bitbrains-2013-" + m + ".csv.gz"
		if strings.Contains(m, ".csv") {
			months[i] = strings.TrimSuffix(strings.TrimSuffix(m, ".gz"), ".csv")
			files[months[i]] = dir + "/" + m
		}
	}
	cands := frontierCandidates()
	for _, m := range months {
		start := time.Now()
		tr, err := ReadTraceFile(files[m])
		if err != nil {
			t.Fatal(err)
		}
		tr = tr.Subset(every)
		t.Logf("2013-%s: %d series, %d rows, read in %v", m, len(tr.Series), tr.Rows, time.Since(start))
		vpa, _ := Preset("vpa")
		for _, p := range cands {
			start := time.Now()
			s, err := Replay(tr, ReplayOptions{Policy: p, Control: vpa, Warmup: 24 * time.Hour, Workers: 2})
			if err != nil {
				t.Fatal(err)
			}
			c, pc := s.Control, s.Policy
			fmt.Printf("%s %-40s cpu %.3f/%.4f/%.2f (x%.2f) mem %.3f/%.5f/%.2f (x%.2f) | vpa cpu %.3f/%.4f/%.2f mem %.3f/%.5f/%.2f | %d/%d %v\n", m, p.Name,
				pc.CPU.RelativeSlack, pc.CPU.ViolationRate, pc.CPU.ChangesPerSeriesDay, pc.CPU.RelativeSlack/c.CPU.RelativeSlack,
				pc.Memory.RelativeSlack, pc.Memory.ViolationRate, pc.Memory.ChangesPerSeriesDay, pc.Memory.RelativeSlack/c.Memory.RelativeSlack,
				c.CPU.RelativeSlack, c.CPU.ViolationRate, c.CPU.ChangesPerSeriesDay, c.Memory.RelativeSlack, c.Memory.ViolationRate, c.Memory.ChangesPerSeriesDay,
				pc.ScoredSamples, c.ScoredSamples, time.Since(start).Round(time.Millisecond))
		}
	}
}

func frontierCandidates() []Policy {
	var out []Policy
	if os.Getenv("CGPILOT_FRONTIER_SWEEP") == "" {
		for _, name := range PresetNames() {
			p, _ := Preset(name)
			out = append(out, p)
		}
		return out
	}
	base, _ := Preset(DefaultPreset)
	for _, spec := range strings.Split(os.Getenv("CGPILOT_FRONTIER_SWEEP"), ";") {
		p := base
		p.Name = spec
		for _, kv := range strings.Fields(spec) {
			k, val, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(val, 64)
			d, _ := time.ParseDuration(val)
			for _, r := range []struct {
				prefix string
				rp     *ResourcePolicy
			}{{"c.", &p.CPU}, {"m.", &p.Memory}} {
				name, ok := strings.CutPrefix(k, r.prefix)
				if !ok {
					continue
				}
				switch name {
				case "vc":
					r.rp.ViolationCost = f
				case "p":
					r.rp.Percentile = f
				case "sat":
					r.rp.Saturation = f
				case "hl":
					r.rp.HalfLife = Duration(d)
				case "pi":
					r.rp.PeakInterval = Duration(d)
				case "fhl":
					r.rp.FastHalfLife = Duration(d)
				case "fp":
					r.rp.FastPercentile = f
				case "min":
					r.rp.Min = f
				case "up":
					r.rp.UpBand = f
				case "down":
					r.rp.DownBand = f
				case "sdown":
					r.rp.MaxStepDown = f
				case "sup":
					r.rp.MaxStepUp = f
				case "obj":
					r.rp.Objective = f
					if r.rp.ObjectiveHalfLife == 0 {
						r.rp.ObjectiveHalfLife = Duration(72 * time.Hour)
					}
				case "rvc":
					r.rp.RelativeViolationCost = f
				case "fo":
					r.rp.FleetObjective = f
				case "ohl":
					r.rp.ObjectiveHalfLife = Duration(d)
				default:
					panic("unknown knob " + k)
				}
			}
		}
		out = append(out, p)
	}
	return out
}
