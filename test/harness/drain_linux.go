//go:build linux

package harness

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// deleteControllers deletes the controllers that own pods (DaemonSets,
// ReplicaSets and their Deployments, StatefulSets, Jobs and their
// CronJobs, ReplicationControllers), so that a drain's pod deletions are
// not undone: a DaemonSet re-creates its pod on the node at once. Pods
// without a controller (and mirror pods, owned by the Node) are left to the
// drain. Objects already gone are not an error.
func deleteControllers(ctx context.Context, cs kubernetes.Interface, pods []corev1.Pod) error {
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	done := map[string]bool{}
	var errs []error
	var del func(kind, ns, name string)
	ownerOf := func(refs []metav1.OwnerReference, kind string) string {
		for _, o := range refs {
			if o.Kind == kind && o.Controller != nil && *o.Controller {
				return o.Name
			}
		}
		return ""
	}
	del = func(kind, ns, name string) {
		key := kind + "/" + ns + "/" + name
		if done[key] {
			return
		}
		done[key] = true
		var err error
		switch kind {
		case "DaemonSet":
			err = cs.AppsV1().DaemonSets(ns).Delete(ctx, name, opts)
		case "ReplicaSet":
			// Its Deployment first, or that makes a new ReplicaSet.
			if rs, gerr := cs.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{}); gerr == nil {
				if d := ownerOf(rs.OwnerReferences, "Deployment"); d != "" {
					del("Deployment", ns, d)
				}
			}
			err = cs.AppsV1().ReplicaSets(ns).Delete(ctx, name, opts)
		case "Deployment":
			err = cs.AppsV1().Deployments(ns).Delete(ctx, name, opts)
		case "StatefulSet":
			err = cs.AppsV1().StatefulSets(ns).Delete(ctx, name, opts)
		case "Job":
			if job, gerr := cs.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{}); gerr == nil {
				if cj := ownerOf(job.OwnerReferences, "CronJob"); cj != "" {
					del("CronJob", ns, cj)
				}
			}
			err = cs.BatchV1().Jobs(ns).Delete(ctx, name, opts)
		case "CronJob":
			err = cs.BatchV1().CronJobs(ns).Delete(ctx, name, opts)
		case "ReplicationController":
			err = cs.CoreV1().ReplicationControllers(ns).Delete(ctx, name, opts)
		default:
			return
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("%w: delete %s %s/%s: %v", ErrTeardown, kind, ns, name, err))
		}
	}
	for _, p := range pods {
		if name := ownerOfAny(p.OwnerReferences); name.Kind != "" {
			del(name.Kind, p.Namespace, name.Name)
		}
	}
	return errors.Join(errs...)
}

// ownerOfAny is the pod's controller reference, if any.
func ownerOfAny(refs []metav1.OwnerReference) metav1.OwnerReference {
	for _, o := range refs {
		if o.Controller != nil && *o.Controller {
			return o
		}
	}
	return metav1.OwnerReference{}
}
