package v1alpha1

// Pod annotations of right-sizing. Users set the first three on a pod to
// override the policy that matches it; the agent writes the last. Like
// every cgpilot annotation they start with cgpilot.io/ (local.AnnotationPrefix
// in api/local, with the CPU pools' annotations), the only annotations the
// admission policy in deploy/ lets the agent change.
const (
	// AnnotationResize overrides the policy's mode for one pod: one of
	// ResizeOff, ResizeDryRun, ResizeInPlace. Only where the policy sets
	// allowPodModeOverride, and only to a mode at most as strong as the
	// policy's; otherwise the policy's mode applies and the pod gets a
	// Warning Event.
	AnnotationResize = "cgpilot.io/resize"
	// AnnotationTargetSaturation overrides targetSaturation for both
	// resources of the pod: a fraction within the policy's
	// podTargetSaturation (default [0.3, 1]), e.g. "0.7"; outside it the
	// policy's saturation applies and the pod gets a Warning Event.
	AnnotationTargetSaturation = "cgpilot.io/target-saturation"
	// AnnotationResizePausedUntil pauses changes to the pod until an
	// RFC 3339 time, e.g. "2026-12-24T00:00:00Z" (pausing only ever
	// narrows what the policy does, so every policy allows it).
	AnnotationResizePausedUntil = "cgpilot.io/resize-paused-until"
	// AnnotationRecommendation is written by the agent: JSON with, per
	// container, the CPU and memory target and bounds, the policy and
	// preset, the last applied time, and why the last decision was or was
	// not applied.
	AnnotationRecommendation = "cgpilot.io/recommendation"
)

// Values of AnnotationResize.
const (
	ResizeOff     = "off"
	ResizeDryRun  = "dry-run"
	ResizeInPlace = "in-place"
)

// Annotations the cluster aggregator writes.
const (
	// AnnotationUsageProfile is written on Nodes: the JSON of a
	// UsageProfile of the node's real usage, for usage-aware schedulers.
	AnnotationUsageProfile = "cgpilot.io/usage-profile"
	// AnnotationAdmission is written on pods by the aggregator's webhook:
	// "applied" when it set recommended requests, otherwise why it did
	// not (e.g. "no-recommendation", "qos-class").
	AnnotationAdmission = "cgpilot.io/admission"
)
