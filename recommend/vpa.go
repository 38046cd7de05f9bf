package recommend

import (
	"math"
	"time"
)

// VPAConfig holds the knobs of upstream VPA 1.8.1's recommender
// (pkg/recommender/logic/recommender.go and its command-line flags).
type VPAConfig struct {
	TargetCPUPercentile        float64       // --target-cpu-percentile, 0.9
	LowerCPUPercentile         float64       // 0.5
	UpperCPUPercentile         float64       // 0.95
	TargetMemoryPercentile     float64       // --target-memory-percentile, 0.9
	LowerMemoryPercentile      float64       // 0.5
	UpperMemoryPercentile      float64       // 0.95
	SafetyMarginFraction       float64       // --recommendation-margin-fraction, 0.15
	PodMinCPUMillicores        float64       // --pod-recommendation-min-cpu-millicores, 25
	PodMinMemoryMiB            float64       // --pod-recommendation-min-memory-mb, 250 (MiB in fact)
	ConfidenceInterval         time.Duration // 24 h for CPU and memory
	CPUHalfLife                time.Duration // --cpu-histogram-decay-half-life, 24 h
	MemoryHalfLife             time.Duration // --memory-histogram-decay-half-life, 24 h
	MemoryAggregationInterval  time.Duration // 24 h
	OOMBumpUpRatio             float64       // 1.2
	OOMMinBumpUpBytes          float64       // 100 MiB
	ContainersPerPod           int           // the pod minimum is split evenly; 1 here
	MemoryAggregationIntervals int           // 8; bounds the memory window (expiry only)
}

// DefaultVPAConfig returns VPA 1.8.1's defaults.
func DefaultVPAConfig() VPAConfig {
	return VPAConfig{
		TargetCPUPercentile: 0.9, LowerCPUPercentile: 0.5, UpperCPUPercentile: 0.95,
		TargetMemoryPercentile: 0.9, LowerMemoryPercentile: 0.5, UpperMemoryPercentile: 0.95,
		SafetyMarginFraction: 0.15, PodMinCPUMillicores: 25, PodMinMemoryMiB: 250,
		ConfidenceInterval: 24 * time.Hour, CPUHalfLife: 24 * time.Hour, MemoryHalfLife: 24 * time.Hour,
		MemoryAggregationInterval: 24 * time.Hour, OOMBumpUpRatio: 1.2, OOMMinBumpUpBytes: 100 * 1024 * 1024,
		ContainersPerPod: 1, MemoryAggregationIntervals: 8,
	}
}

// VPA keeps amounts as int64 millicores and bytes; these mirror its
// conversions (model/types.go) so that truncation happens at the same places.
const maxResourceAmount = 1e14

func amountFromFloat(x float64) int64 {
	if x > maxResourceAmount {
		return maxResourceAmount
	}
	if x < 0 {
		x = 0
	}
	return int64(x)
}

func scaleAmount(a int64, f float64) int64 { return amountFromFloat(float64(a) * f) }

// vpaContainer is VPA 1.8.1's per-container model (model.ContainerState plus
// its AggregateContainerState) for a container alone in its aggregation.
type vpaContainer struct {
	cfg *VPAConfig
	cpu *Histogram
	mem *Histogram // peaks per aggregation interval

	firstCPU, lastCPU time.Time // AggregateContainerState.First/LastSampleStart
	lastCPUSample     time.Time // ContainerState.LastCPUSampleStart
	cpuSamples        int64

	memPeak, oomPeak int64
	windowEnd        time.Time
	lastMemSample    time.Time
}

func newVPAContainer(cfg *VPAConfig, memo *decayMemo) *vpaContainer {
	co, mo := CPUHistogramOptions(), MemoryHistogramOptions()
	co.HalfLife, mo.HalfLife = cfg.CPUHalfLife, cfg.MemoryHalfLife
	return &vpaContainer{cfg: cfg, cpu: mustHistogram(co, memo), mem: mustHistogram(mo, memo)}
}

func (c *vpaContainer) addCPU(t time.Time, cores float64) {
	usage := amountFromFloat(cores * 1000)
	if usage < 0 || !t.After(c.lastCPUSample) {
		return // VPA drops duplicate and out-of-order CPU samples
	}
	// VPA weighs every CPU sample 0.1 (minSampleWeight) since 1.4.
	c.cpu.AddSample(float64(usage)/1000, 0.1, t)
	if t.After(c.lastCPU) {
		c.lastCPU = t
	}
	if c.firstCPU.IsZero() || t.Before(c.firstCPU) {
		c.firstCPU = t
	}
	c.cpuSamples++
	c.lastCPUSample = t
}

func (c *vpaContainer) addMemory(t time.Time, bytes float64) {
	c.addMemoryAmount(t, amountFromFloat(bytes), false)
}

// addMemoryAmount keeps one peak per aggregation interval in the histogram,
// timestamped at the interval's end; a larger sample in the same interval
// replaces the old peak (model/container.go addMemorySample).
func (c *vpaContainer) addMemoryAmount(t time.Time, usage int64, oom bool) bool {
	if usage < 0 || (!oom && t.Before(c.lastMemSample)) {
		return false
	}
	c.lastMemSample = t
	if c.windowEnd.IsZero() {
		c.windowEnd = t
	}
	addPeak := false
	if t.Before(c.windowEnd) {
		old := max(c.memPeak, c.oomPeak)
		if old != 0 && usage > old {
			c.mem.SubtractSample(float64(old), 1, c.windowEnd)
			addPeak = true
		}
	} else {
		iv := c.cfg.MemoryAggregationInterval
		c.windowEnd = c.windowEnd.Add(t.Sub(c.windowEnd).Truncate(iv) + iv)
		c.memPeak, c.oomPeak = 0, 0
		addPeak = true
	}
	if addPeak {
		c.mem.AddSample(float64(usage), 1, c.windowEnd)
		if oom {
			c.oomPeak = usage
		} else {
			c.memPeak = usage
		}
	}
	return true
}

// recordOOM is VPA's RecordOOM: the memory in use at the kill (at least the
// request) is bumped by max(+OOMMinBumpUpBytes, ×OOMBumpUpRatio) and added
// as a peak. It reports false when VPA would discard the event as too old.
func (c *vpaContainer) recordOOM(t time.Time, requestBytes float64) bool {
	if !c.lastMemSample.IsZero() && t.Before(c.lastMemSample.Add(-c.cfg.MemoryAggregationInterval)) {
		return false
	}
	used := max(amountFromFloat(requestBytes), c.memPeak)
	needed := max(used+amountFromFloat(c.cfg.OOMMinBumpUpBytes), scaleAmount(used, c.cfg.OOMBumpUpRatio))
	return c.addMemoryAmount(t, needed, true)
}

func (c *vpaContainer) confidence() float64 {
	ci := c.cfg.ConfidenceInterval
	life := float64(c.lastCPU.Sub(c.firstCPU)) / float64(ci)
	samples := float64(c.cpuSamples) / ci.Minutes()
	return math.Min(life, samples)
}

// vpaAmounts is one recommendation in VPA's integer units.
type vpaAmounts struct {
	targetCPU, lowerCPU, upperCPU int64 // millicores
	targetMem, lowerMem, upperMem int64 // bytes
}

// recommend evaluates VPA's estimator chain: percentile → margin →
// confidence multiplier (bounds only) → pod minimum, with the estimator
// settings of cfg (the histograms keep those they were built with).
func (c *vpaContainer) recommend(cfg *VPAConfig) vpaAmounts {
	n := float64(max(cfg.ContainersPerPod, 1))
	minCPU := scaleAmount(amountFromFloat(cfg.PodMinCPUMillicores*0.001*1000), 1/n)
	minMem := scaleAmount(amountFromFloat(cfg.PodMinMemoryMiB*1024*1024), 1/n)
	margin := func(a int64) int64 { return a + scaleAmount(a, cfg.SafetyMarginFraction) }
	conf := c.confidence()
	upper := func(a int64) int64 { return scaleAmount(a, math.Pow(1+1/conf, 1)) }
	lower := func(a int64) int64 { return scaleAmount(a, math.Pow(1+0.001/conf, -2)) }
	cpu := func(p float64) int64 { return amountFromFloat(c.cpu.Percentile(p) * 1000) }
	mem := func(p float64) int64 { return amountFromFloat(c.mem.Percentile(p)) }
	return vpaAmounts{
		targetCPU: max(margin(cpu(cfg.TargetCPUPercentile)), minCPU),
		lowerCPU:  max(lower(margin(cpu(cfg.LowerCPUPercentile))), minCPU),
		upperCPU:  max(upper(margin(cpu(cfg.UpperCPUPercentile))), minCPU),
		targetMem: max(margin(mem(cfg.TargetMemoryPercentile)), minMem),
		lowerMem:  max(lower(margin(mem(cfg.LowerMemoryPercentile))), minMem),
		upperMem:  max(upper(margin(mem(cfg.UpperMemoryPercentile))), minMem),
	}
}
