package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of every cgpilot resource.
const GroupName = "cgpilot.io"

// SchemeGroupVersion is this package's group and version.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this package to a scheme (a client's
	// or a codec's).
	AddToScheme = SchemeBuilder.AddToScheme
)

// The resources of this package, as the dynamic client names them.
var (
	RightsizePolicies       = SchemeGroupVersion.WithResource("rightsizepolicies")
	WorkloadRecommendations = SchemeGroupVersion.WithResource("workloadrecommendations")
)

// Resource qualifies a resource name ("rightsizepolicies") with the group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &RightsizePolicy{}, &RightsizePolicyList{}, &WorkloadRecommendation{}, &WorkloadRecommendationList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
