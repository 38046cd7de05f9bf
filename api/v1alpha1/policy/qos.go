package policy

// qos.go: the one QoS rule of cgpilot (QoSClass). The agent reads a pod's
// class by it (agent/podspec, when the status does not carry one) and
// right-sizing asks it whether a change would move a pod to another class
// (QoSOf).

// QoS classes, spelled as in the Kubernetes API (status.qosClass).
const (
	QoSGuaranteed = "Guaranteed"
	QoSBurstable  = "Burstable"
	QoSBestEffort = "BestEffort"
)

// QoSResource is what the QoS rule reads of one resource (CPU or memory)
// of one container: whether a request and a limit are set, and whether
// the request equals the limit. What "set" means is the caller's
// representation's: a key present in a pod's resource list
// (agent/podspec), an amount above 0 in Values (QoSOf).
type QoSResource struct{ Request, Limit, Equal bool }

// QoSClass is the Kubernetes QoS rule, per container: BestEffort when no
// container sets a CPU or memory request or limit, Guaranteed when every
// container limits both and every request it sets equals its limit, else
// Burstable. rs holds the CPU and the memory of every container; a pod's
// class takes its init containers with its containers.
func QoSClass(rs []QoSResource) string {
	any, guaranteed := false, true
	for _, r := range rs {
		if r.Request || r.Limit {
			any = true
		}
		if !r.Limit || (r.Request && !r.Equal) {
			guaranteed = false
		}
	}
	switch {
	case !any:
		return QoSBestEffort
	case guaranteed:
		return QoSGuaranteed
	}
	return QoSBurstable
}

// QoSOf is QoSClass over containers' amounts (0 is unset, as in Values;
// amounts are finite and ≥ 0, as Clamp leaves them): right-sizing asks it
// whether a change would move a pod to another class.
func QoSOf(cs []Requirements) string {
	rs := make([]QoSResource, 0, 2*len(cs))
	for _, c := range cs {
		rs = append(rs,
			QoSResource{Request: c.Requests.CPU > 0, Limit: c.Limits.CPU > 0, Equal: c.Requests.CPU == c.Limits.CPU},
			QoSResource{Request: c.Requests.Memory > 0, Limit: c.Limits.Memory > 0, Equal: c.Requests.Memory == c.Limits.Memory})
	}
	return QoSClass(rs)
}
