package recommend

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// Duration is a time.Duration that reads and writes as "90m" in JSON.
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string such as "24h".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%w: duration %s: %w", ErrInvalidPolicy, b, err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%w: duration %q: %w", ErrInvalidPolicy, s, err)
	}
	*d = Duration(v)
	return nil
}

// Engine names the estimation algorithm of a Policy.
type Engine string

const (
	// EngineVPA reproduces upstream VPA 1.8.1 exactly (see VPAConfig).
	EngineVPA Engine = "vpa"
	// EngineCgpilot is cgpilot's estimator (see ResourcePolicy).
	EngineCgpilot Engine = "cgpilot"
)

// Policy says how samples become recommendations. Use a preset (Preset) or
// fill one in and call Validate.
type Policy struct {
	Name   string         `json:"name"`
	Engine Engine         `json:"engine"`
	VPA    VPAConfig      `json:"vpa"`
	CPU    ResourcePolicy `json:"cpu"`
	Memory ResourcePolicy `json:"memory"`
	// MinHistory: no recommendation before a container has this much history.
	MinHistory Duration `json:"min_history"`
	// ConfidenceHistory: before this much history the target is widened by
	// ShortHistoryMargin·(1 − history/ConfidenceHistory).
	ConfidenceHistory  Duration `json:"confidence_history"`
	ShortHistoryMargin float64  `json:"short_history_margin"`
	// OOM: memory limit = max(current limit, usage at kill) ×
	// (1+OOMFactor)^(kills within OOMWindow), capped by Memory.Max.
	OOMFactor float64  `json:"oom_factor"`
	OOMWindow Duration `json:"oom_window"`
	// ResizeBudget is the node's resize budget: changes of a target per
	// container per day, for each resource, averaged over the containers
	// of the Recommender (one node; in a replay, the trace) and allocated
	// to the changes worth most (budget.go). Every change counts, whatever
	// its size. 0 means no budget: each container's hysteresis alone
	// decides. It applies to the resources with a cost objective
	// (ViolationCost, RelativeViolationCost or FleetObjective), in whose
	// units a change is priced.
	ResizeBudget float64 `json:"resize_budget,omitempty"`
}

// ResourcePolicy is the cgpilot estimator of one resource (cores or bytes).
//
// The target is the Percentile of usage (memory: of per-PeakInterval peaks)
// in a decaying histogram, divided by Saturation (the platform formula:
// request = p-th percentile / expected saturation), then clamped to
// [Min, Max], rounded up to a multiple of Round, limited to MaxStepUp /
// MaxStepDown relative change per recommendation and held while it stays
// inside the hysteresis band (DownBand below, UpBand above the target in
// force).
type ResourcePolicy struct {
	Percentile   float64  `json:"percentile"`
	Saturation   float64  `json:"saturation"`
	HalfLife     Duration `json:"half_life"`
	PeakInterval Duration `json:"peak_interval"`
	// FastHalfLife, when set, keeps a second histogram with a shorter memory;
	// the target follows it down only when both agree (max of the two), which
	// reacts to level shifts without forgetting recent bursts.
	FastHalfLife Duration `json:"fast_half_life"`
	// ViolationCost, when > 0, replaces the percentile by the newsvendor
	// optimum: the target x minimising E[(x − u)⁺] + ViolationCost·P(u > x)
	// over the decayed histogram, i.e. one sample above the target costs as
	// much as ViolationCost cores (bytes) of idle reservation. Unlike a fixed
	// percentile this spends the violation budget where headroom is
	// expensive: large, bursty containers get tighter targets, small ones
	// generous ones. Percentile then acts as a floor.
	ViolationCost float64 `json:"violation_cost"`
	// RelativeViolationCost, when > 0, is ViolationCost in units of the
	// container's own decayed mean usage: one sample above the target
	// costs as much as RelativeViolationCost × mean of idle reservation.
	// The optimum then depends only on the shape of the usage (steady
	// containers get tight targets, spiky ones spend their violations),
	// not on the trace's absolute sizes, so it carries across fleets. It
	// replaces ViolationCost.
	RelativeViolationCost float64 `json:"relative_violation_cost"`
	FastPercentile        float64 `json:"fast_percentile"`
	Min                   float64 `json:"min"`
	Max                   float64 `json:"max"`
	Round                 float64 `json:"round"`
	MaxStepUp             float64 `json:"max_step_up"`
	MaxStepDown           float64 `json:"max_step_down"`
	UpBand                float64 `json:"up_band"`
	DownBand              float64 `json:"down_band"`
	// LimitRatio: limit = target × LimitRatio when the container's own
	// limit/request ratio is unknown; 0 means no limit recommendation.
	LimitRatio float64 `json:"limit_ratio"`
	// Objective, when > 0, is the stated service level: the share of
	// samples allowed above the target, per container (0.01 = "CPU above
	// the request at most 1 % of the time"). The recommender tracks each
	// container's realised violation rate against the target in force,
	// over ObjectiveHalfLife, and moves the percentile it uses (1 − ε, ε
	// starting at Objective) until the realised rate meets the objective;
	// Percentile is then ignored. With ViolationCost the target is the
	// larger of the two, so the objective is an upper bound per container.
	Objective         float64  `json:"objective"`
	ObjectiveHalfLife Duration `json:"objective_half_life"`
	// FleetObjective, when > 0, is a violation rate for all the containers
	// of the Recommender together (one node; in a replay, the trace): the
	// share of all their samples allowed above their targets. Each
	// container's target is then the newsvendor optimum of ViolationCost's
	// formula with one cost λ shared by all of them, solved for every step
	// from their histograms and corrected by the realised rate (fleet.go):
	// violations go where headroom is expensive, in the amount stated,
	// whatever the fleet's sizes. ViolationCost is then only the λ used
	// before the first step. FleetHalfLife is the window of the realised
	// rate reported (default 24 h).
	FleetObjective float64  `json:"fleet_objective"`
	FleetHalfLife  Duration `json:"fleet_half_life"`
	// DailyPeriods, when > 0, splits the day (UTC) into this many equal
	// periods (a divisor of 24) and gives a container whose usage follows
	// a daily cycle, detected from its own past (season.go), the target of
	// the coming period, read from that period's own histogram with the
	// same objective; a container without a cycle keeps the estimator
	// above.
	DailyPeriods int `json:"daily_periods,omitempty"`
}

func (r ResourcePolicy) validate(name string) error {
	bad := func(field string, v any) error {
		return fmt.Errorf("%w: %s.%s = %v", ErrInvalidPolicy, name, field, v)
	}
	fin := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !(r.Percentile > 0 && r.Percentile <= 1):
		return bad("percentile", r.Percentile)
	case !(r.Saturation > 0 && r.Saturation <= 1):
		return bad("saturation", r.Saturation)
	case r.HalfLife < 0:
		return bad("half_life", time.Duration(r.HalfLife))
	case r.PeakInterval < 0:
		return bad("peak_interval", time.Duration(r.PeakInterval))
	case r.FastHalfLife < 0:
		return bad("fast_half_life", time.Duration(r.FastHalfLife))
	case r.FastHalfLife > 0 && !(r.FastPercentile > 0 && r.FastPercentile <= 1):
		return bad("fast_percentile", r.FastPercentile)
	case !fin(r.ViolationCost) || r.ViolationCost < 0:
		return bad("violation_cost", r.ViolationCost)
	case !fin(r.RelativeViolationCost) || r.RelativeViolationCost < 0:
		return bad("relative_violation_cost", r.RelativeViolationCost)
	case !fin(r.Min) || r.Min < 0:
		return bad("min", r.Min)
	case !fin(r.Max) || (r.Max != 0 && r.Max < r.Min):
		return bad("max", r.Max)
	case !fin(r.Round) || r.Round < 0:
		return bad("round", r.Round)
	case !fin(r.MaxStepUp) || r.MaxStepUp < 0:
		return bad("max_step_up", r.MaxStepUp)
	case !fin(r.MaxStepDown) || r.MaxStepDown < 0 || r.MaxStepDown > 1:
		return bad("max_step_down", r.MaxStepDown)
	case !fin(r.UpBand) || r.UpBand < 0:
		return bad("up_band", r.UpBand)
	case !fin(r.DownBand) || r.DownBand < 0 || r.DownBand >= 1:
		return bad("down_band", r.DownBand)
	case !fin(r.LimitRatio) || (r.LimitRatio != 0 && r.LimitRatio < 1):
		return bad("limit_ratio", r.LimitRatio)
	case !(r.Objective >= 0 && r.Objective <= maxObjective):
		return bad("objective", r.Objective)
	case r.ObjectiveHalfLife < 0 || (r.Objective > 0 && r.ObjectiveHalfLife == 0):
		return bad("objective_half_life", time.Duration(r.ObjectiveHalfLife))
	case !(r.FleetObjective >= 0 && r.FleetObjective <= maxObjective):
		return bad("fleet_objective", r.FleetObjective)
	case r.FleetHalfLife < 0:
		return bad("fleet_half_life", time.Duration(r.FleetHalfLife))
	case r.DailyPeriods < 0 || r.DailyPeriods > 24 || (r.DailyPeriods > 0 && 24%r.DailyPeriods != 0):
		return bad("daily_periods", r.DailyPeriods)
	}
	return nil
}

// maxResizeBudget bounds the resize budget: one change an hour.
const maxResizeBudget = 24

// maxObjective bounds a stated violation rate: above a quarter of the
// samples a "request" is no longer a service level.
const maxObjective = 0.25

// Validate checks every setting and names the first bad one.
func (p Policy) Validate() error {
	switch p.Engine {
	case EngineVPA:
		v := p.VPA
		for _, q := range []float64{v.TargetCPUPercentile, v.LowerCPUPercentile, v.UpperCPUPercentile, v.TargetMemoryPercentile, v.LowerMemoryPercentile, v.UpperMemoryPercentile} {
			if !(q >= 0 && q <= 1) {
				return fmt.Errorf("%w: %s: vpa percentile %v", ErrInvalidPolicy, p.Name, q)
			}
		}
		if v.ConfidenceInterval <= 0 || v.MemoryAggregationInterval <= 0 || v.CPUHalfLife < 0 || v.MemoryHalfLife < 0 || !(v.SafetyMarginFraction >= 0) {
			return fmt.Errorf("%w: %s: vpa intervals and margin must be positive", ErrInvalidPolicy, p.Name)
		}
		return nil
	case EngineCgpilot:
	default:
		return fmt.Errorf("%w: %s: engine %q, want %q or %q", ErrInvalidPolicy, p.Name, p.Engine, EngineVPA, EngineCgpilot)
	}
	if err := p.CPU.validate("cpu"); err != nil {
		return err
	}
	if err := p.Memory.validate("memory"); err != nil {
		return err
	}
	if p.MinHistory < 0 || p.ConfidenceHistory < 0 || !(p.ShortHistoryMargin >= 0) || !(p.OOMFactor >= 0) || p.OOMWindow < 0 {
		return fmt.Errorf("%w: %s: history, margin and OOM settings must be ≥ 0", ErrInvalidPolicy, p.Name)
	}
	if !(p.ResizeBudget >= 0 && p.ResizeBudget <= maxResizeBudget) {
		return fmt.Errorf("%w: %s: resize_budget = %v, want 0 (none) to %v changes per container per day", ErrInvalidPolicy, p.Name, p.ResizeBudget, maxResizeBudget)
	}
	return nil
}

// ParsePolicy reads a JSON policy. Fields left out keep the values of the
// preset named in "base" (default: DefaultPreset).
func ParsePolicy(data []byte) (Policy, error) {
	var head struct {
		Base string `json:"base"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Policy{}, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	if head.Base == "" {
		head.Base = DefaultPreset
	}
	p, err := Preset(head.Base)
	if err != nil {
		return Policy{}, err
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return Policy{}, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	return p, p.Validate()
}

// DefaultPreset is the preset `cgpilotctl replay` uses without --policy.
const DefaultPreset = "cgpilot-balanced"

const mib = 1 << 20

// presets are fixed in code so that a name always means the same policy.
var presets = map[string]func() Policy{
	// vpa: upstream VPA 1.8.1 with its default recommender flags.
	"vpa": func() Policy { return Policy{Name: "vpa", Engine: EngineVPA, VPA: DefaultVPAConfig()} },
	// cgpilot-balanced: see doc.go for how it was chosen on the traces.
	DefaultPreset: balancedPreset,
	// platform-sl-*: the platform formula, p95 over a ~1-day window divided
	// by the expected saturation of the service level, no cost term.
	"platform-sl-0.4": func() Policy { return platformPreset("platform-sl-0.4", 0.4) },
	"platform-sl-0.6": func() Policy { return platformPreset("platform-sl-0.6", 0.6) },
	"platform-sl-0.8": func() Policy { return platformPreset("platform-sl-0.8", 0.8) },
	// cgpilot-slo: each container aimed at a stated violation rate (CPU
	// above the target at most 1 % of the samples, memory 0.1 %), its
	// percentile and margin tracked from its own realised rate.
	SLOPreset: func() Policy { return SLOPolicy(SLOPreset, 0.01, 0.001) },
	// cgpilot-fleet: cgpilot-balanced with its violation cost adapted per
	// node to a stated violation rate of all the node's containers
	// together (CPU 1.5 %, memory 0.15 % of the samples above target)
	// instead of fitted to one trace.
	FleetPreset: func() Policy { return FleetPolicy(FleetPreset, 0.015, 0.0015) },
	// cgpilot-cyclic: cgpilot-balanced that follows a detected daily cycle
	// with a target per quarter of the day, within a node's resize budget
	// of one change per container per day.
	CyclicPreset: cyclicPreset,
}

// CyclicPreset names the time-of-day preset.
const CyclicPreset = "cgpilot-cyclic"

// DefaultResizeBudget is the resize budget of the presets that have one:
// one change of a target per container per day, on average over a node.
const DefaultResizeBudget = 1

// cyclicPreset is cgpilot-balanced with DailyPeriods 4 (a target per
// quarter of the day; 8 and 12 gave more slack on Google's tasks, whose
// period histograms then hold too few samples) and the node's resize
// budget, which keeps flat containers still.
func cyclicPreset() Policy {
	p := balancedPreset()
	p.Name = CyclicPreset
	p.CPU.DailyPeriods, p.Memory.DailyPeriods = 4, 4
	p.ResizeBudget = DefaultResizeBudget
	return p
}

// FleetPreset names the preset with a node-wide violation objective.
const FleetPreset = "cgpilot-fleet"

// FleetPolicy is cgpilot-balanced with FleetObjective set for CPU and
// memory and no fitted violation cost: λ is solved per node (fleet.go).
// The defaults of the preset: CPU 1.5 % is below the violation rate of
// upstream VPA's defaults on every trace we have (1.75–3.23 %), memory
// 0.15 % below Bitbrains' (0.20–0.30 %); both are round numbers, not
// fitted (see recommend/FRONTIER.md).
func FleetPolicy(name string, cpuObjective, memObjective float64) Policy {
	p := balancedPreset()
	p.Name = name
	p.CPU.ViolationCost, p.CPU.FleetObjective = 0, cpuObjective
	p.Memory.ViolationCost, p.Memory.FleetObjective = 0, memObjective
	return p
}

// SLOPreset names the objective-tracking preset.
const SLOPreset = "cgpilot-slo"

// SLOPolicy is the objective-tracking policy with the given violation
// objectives for CPU and memory (the hysteresis, floors and history
// settings of the default preset; no cost term).
func SLOPolicy(name string, cpuObjective, memObjective float64) Policy {
	p := balancedPreset()
	p.Name = name
	for _, x := range []struct {
		rp  *ResourcePolicy
		obj float64
	}{{&p.CPU, cpuObjective}, {&p.Memory, memObjective}} {
		x.rp.ViolationCost, x.rp.Objective, x.rp.ObjectiveHalfLife = 0, x.obj, Duration(72*time.Hour)
		// A narrower dead band than the cost preset's: the tracked
		// percentile must be able to reach the target in force.
		x.rp.DownBand, x.rp.UpBand = 0.2, 0.05
	}
	return p
}

func platformPreset(name string, saturation float64) Policy {
	p := balancedPreset()
	p.Name = name
	for _, rp := range []*ResourcePolicy{&p.CPU, &p.Memory} {
		rp.Percentile, rp.ViolationCost, rp.Saturation = 0.95, 0, saturation
	}
	return p
}

func balancedPreset() Policy {
	return Policy{
		Name:   DefaultPreset,
		Engine: EngineCgpilot,
		// Chosen on the Bitbrains July and August 2013 traces as the point
		// with the most even margin to every goal (TestFrontier; see doc.go).
		CPU: ResourcePolicy{
			Percentile: 0.5, ViolationCost: 11, Saturation: 1, HalfLife: Duration(12 * time.Hour),
			Min: 0.1, Round: 0.001, MaxStepDown: 0.5, DownBand: 0.4, UpBand: 0,
		},
		Memory: ResourcePolicy{
			Percentile: 0.5, ViolationCost: 400e9, Saturation: 1, HalfLife: Duration(18 * time.Hour),
			Min: 100 * mib, Round: mib, MaxStepDown: 0.5, DownBand: 0.3, UpBand: 0,
		},
		MinHistory:         Duration(time.Hour),
		ConfidenceHistory:  Duration(24 * time.Hour),
		ShortHistoryMargin: 1,
		OOMFactor:          0.2,
		OOMWindow:          Duration(24 * time.Hour),
		// A node's resize budget; it binds only on presets with a cost
		// objective (balanced, fleet, cyclic).
		ResizeBudget: DefaultResizeBudget,
	}
}

// Preset returns the named built-in policy.
func Preset(name string) (Policy, error) {
	f, ok := presets[name]
	if !ok {
		return Policy{}, fmt.Errorf("%w: %q (have %v)", ErrUnknownPolicy, name, PresetNames())
	}
	return f(), nil
}

// PresetNames lists the built-in presets, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return slices.Clip(names)
}

// ResourceOverrides are a user's settings for one resource on top of a
// preset (a RightsizePolicy's per-resource fields); nil leaves the preset's
// value. Percentile asks for a fixed percentile and Objective for a
// tracked violation rate: at most one of the two.
type ResourceOverrides struct {
	TargetSaturation *float64 `json:"targetSaturation,omitempty"`
	Percentile       *float64 `json:"percentile,omitempty"`
	Objective        *float64 `json:"violationObjective,omitempty"`
	MinAllowed       *float64 `json:"minAllowed,omitempty"`
	MaxAllowed       *float64 `json:"maxAllowed,omitempty"`
}

// Overrides are ResourceOverrides for CPU (cores) and memory (bytes), and
// the history a container needs before its first recommendation.
type Overrides struct {
	CPU    ResourceOverrides `json:"cpu"`
	Memory ResourceOverrides `json:"memory"`
	// MinHistory replaces the policy's MinHistory (the cgpilot engine's;
	// the vpa engine has none).
	MinHistory *Duration `json:"minHistory,omitempty"`
	// ResizeBudget replaces the policy's ResizeBudget (changes per
	// container per day; the cgpilot engine's).
	ResizeBudget *float64 `json:"resizesPerDay,omitempty"`
}

// WithOverrides returns p with o applied and validated, or an error
// wrapping ErrInvalidPolicy that names the field; p is not changed. On the
// cgpilot engine a Percentile turns off the objective and the cost terms
// (the fleet objective included)
// (a fixed percentile, as asked) and an Objective turns off the cost terms
// (ObjectiveHalfLife defaults to 72 h). The vpa engine takes Percentile
// (its target percentile) and MinAllowed (its pod minimum) only.
func (p Policy) WithOverrides(o Overrides) (Policy, error) {
	bad := func(res, field string, v any) error {
		return fmt.Errorf("%w: %s: override %s.%s = %v", ErrInvalidPolicy, p.Name, res, field, v)
	}
	if o.MinHistory != nil {
		if *o.MinHistory < 0 {
			return Policy{}, bad("policy", "minHistory", time.Duration(*o.MinHistory))
		}
		p.MinHistory = *o.MinHistory
		// A short required history also shortens the confidence ramp, so
		// the first targets are not widened for a day.
		p.ConfidenceHistory = min(p.ConfidenceHistory, Duration(4*time.Duration(*o.MinHistory)))
	}
	if o.ResizeBudget != nil {
		if p.Engine == EngineVPA {
			return Policy{}, bad("policy", "resizesPerDay", "not supported by the vpa engine")
		}
		p.ResizeBudget = *o.ResizeBudget
	}
	for _, x := range []struct {
		name string
		o    ResourceOverrides
		rp   *ResourcePolicy
	}{{"cpu", o.CPU, &p.CPU}, {"memory", o.Memory, &p.Memory}} {
		if x.o.Percentile != nil && x.o.Objective != nil {
			return Policy{}, bad(x.name, "percentile and violationObjective", "both set")
		}
		if p.Engine == EngineVPA {
			switch {
			case x.o.TargetSaturation != nil:
				return Policy{}, bad(x.name, "targetSaturation", "not supported by the vpa engine")
			case x.o.Objective != nil:
				return Policy{}, bad(x.name, "violationObjective", "not supported by the vpa engine")
			case x.o.MaxAllowed != nil:
				return Policy{}, bad(x.name, "maxAllowed", "not supported by the vpa engine")
			}
			if v := x.o.Percentile; v != nil {
				if x.name == "cpu" {
					p.VPA.TargetCPUPercentile = *v
				} else {
					p.VPA.TargetMemoryPercentile = *v
				}
			}
			if v := x.o.MinAllowed; v != nil {
				if !(*v >= 0) || math.IsInf(*v, 0) {
					return Policy{}, bad(x.name, "minAllowed", *v)
				}
				if x.name == "cpu" {
					p.VPA.PodMinCPUMillicores = *v * 1000
				} else {
					p.VPA.PodMinMemoryMiB = *v / mib
				}
			}
			continue
		}
		rp := x.rp
		if v := x.o.TargetSaturation; v != nil {
			rp.Saturation = *v
		}
		if v := x.o.Percentile; v != nil {
			rp.Percentile, rp.Objective, rp.ViolationCost, rp.RelativeViolationCost, rp.FleetObjective = *v, 0, 0, 0, 0
		}
		if v := x.o.Objective; v != nil {
			rp.Objective, rp.ViolationCost, rp.RelativeViolationCost, rp.FleetObjective = *v, 0, 0, 0
			if rp.ObjectiveHalfLife == 0 {
				rp.ObjectiveHalfLife = Duration(72 * time.Hour)
			}
		}
		if v := x.o.MinAllowed; v != nil {
			rp.Min = *v
		}
		if v := x.o.MaxAllowed; v != nil {
			rp.Max = *v
		}
	}
	return p, p.Validate()
}
