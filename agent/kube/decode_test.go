package kube

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// eventPod is a pod as the agent's watch brings it: two containers with
// resources, the kubelet's status, the agent's annotations and the
// managedFields of four writers.
func eventPod() *corev1.Pod {
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	now := metav1.NewTime(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	mf := func(manager, sub string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now, FieldsType: "FieldsV1", Subresource: sub,
			FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{".":{},"f:cgpilot.io/cpu-pool":{},"f:cgpilot.io/status":{}}},"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}},"f:containerStatuses":{}}}`)}
	}
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "db-7d9c5b6f8-x2x9k", Namespace: "default", UID: "3f1c2a9e-5b7d-4e8f-9a1b-2c3d4e5f6a7b", ResourceVersion: "123456", CreationTimestamp: now,
			Labels:          map[string]string{"app": "db", "pod-template-hash": "7d9c5b6f8"},
			Annotations:     map[string]string{"cgpilot.io/cpu-pool": "exclusive", "cgpilot.io/cpus": "1", "cgpilot.io/status": `{"pool":"exclusive","cpus":"1","state":"Allocated","observedGeneration":1}`},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "db-7d9c5b6f8", UID: "9a8b7c6d-5e4f-3a2b-1c0d-9e8f7a6b5c4d"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{mf("kube-controller-manager", ""), mf("kube-scheduler", ""), mf("kubelet", "status"), mf("cgpilot-agent", "")},
		},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{
			{Name: "postgres", Image: "postgres:17", Resources: res, Env: []corev1.EnvVar{{Name: "PGDATA", Value: "/var/lib/postgresql/data"}}},
			{Name: "exporter", Image: "prometheuscommunity/postgres-exporter:v0.17.0", Resources: res},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSGuaranteed, PodIP: "10.244.1.17", StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "postgres", Ready: true, ContainerID: "containerd://4f2d9c1b0e8a7f6d5c4b3a29180706f5e4d3c2b1a09f8e7d6c5b4a3928170605", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}},
				{Name: "exporter", Ready: true, ContainerID: "containerd://5a3e0d2c1f9b8a7e6d5c4b3a29180716f5e4d3c2b1a09f8e7d6c5b4a39281706", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}},
			}},
	}
	return p
}

// BenchmarkPodDecode decodes one pod event's object as the agent's client
// does, in JSON and in protobuf (the content type New asks for).
func BenchmarkPodDecode(b *testing.B) {
	codecs := serializer.NewCodecFactory(Scheme)
	for _, f := range []struct{ name, mediaType string }{{"json", runtime.ContentTypeJSON}, {"protobuf", runtime.ContentTypeProtobuf}} {
		info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), f.mediaType)
		if !ok {
			b.Fatalf("%s: no serializer", f.mediaType)
		}
		var buf bytes.Buffer
		if err := info.Serializer.Encode(eventPod(), &buf); err != nil {
			b.Fatal(err)
		}
		raw := buf.Bytes()
		b.Run(f.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				var p corev1.Pod
				if _, _, err := info.Serializer.Decode(raw, nil, &p); err != nil {
					b.Fatal(err)
				}
				if len(p.Status.ContainerStatuses) != 2 {
					b.Fatal("decoded pod lost its statuses")
				}
			}
		})
	}
}
