// Package recommend turns per-container usage samples into CPU and memory
// recommendations (requests, limits, bounds) on the node, with
// exponential-bucket decaying histograms in the manner of the Kubernetes
// Vertical Pod Autoscaler.
//
// # Use
//
// The agent feeds samples (e.g. every 10 s) and OOM kills, and asks once per
// decision step:
//
//	r, _ := recommend.New(policy)            // a Preset or a parsed Policy
//	r.SetResources(id, current)              // requests/limits in force
//	h := r.Recorder(id)                      // once per container, kept
//	h.Add(recommend.Sample{...})             // cores since last sample, bytes now
//	r.RecordOOM(id, recommend.OOMEvent{...}) // on every OOM kill
//	rec, ok := r.Recommend(id, now)          // ok=false: too little history
//	r.SaveCheckpoint(path, now) / r.LoadCheckpoint(path)
//
// r.Add(id, sample) does what h.Add does with an id lookup per sample;
// h.AddBatch adds several samples of one container at once, all or nothing.
//
// Replay (replay.go) runs a recorded trace (ReadTrace; trace.go reads and
// documents the CSV format) through a policy and, in the same run, through
// the VPA-compatible control group, and scores both with the definitions
// of the team's traces/README.md; `cgpilotctl replay` wraps it.
// HindsightBound (bound.go) is the least slack any policy holding one
// target per series per block could have had at a violation budget,
// knowing the whole trace: how far a policy is from what prediction could
// give.
// BudgetBound is the bound under the scorer's own resize budget: each
// series chooses its block length (1–24 h, or its whole span) and offset,
// counted changes (the scorer's, beyond a 10 % dead band) are at most one
// per series-day averaged over the trace, and the Lagrangian in
// violations and changes is solved exactly per series by a dynamic
// programme over its blocks (budgetbound.go). `replay --sweep` prints both
// and the gap closure G = (VPA's slack − ours) / (VPA's slack − BudgetBound)
// at VPA's violation rate.
//
// # Engines and presets
//
// Engine "vpa" (preset "vpa"; vpa.go) reproduces upstream VPA 1.8.1
// operation for operation: the same bucket layout (first bucket 0.01 core /
// 1e7 bytes, ratio 1.05, 176 buckets, epsilon 1e-4), 24 h half-lives, CPU
// samples of weight 0.1, memory as daily peaks, p90/p50/p95 with a 15 %
// margin, confidence multipliers and the 25 m / 250 MiB pod minimum. The
// separate module test/vpacompat proves the recommendations identical to
// upstream on synthetic series and on every hourly boundary of the
// Bitbrains traces.
//
// Engine "cgpilot" (preset "cgpilot-balanced", the replay default) keeps one
// decaying histogram per resource and sets the target to
//
//	max(Percentile, argmin_x E[(x − u)⁺] + ViolationCost·P(u > x)) / Saturation
//
// then clamps to [Min, Max], rounds up, limits the step and holds it inside a
// hysteresis band. The second term is the newsvendor optimum when one sample
// above the target costs as much as ViolationCost cores (bytes) of idle
// reservation. A fixed percentile spends the same share of violations on
// every container; the cost optimum spends them where headroom is expensive
// (large, bursty containers) and keeps small ones generous, which is what
// cluster-level slack and violation rates reward. Its constants were chosen
// on the Bitbrains July and August 2013 traces (TestFrontier prints the
// frontier); the same preset must be re-checked on other traces.
//
// Preset "cgpilot-slo" (SLOPolicy) aims each container at a stated
// violation objective per resource (ResourcePolicy.Objective: CPU above the
// target at most 1 % of the samples, memory 0.1 %). Every sample is
// compared with the target in force when it arrives (no lookahead); the
// decayed realised rate (ObjectiveHalfLife) moves the tail share ε of the
// percentile 1 − ε it builds the target from, by log(objective/rate) per
// day, within [objective/20, 20·objective]; when even the top percentile
// is exceeded too often (usage growing past its history) the rest becomes
// a margin, given back first when violations fall. The hysteresis band is
// narrower (20 % down, 5 % up) and ε does not grow while the band holds an
// older, higher target (anti-windup), so resizes stay under one a day.
// RelativeViolationCost is the cost term in units of the container's own
// mean usage, independent of a fleet's absolute sizes. Every Estimate
// carries an Explanation: mode, objective, percentile and margin used,
// realised violation rate and its sample weight, history length.
// Policy.WithOverrides applies a user's per-resource targetSaturation,
// percentile, violationObjective, minAllowed and maxAllowed on a preset.
//
// Preset "cgpilot-fleet" (FleetPolicy) is cgpilot-balanced with its
// violation cost no longer a constant: ResourcePolicy.FleetObjective
// states a violation rate for all the containers of the Recommender
// together (the node; in a replay, the trace), and one cost λ per
// resource is solved for at every decision step (fleet.go). That is the
// Lagrangian of "least total slack at this total violation rate": each
// container takes the newsvendor optimum under its own histogram with the
// shared λ, so violations go where headroom is expensive, in the stated
// amount, whatever the fleet's sizes (λ comes out near 11 cores on the
// Bitbrains VMs, where cgpilot-balanced's constant was fitted, and near
// 1.6 on 1-vCPU Azure VMs). The solution is calibrated by the ratio of the
// violations realised to those predicted over three days (hysteresis
// holds targets above the optimum; usage outgrows its history). Only
// established containers (past ConfidenceHistory) take part. Replay
// advances all series together, boundary by boundary, so that the
// controller sees at T every series' samples before T and nothing after.
// Explanation reports the λ used (ViolationCost), the objective and the
// node's realised rate.
//
// Preset "cgpilot-cyclic" is cgpilot-balanced with time-of-day
// awareness (ResourcePolicy.DailyPeriods = 4, season.go): a container
// whose usage follows a daily cycle holds a target per quarter of the
// (UTC) day, read with the same cost objective from a histogram of that
// period's samples (48 h half-life); others keep the marginal estimator.
// The cycle is detected from the container's own hourly means of the last
// 3–7 days, each day less its mean, by the method of AUTOPERIOD (Vlachos,
// Yu and Castelli, SDM 2005), which Crane's DSP predictor also follows:
// the periodogram power at one, two and three cycles a day must beat 39
// permutations of the same values (no cycle in noise: the null is the
// series' own marginal distribution, whatever its shape), and the
// autocorrelation at 24 h must be on a hill (a local maximum, ≥ 0.3).
// Chosen over seasonal quantiles of a fixed calendar because a node
// carries mostly non-cyclic containers, which must keep today's estimator
// and spend no resizes; over a full spectral forecast (Crane fits the
// dominant frequencies and predicts the next cycle) because a request is
// a quantile, not a mean: the period's own distribution, priced as the
// rest, gives it directly.
//
// Resize budget (Policy.ResizeBudget, default 1 change per container per
// day on the cost presets; a RightsizePolicy's resizesPerDay): the node's
// changes are allocated where they pay (budget.go). Every proposed change
// is priced by what it saves until the next chance to change, in the cost
// objective's units (E[(x − u)⁺] + λ·P(u > x) per sample, times the
// samples), against the price at which the last day's best offers (one
// per container) would have used the node's budget; a token bucket
// (half a day of the budget, at least one change, so that a node of one
// container can cut it; full from the first established container) makes
// it a cap. Raises are always made (they
// stand between a container and violations) and spend a token in debt;
// cuts wait for a token. Every change counts, of any size: the scorer's
// 10 % dead band is not used to move for free. A container's first target,
// a young container's changes (before ConfidenceHistory) and OOM bumps
// are free. With a budget the replay advances all series together and
// grants in series order, as a node's decision round asks its containers.
//
// OOM: the memory limit after a kill is
// max(current limit, usage at kill) × (1 + OOMFactor)^(kills within
// OOMWindow), capped by Memory.Max (OOMLimit), and the histogram takes VPA's
// bump max(usage + 100 MiB, usage × 1.2) as a peak.
//
// # Ingest
//
// One mutex serialises a Recommender; a sample costs about 0.1 µs of CPU
// (BenchmarkIngest), so one goroutine ingests millions of samples per
// second. The hot path changes no result, only the cost: buckets are found
// by comparing with a shared table (bucket.go) of the exact thresholds of
// VPA's log formula (TestBucketLayoutMatchesFormula checks every float64
// around every boundary), and decay factors 2^((t − ref)/half-life) are
// memoised by their exact argument per Recommender. Stamp every container
// of one collection round with the round's time: containers then share
// decay factors, which saves about a third of the cost per sample
// (BenchmarkIngest, 2026-11-30: recorder-Add-cgpilot-balanced 63 ns, its
// distinct-times case 96 ns, three runs each).
//
// # Merging across nodes
//
// Counts (merge.go) is a sparse histogram of sample counts without decay,
// encoded as a Histogram with HalfLife 0: the delta a node reports for one
// workload-container and one window. Counts add exactly (integers), so
// the cluster aggregator sums every node's Counts of a window and calls
// Recommender.AddCounts once per window; the state is then bit for bit
// the one a single recorder of all the samples reaches
// (TestMergedEqualsOneHistogram). EncodeContainer and DecodeContainer
// carry one container's state in the checkpoint format (the aggregator
// keeps one per workload in the API server). The vpa engine does not
// merge (Policy.Mergeable says why).
//
// # Files
//
// recommender.go holds the Recommender, its Recorders, the types of Use
// above (Sample, Resources, OOMEvent, Recommendation), Recommend and
// RecommendWith; policy.go the Policy and ResourcePolicy, their
// validation, the presets and WithOverrides; container.go one container's
// state and the cgpilot engine's estimate for it (percentile or cost
// optimum, clamping, hysteresis and step limits, the OOM limit);
// objective.go the per-resource violation tracker (the realised rate, and
// cgpilot-slo's ε and margin) and the Explanation; histogram.go the
// decaying histogram both engines keep (VPA's layouts and decay), its
// percentiles, cost optimum and binary encoding; checkpoint.go the
// checkpoint format (magic, version, SHA-256 of the payload, the
// migration of older versions), SaveCheckpoint and LoadCheckpoint.
//
// # Errors
//
// Every error wraps one of the sentinels in errors.go (ErrTrace,
// ErrCheckpoint, ErrInvalidPolicy, ...) with %w and names the file, line or
// value. Bad input changes nothing: a rejected sample is not recorded, a
// failed checkpoint load leaves the state as it was (a corrupt file gives
// *CorruptCheckpointError and is moved aside; a newer format gives
// *VersionError and stays in place), a failed histogram decode leaves the
// histogram as it was. Nothing panics on input. Checkpoints are written
// through internal/atomicfile, like every cgpilot checkpoint.
//
// # Imports
//
// recommend imports no k8s.io/* package, internal/* only of cgpilot, and
// none of topology, cgroup, api or agent; it reads no /proc, /sys or
// cgroupfs.
package recommend
