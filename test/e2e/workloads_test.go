package e2e

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

var authnTokenRequest = authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{"https://kubernetes.default.svc.cluster.local"}}}

type appsDeployment struct {
	name, ns string
	replicas int32
	labels   map[string]string
	spec     corev1.PodSpec
}

func (d *appsDeployment) create(ctx context.Context, cs kubernetes.Interface) error {
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: d.name, Namespace: d.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &d.replicas,
			Selector: &metav1.LabelSelector{MatchLabels: d.labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: d.labels}, Spec: d.spec},
		},
	}
	_, err := cs.AppsV1().Deployments(d.ns).Create(ctx, dep, metav1.CreateOptions{})
	return err
}
