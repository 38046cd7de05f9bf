package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorkloadRecommendation is the cluster aggregator's merged
// recommendation for one workload (a Deployment, StatefulSet, DaemonSet,
// CronJob, Job or bare Pod of its namespace): per container, CPU and
// memory targets built from the usage histograms every node reported,
// merged exactly. It is also the aggregator's checkpoint: each container's
// State holds the merged histograms, which a replica reloads on start or
// when it takes over the leader Lease. Only cgpilot-aggregator writes it
// (one object per workload, named <kind>-<name>, bounded in size: at most
// 32 containers of at most 24 KiB of state each).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=wrec,categories=cgpilot
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.workload.kind`
// +kubebuilder:printcolumn:name="Workload",type=string,JSONPath=`.spec.workload.name`
// +kubebuilder:printcolumn:name="CPU",type=string,JSONPath=`.status.cpu`,description="Recommended CPU per pod (sum of the containers' targets)"
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.memory`,description="Recommended memory per pod (sum of the containers' targets)"
// +kubebuilder:printcolumn:name="Requested CPU",type=string,JSONPath=`.status.requestedCPU`,description="CPU requested per pod now"
// +kubebuilder:printcolumn:name="Requested Memory",type=string,JSONPath=`.status.requestedMemory`,description="Memory requested per pod now"
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`,description="Nodes whose reports were merged (last window)"
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policy`
// +kubebuilder:printcolumn:name="Updated",type=date,JSONPath=`.status.updateTime`
// +kubebuilder:metadata:labels="app.kubernetes.io/part-of=cgpilot"
type WorkloadRecommendation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WorkloadRecommendationSpec   `json:"spec"`
	Status WorkloadRecommendationStatus `json:"status,omitempty"`
}

// WorkloadRecommendationSpec names the workload and the policy the
// recommendation was computed under.
type WorkloadRecommendationSpec struct {
	// Workload is the workload in this object's namespace.
	// +required
	Workload WorkloadReference `json:"workload"`
	// Policy is the RightsizePolicy covering the workload ("" if none).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Policy string `json:"policy,omitempty"`
	// Preset is the recommender preset used.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Preset string `json:"preset,omitempty"`
}

// WorkloadReference names a workload by kind and name.
type WorkloadReference struct {
	// Kind is Deployment, StatefulSet, DaemonSet, CronJob, Job, Pod or
	// another controller's kind.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9]*$`
	// +required
	Kind string `json:"kind"`
	// Name is the workload's name.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// WorkloadRecommendationStatus is the merged recommendation and the state
// it rests on. The aggregator writes the whole object (there is no status
// subresource: one writer, one write).
type WorkloadRecommendationStatus struct {
	// CPU and Memory are the recommended requests per pod (the sum of the
	// containers' targets); RequestedCPU and RequestedMemory the requests
	// per pod in force when last reported.
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// +optional
	RequestedCPU *resource.Quantity `json:"requestedCPU,omitempty"`
	// +optional
	RequestedMemory *resource.Quantity `json:"requestedMemory,omitempty"`
	// Nodes is how many nodes reported the workload in the last merged
	// window; Samples how many usage samples were merged in all.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// +optional
	Samples int64 `json:"samples,omitempty"`
	// UpdateTime is when the recommendation was last computed.
	// +optional
	UpdateTime *metav1.Time `json:"updateTime,omitempty"`
	// Containers holds one entry per container.
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +optional
	Containers []ContainerRecommendation `json:"containers,omitempty"`
	// Profile is the workload's usage profile (all its pods together).
	// +optional
	Profile *UsageProfile `json:"profile,omitempty"`
}

// ContainerRecommendation is one container's merged recommendation.
type ContainerRecommendation struct {
	// Name is the container's name.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Name string `json:"name"`
	// CPU and Memory are the recommendations (absent while there is too
	// little history, or when the preset cannot merge: see Reason).
	// +optional
	CPU *ResourceRecommendation `json:"cpu,omitempty"`
	// +optional
	Memory *ResourceRecommendation `json:"memory,omitempty"`
	// Requests are the requests in force (per pod) and OriginalRequests
	// what the workload declared, as last reported.
	// +optional
	Requests *ResourceAmounts `json:"requests,omitempty"`
	// +optional
	OriginalRequests *ResourceAmounts `json:"originalRequests,omitempty"`
	// Samples merged for this container.
	// +optional
	Samples int64 `json:"samples,omitempty"`
	// Adjustable says whether the agents can apply recommendations to the
	// container; Reason says why not, or why there is no recommendation.
	// +optional
	Adjustable bool `json:"adjustable,omitempty"`
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Reason string `json:"reason,omitempty"`
	// State is the aggregator's checkpoint of the container (the merged
	// histograms in cgpilot's recommender checkpoint format, with its own
	// version and checksum). Opaque to everyone else.
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	State []byte `json:"state,omitempty"`
}

// ResourceRecommendation is the recommendation for one resource.
type ResourceRecommendation struct {
	// Target is the recommended request.
	Target resource.Quantity `json:"target"`
	// LowerBound and UpperBound bracket it (median and top of the usage).
	// +optional
	LowerBound *resource.Quantity `json:"lowerBound,omitempty"`
	// +optional
	UpperBound *resource.Quantity `json:"upperBound,omitempty"`
	// Limit is the recommended limit, if any.
	// +optional
	Limit *resource.Quantity `json:"limit,omitempty"`
}

// ResourceAmounts are CPU and memory amounts.
type ResourceAmounts struct {
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// UsageProfile is a usage profile for placement: per resource the maximum
// over the last 7 days and the expected peak-hour usage (for each hour of
// the day, the mean usage in it averaged over the last 7 days, at the
// busiest hour). The aggregator writes it on Nodes as the JSON of
// AnnotationUsageProfile and in WorkloadRecommendation status.
type UsageProfile struct {
	CPU    ResourceUsageProfile `json:"cpu"`
	Memory ResourceUsageProfile `json:"memory"`
	// Days is how many of the last 7 days had data.
	Days int32 `json:"days"`
	// UpdateTime is when the profile was computed.
	UpdateTime metav1.Time `json:"updateTime"`
}

// ResourceUsageProfile is one resource's usage profile.
type ResourceUsageProfile struct {
	Max7d    resource.Quantity `json:"max7d"`
	PeakHour resource.Quantity `json:"peakHour"`
	// PeakHourOfDay is the busiest hour of the day, UTC (0-23).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=23
	PeakHourOfDay int32 `json:"peakHourOfDay"`
}

// WorkloadRecommendationList is a list of WorkloadRecommendation.
// +kubebuilder:object:root=true
type WorkloadRecommendationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkloadRecommendation `json:"items"`
}
