package v1alpha1

import (
	"math/rand"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// TestWorkloadRecommendationRoundTrip: random objects survive encode,
// decode and deep copy, and the kind is registered.
func TestWorkloadRecommendationRoundTrip(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	gvks, _, err := scheme.ObjectKinds(&WorkloadRecommendation{})
	if err != nil || len(gvks) != 1 || gvks[0] != (schema.GroupVersionKind{Group: GroupName, Version: "v1alpha1", Kind: "WorkloadRecommendation"}) {
		t.Fatalf("kinds %v (%v)", gvks, err)
	}
	codecs := serializer.NewCodecFactory(scheme)
	seed := time.Now().UnixNano()
	t.Logf("fuzzer seed %d", seed)
	f := fuzzer.FuzzerFor(metafuzzer.Funcs, rand.NewSource(seed), codecs)
	for range 50 {
		for _, kind := range []string{"WorkloadRecommendation", "WorkloadRecommendationList"} {
			roundtrip.RoundTripSpecificKindWithoutProtobuf(t, SchemeGroupVersion.WithKind(kind), scheme, codecs, f, nil)
		}
	}
}
