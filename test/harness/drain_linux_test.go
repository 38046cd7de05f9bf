//go:build linux

package harness

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/cgpilot/cgpilot/test/images"
	"github.com/cgpilot/cgpilot/test/tier"
)

// TestNodeTeardownWithDaemonSet: a DaemonSet re-creates its pod as soon
// as the drain deletes it; the teardown must still drain the node (before:
// it waited 90 s and failed).
func TestNodeTeardownWithDaemonSet(t *testing.T) {
	bins := tier.Node(t)
	cp := MustStart(t, bins, Options{Controllers: true})
	n := MustStartNode(t, cp, NodeOptions{})
	ctx := context.Background()
	labels := map[string]string{"app": "drain-test"}
	grace := int64(1)
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "drain-test", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace, AutomountServiceAccountToken: new(bool),
					Containers: []corev1.Container{{Name: "c", Image: images.BusyboxRef, ImagePullPolicy: corev1.PullNever,
						Command: []string{"sh", "-c", "exec sleep 3600"}}},
				},
			},
		},
	}
	if _, err := cp.Client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := fields.OneTermEqualSelector("spec.nodeName", n.Name()).String()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := cp.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DaemonSet pod not running on %s: %v %v", n.Name(), pods, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := n.Stop(); err != nil {
		t.Fatalf("teardown with a DaemonSet: %v", err)
	}
	pods, err := cp.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil || len(pods.Items) != 0 {
		t.Fatalf("pods left on the node after teardown: %v, %v", pods, err)
	}
}
