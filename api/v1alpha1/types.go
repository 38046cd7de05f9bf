package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Mode is what the agent does for the pods a policy matches.
// +kubebuilder:validation:Enum=Off;DryRun;InPlace;Auto
type Mode string

const (
	// ModeOff: the agent neither recommends nor changes anything.
	ModeOff Mode = "Off"
	// ModeDryRun: the agent writes only the recommendation annotation, a
	// metric and an Event when the recommendation changes.
	ModeDryRun Mode = "DryRun"
	// ModeInPlace: the agent applies recommendations to running pods
	// through pods/resize (or the cgroups where the cluster lacks it).
	ModeInPlace Mode = "InPlace"
	// ModeAuto is InPlace today; later also new pods, through a webhook.
	ModeAuto Mode = "Auto"
)

// LimitsPolicy is what happens to a container's limits when its requests
// change.
// +kubebuilder:validation:Enum=KeepRatio;Unset;Keep
type LimitsPolicy string

const (
	// LimitsKeepRatio scales each limit with its request (VPA's default).
	LimitsKeepRatio LimitsPolicy = "KeepRatio"
	// LimitsUnset removes the limits (never for a Guaranteed pod, whose
	// QoS class must not change).
	LimitsUnset LimitsPolicy = "Unset"
	// LimitsKeep leaves the limits as they are (requests stay below them).
	LimitsKeep LimitsPolicy = "Keep"
)

// DefaultPreset is the recommender preset of a policy that names none.
const DefaultPreset = "cgpilot-balanced"

// RightsizePolicy selects pods by namespace and pod labels and says how the
// agent on each node right-sizes their containers: the mode, the
// recommender preset and per-resource overrides, how fast requests may move
// and when they must not.
//
// Durations are Go duration strings of whole h, m and s units ("1h",
// "90m", "20s", "1h30m"): the pattern keeps every accepted value parseable by
// time.ParseDuration and printable back the same way.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=rsp,categories=cgpilot
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Matched",type=integer,JSONPath=`.status.matchedPods`
// +kubebuilder:printcolumn:name="Adjusted",type=integer,JSONPath=`.status.adjustedPods`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:metadata:labels="app.kubernetes.io/part-of=cgpilot"
type RightsizePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RightsizePolicySpec   `json:"spec"`
	Status RightsizePolicyStatus `json:"status,omitempty"`
}

// RightsizePolicySpec is what a policy asks for.
type RightsizePolicySpec struct {
	// NamespaceSelector selects the namespaces whose pods the policy
	// covers; empty or absent selects every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// PodSelector selects pods by their labels within those namespaces;
	// empty or absent selects every pod.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
	// Mode is Off, DryRun, InPlace or Auto.
	// +required
	Mode Mode `json:"mode"`
	// Preset names the recommender policy (cgpilotctl replay --policy);
	// the overrides below change it for this policy only.
	// +kubebuilder:default=cgpilot-balanced
	// +kubebuilder:validation:Enum=cgpilot-balanced;cgpilot-cyclic;cgpilot-fleet;cgpilot-slo;platform-sl-0.4;platform-sl-0.6;platform-sl-0.8;vpa
	// +optional
	Preset string `json:"preset,omitempty"`
	// CPU overrides the preset for CPU.
	// +optional
	CPU *ResourcePolicy `json:"cpu,omitempty"`
	// Memory overrides the preset for memory.
	// +optional
	Memory *ResourcePolicy `json:"memory,omitempty"`
	// OOMFactor raises memory after an OOM kill to the larger of the limit
	// and the usage at the kill, times (1 + oomFactor) per kill within the
	// preset's OOM window; the preset's value when absent.
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4
	// +optional
	OOMFactor *float64 `json:"oomFactor,omitempty"`
	// ResizesPerDay is the node's resize budget for the containers this
	// policy covers: changes of a request per container per day, on
	// average over a node's containers, allocated by the agent to the
	// changes worth most (flat containers hold still, cyclic and growing
	// ones move; raises after usage grows are always made). It applies to
	// the presets with a cost objective (cgpilot-balanced, cgpilot-fleet,
	// cgpilot-cyclic); 0.1 to 24.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0.1
	// +kubebuilder:validation:Maximum=24
	// +optional
	ResizesPerDay *float64 `json:"resizesPerDay,omitempty"`
	// MaxChangePerStep bounds each change of a request, as a fraction of
	// its current value (0.5: at most halved or raised by half per step).
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	// +optional
	MaxChangePerStep *float64 `json:"maxChangePerStep,omitempty"`
	// Step is how often a decision is made for each container (1s to 720h).
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:Pattern=`^([0-9]{1,6}(h|m|s)){1,3}$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('720h')",message="step must be between 1s and 720h"
	// +kubebuilder:validation:Type=string
	// +optional
	Step *metav1.Duration `json:"step,omitempty"`
	// MinHistory is how much usage history a container needs before its
	// first change (0s to 720h).
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Pattern=`^([0-9]{1,6}(h|m|s)){1,3}$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('720h')",message="minHistory must be at most 720h"
	// +kubebuilder:validation:Type=string
	// +optional
	MinHistory *metav1.Duration `json:"minHistory,omitempty"`
	// Limits is what happens to limits when requests change: KeepRatio
	// (default), Unset or Keep.
	// +kubebuilder:default=KeepRatio
	// +optional
	Limits LimitsPolicy `json:"limits,omitempty"`
	// PausedUntil stops all changes until this time (RFC 3339); the agent
	// keeps recommending.
	// +optional
	PausedUntil *metav1.Time `json:"pausedUntil,omitempty"`
	// AvoidWindows are recurring times with no changes, e.g. a nightly
	// batch or a sales event.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	AvoidWindows []AvoidWindow `json:"avoidWindows,omitempty"`
	// PodTargetSaturation bounds the cgpilot.io/target-saturation a pod may
	// choose for itself (default [0.3, 1]): a value outside it is refused
	// with a Warning Event and the policy's own saturation applies. A
	// lower saturation asks for more resources per unit of usage (0.3:
	// requests of 3.3 times the chosen usage percentile).
	// +kubebuilder:default={min: 0.3, max: 1}
	// +optional
	PodTargetSaturation *SaturationBounds `json:"podTargetSaturation,omitempty"`
	// AllowPodModeOverride lets a pod's cgpilot.io/resize annotation
	// choose its own mode, at most as strong as the policy's (Off <
	// DryRun < InPlace < Auto; the annotation's values are off, dry-run
	// and in-place). Off by default: the annotation is refused with a
	// Warning Event and the policy's mode applies.
	// +optional
	AllowPodModeOverride bool `json:"allowPodModeOverride,omitempty"`
	// MaxOOMBumpsPerDay bounds how many times in 24 hours an OOM kill
	// raises a container's memory at once (0 to 24; default 3). Further
	// kills are recorded and counted, and the recommendation raises memory
	// at the next step within the policy's bounds. With the default
	// oomFactor (0.2) three bumps raise a limit to at most 1.2^(1+2+3),
	// about 3 times its value in a day.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=24
	// +optional
	MaxOOMBumpsPerDay *int32 `json:"maxOOMBumpsPerDay,omitempty"`
}

// SaturationBounds is a range of target saturations, in (0, 1].
// +kubebuilder:validation:XValidation:rule="!has(self.min) || !has(self.max) || self.min <= self.max",message="min must not be greater than max"
type SaturationBounds struct {
	// Min is the lowest saturation a pod may choose (default 0.3).
	// +kubebuilder:default=0.3
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	// +optional
	Min float64 `json:"min,omitempty"`
	// Max is the highest saturation a pod may choose (default 1).
	// +kubebuilder:default=1
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	// +optional
	Max float64 `json:"max,omitempty"`
}

// Defaults of the pod-facing fields (the CRD's defaults; a policy that
// did not come through the API server gets them from the compiler).
const (
	DefaultPodTargetSaturationMin = 0.3
	DefaultPodTargetSaturationMax = 1.0
	DefaultMaxOOMBumpsPerDay      = 3
)

// ResourcePolicy overrides the preset for one resource. Fields left out
// keep the preset's values.
// +kubebuilder:validation:XValidation:rule="!has(self.minAllowed) || !has(self.maxAllowed) || quantity(string(self.minAllowed)).compareTo(quantity(string(self.maxAllowed))) <= 0",message="minAllowed must not be greater than maxAllowed"
type ResourcePolicy struct {
	// TargetSaturation is the share of the request the chosen usage
	// percentile should fill, in (0, 1]: 0.8 leaves 25 % headroom above it.
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	// +optional
	TargetSaturation *float64 `json:"targetSaturation,omitempty"`
	// Percentile of usage the request is sized for, in (0, 1].
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	// +optional
	Percentile *float64 `json:"percentile,omitempty"`
	// MinAllowed is the smallest request the agent sets.
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0'))",message="minAllowed must not be negative"
	// +optional
	MinAllowed *resource.Quantity `json:"minAllowed,omitempty"`
	// MaxAllowed is the largest request the agent sets.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="maxAllowed must be positive"
	// +optional
	MaxAllowed *resource.Quantity `json:"maxAllowed,omitempty"`
}

// AvoidWindow is a recurring time without changes: it opens at each time
// the cron schedule names (UTC) and lasts Duration.
type AvoidWindow struct {
	// Schedule is a five-field cron expression (minute hour day-of-month
	// month day-of-week) or one of @yearly, @annually, @monthly, @weekly,
	// @daily, @midnight, @hourly, as in a CronJob; times are UTC.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|[0-9A-Za-z*?,/-]+( +[0-9A-Za-z*?,/-]+){4})$`
	// +required
	Schedule string `json:"schedule"`
	// Duration is how long each window lasts (1s to 720h).
	// +kubebuilder:validation:Pattern=`^([0-9]{1,6}(h|m|s)){1,3}$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('720h')",message="duration must be between 1s and 720h"
	// +kubebuilder:validation:Type=string
	// +required
	Duration metav1.Duration `json:"duration"`
}

// RightsizePolicyStatus is what the agents observed for a policy.
type RightsizePolicyStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// MatchedPods is how many pods the policy selects.
	// +optional
	MatchedPods int32 `json:"matchedPods,omitempty"`
	// AdjustedPods is how many of them have had a recommendation applied.
	// +optional
	AdjustedPods int32 `json:"adjustedPods,omitempty"`
	// NotAdjustable counts matched pods that cannot be adjusted, by reason
	// (e.g. ExclusiveCPUs, MatchedByTwoPolicies, NoResizeSupport).
	// +optional
	NotAdjustable map[string]int32 `json:"notAdjustable,omitempty"`
	// LastUpdateTime is when this status was last written.
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`
	// Nodes are each node agent's own counts (server-side applied, one
	// entry per node, each owned by that node's agent); the totals above
	// are their sums as the last writer saw them.
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=10000
	// +optional
	Nodes []NodePolicyStatus `json:"nodes,omitempty"`
	// Conditions: Valid (the spec was accepted in full; False with the
	// reason when, e.g., a selector cannot be parsed) and Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodePolicyStatus is one node agent's view of a policy.
type NodePolicyStatus struct {
	// Node is the node's name.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Node string `json:"node"`
	// MatchedPods on this node.
	MatchedPods int32 `json:"matchedPods"`
	// AdjustedPods on this node.
	AdjustedPods int32 `json:"adjustedPods"`
	// NotAdjustable on this node, by reason.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	NotAdjustable map[string]int32 `json:"notAdjustable,omitempty"`
	// ObservedGeneration is the spec generation this node acts on.
	ObservedGeneration int64 `json:"observedGeneration"`
	// LastUpdateTime is when this node last wrote its entry.
	LastUpdateTime metav1.Time `json:"lastUpdateTime"`
}

// RightsizePolicyList is a list of RightsizePolicy.
// +kubebuilder:object:root=true
type RightsizePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RightsizePolicy `json:"items"`
}
