package report

import "strings"

// Owner is an object's controller owner reference (kind and name; the
// API version does not matter for keying).
type Owner struct {
	Kind string
	Name string
}

// ParentFunc returns the controller owner of the namespace's object of
// the given kind and name: (owner, true) when the object is known and has
// one, (nil, true) when it is known and has none, (nil, false) when the
// object is not known (not in a cache yet, or no lookup).
type ParentFunc func(kind, name string) (*Owner, bool)

// WorkloadOf returns the workload that owns a pod, the one rule the agent
// (keying its reports) and the aggregator (its webhook) share:
//
//   - no controller owner: the bare pod itself (Kind Pod);
//   - a ReplicaSet: its controller (a Deployment) when parent knows it,
//     the ReplicaSet when it has none; when parent does not know the
//     ReplicaSet, a Deployment named by the ReplicaSet's name without
//     "-<pod-template-hash>" when the pod carries that label and the name
//     ends with it, otherwise the ReplicaSet;
//   - a Job: its controller (a CronJob) when parent knows it, else the Job;
//   - any other controller (StatefulSet, DaemonSet, a custom one): itself.
//
// parent may be nil (no lookups).
func WorkloadOf(namespace, pod string, owner *Owner, labels map[string]string, parent ParentFunc) Workload {
	w := Workload{Namespace: namespace, Kind: KindPod, Name: pod}
	if owner == nil || owner.Kind == "" || owner.Name == "" {
		return w
	}
	w.Kind, w.Name = owner.Kind, owner.Name
	lookup := func() (*Owner, bool) {
		if parent == nil {
			return nil, false
		}
		return parent(owner.Kind, owner.Name)
	}
	switch owner.Kind {
	case KindReplicaSet:
		if p, known := lookup(); known {
			if p != nil && p.Kind != "" && p.Name != "" {
				w.Kind, w.Name = p.Kind, p.Name
			}
			return w
		}
		if h := labels["pod-template-hash"]; h != "" && strings.HasSuffix(owner.Name, "-"+h) && len(owner.Name) > len(h)+1 {
			w.Kind, w.Name = KindDeployment, strings.TrimSuffix(owner.Name, "-"+h)
		}
	case KindJob:
		if p, known := lookup(); known && p != nil && p.Kind != "" && p.Name != "" {
			w.Kind, w.Name = p.Kind, p.Name
		}
	}
	return w
}
