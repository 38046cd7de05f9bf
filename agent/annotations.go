package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// Annotations set by users on pods.
const (
	AnnotationCPUPool          = "cgpilot.io/cpu-pool"          // exclusive | shared | none
	AnnotationCPUs             = "cgpilot.io/cpus"              // "N": exclusive CPU count
	AnnotationCPUSet           = "cgpilot.io/cpuset"            // "LIST": explicit cores chosen elsewhere
	AnnotationCPUPolicy        = "cgpilot.io/cpu-policy"        // full-cores | spread | bind-all
	AnnotationNUMA             = "cgpilot.io/numa"              // single | prefer-single | spread
	AnnotationIOQueues         = "cgpilot.io/io-queues"         // avoid | spread | any
	AnnotationReleaseIsolation = "cgpilot.io/release-isolation" // "true" | "false"
)

// Annotations written by the agent.
const (
	AnnotationAllocatedCPUs = "cgpilot.io/allocated-cpus" // pod: "LIST"
	AnnotationStatus        = "cgpilot.io/status"         // pod: Status JSON
	AnnotationSharedPool    = "cgpilot.io/shared-pool"    // node: "LIST"
	AnnotationPoolSummary   = "cgpilot.io/pool-summary"   // node: NodeSummary JSON
)

// maxCPUID bounds every CPU number we accept from an annotation, so a hostile
// "0-2000000000" cannot make us build a huge set. Linux's NR_CPUS tops out at 8192.
const maxCPUID = 8191

// Sentinels of the annotation protocol. Every parse error wraps exactly one of
// the specific ones, and each of those wraps ErrInvalidAnnotation.
var (
	ErrInvalidAnnotation = errors.New("invalid cgpilot annotation")
	ErrUnknownPool       = fmt.Errorf("%w: unknown cpu pool", ErrInvalidAnnotation)
	ErrBadCPUCount       = fmt.Errorf("%w: cpu count must be a positive integer", ErrInvalidAnnotation)
	ErrBadCPUList        = fmt.Errorf("%w: malformed cpu list", ErrInvalidAnnotation)
	ErrBadOption         = fmt.Errorf("%w: unknown option", ErrInvalidAnnotation)
	ErrConflict          = fmt.Errorf("%w: conflicting annotations", ErrInvalidAnnotation)
)

// AnnotationError names the annotation and value that failed to parse.
type AnnotationError struct {
	Key   string
	Value string
	Err   error // wraps one of the sentinels above
}

func (e *AnnotationError) Error() string {
	return fmt.Sprintf("annotation %s=%q: %v", e.Key, e.Value, e.Err)
}

func (e *AnnotationError) Unwrap() error { return e.Err }

// Pool is the CPU pool a pod asks for.
type Pool string

const (
	PoolShared    Pool = "shared"
	PoolExclusive Pool = "exclusive"
	PoolNone      Pool = "none" // never touched by the agent
)

// Options of the topology allocator, passed through unchanged.
var (
	cpuPolicies = []string{"full-cores", "spread", "bind-all"}
	numaModes   = []string{"single", "prefer-single", "spread"}
	ioModes     = []string{"avoid", "spread", "any"}
)

// PodRequest is the parsed, validated form of a pod's cgpilot annotations.
// Optional values are pointers or empty strings: absent is not zero.
type PodRequest struct {
	Pool             Pool
	CPUs             *int           // nil: derive from the container limits / requests
	CPUSet           *cpuset.CPUSet // nil: the agent picks the cores
	CPUPolicy        string         // "" = allocator default
	NUMA             string
	IOQueues         string
	ReleaseIsolation bool
}

// ParseAnnotations validates a pod's annotations strictly: no surrounding
// space, no unknown values, exclusive-only options only on exclusive pods.
// Annotations outside the cgpilot.io/ user set are ignored.
func ParseAnnotations(ann map[string]string) (PodRequest, error) {
	req := PodRequest{Pool: PoolShared}
	if v, ok := ann[AnnotationCPUPool]; ok {
		switch Pool(v) {
		case PoolShared, PoolExclusive, PoolNone:
			req.Pool = Pool(v)
		default:
			return PodRequest{}, &AnnotationError{AnnotationCPUPool, v, ErrUnknownPool}
		}
	}
	if v, ok := ann[AnnotationCPUs]; ok {
		n, err := parseCPUCount(v)
		if err != nil {
			return PodRequest{}, &AnnotationError{AnnotationCPUs, v, err}
		}
		req.CPUs = &n
	}
	if v, ok := ann[AnnotationCPUSet]; ok {
		set, err := ParseCPUList(v)
		if err != nil {
			return PodRequest{}, &AnnotationError{AnnotationCPUSet, v, err}
		}
		if set.IsEmpty() {
			return PodRequest{}, &AnnotationError{AnnotationCPUSet, v, fmt.Errorf("%w: empty", ErrBadCPUList)}
		}
		req.CPUSet = &set
	}
	for _, o := range []struct {
		key     string
		allowed []string
		dst     *string
	}{
		{AnnotationCPUPolicy, cpuPolicies, &req.CPUPolicy},
		{AnnotationNUMA, numaModes, &req.NUMA},
		{AnnotationIOQueues, ioModes, &req.IOQueues},
	} {
		v, ok := ann[o.key]
		if !ok {
			continue
		}
		if !contains(o.allowed, v) {
			return PodRequest{}, &AnnotationError{o.key, v, fmt.Errorf("%w (want one of %s)", ErrBadOption, strings.Join(o.allowed, ", "))}
		}
		*o.dst = v
	}
	if v, ok := ann[AnnotationReleaseIsolation]; ok {
		switch v {
		case "true":
			req.ReleaseIsolation = true
		case "false":
		default:
			return PodRequest{}, &AnnotationError{AnnotationReleaseIsolation, v, fmt.Errorf("%w (want true or false)", ErrBadOption)}
		}
	}
	if req.Pool != PoolExclusive {
		for _, k := range []string{AnnotationCPUs, AnnotationCPUSet, AnnotationCPUPolicy, AnnotationNUMA, AnnotationIOQueues, AnnotationReleaseIsolation} {
			if v, ok := ann[k]; ok {
				return PodRequest{}, &AnnotationError{k, v, fmt.Errorf("%w: only valid with %s: exclusive", ErrConflict, AnnotationCPUPool)}
			}
		}
	}
	if req.CPUs != nil && req.CPUSet != nil && req.CPUSet.Size() != *req.CPUs {
		return PodRequest{}, &AnnotationError{AnnotationCPUSet, ann[AnnotationCPUSet],
			fmt.Errorf("%w: %d CPUs but %s=%q", ErrConflict, req.CPUSet.Size(), AnnotationCPUs, ann[AnnotationCPUs])}
	}
	return req, nil
}

func contains(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

// parseCPUCount accepts only plain decimal digits: no sign, no space, no
// leading zero, at most maxCPUID+1.
func parseCPUCount(v string) (int, error) {
	if v == "" || (len(v) > 1 && v[0] == '0') || strings.TrimLeft(v, "0123456789") != "" {
		return 0, ErrBadCPUCount
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxCPUID+1 {
		return 0, ErrBadCPUCount
	}
	return n, nil
}

// ParseCPUList parses the Linux list format ("0-3,8,10-11") strictly: no
// spaces, no empty elements, no reversed ranges, ids within [0, 8191]. The
// empty string is the empty set (an empty cpuset.cpus file reads that way).
func ParseCPUList(v string) (cpuset.CPUSet, error) {
	if v == "" {
		return cpuset.New(), nil
	}
	var cpus []int
	for _, part := range strings.Split(v, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseCPUID(lo)
		if err != nil {
			return cpuset.New(), fmt.Errorf("%w: element %q", ErrBadCPUList, part)
		}
		b := a
		if isRange {
			if b, err = parseCPUID(hi); err != nil || b < a {
				return cpuset.New(), fmt.Errorf("%w: range %q", ErrBadCPUList, part)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpuset.New(cpus...), nil
}

func parseCPUID(s string) (int, error) {
	if s == "" || len(s) > 4 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, ErrBadCPUList
	}
	n, _ := strconv.Atoi(s)
	if n > maxCPUID {
		return 0, ErrBadCPUList
	}
	return n, nil
}

// State of a pod as reported in its status annotation.
type PodState string

const (
	StateShared    PodState = "Shared"    // runs on the shared pool
	StateAllocated PodState = "Allocated" // has exclusive CPUs
	StateReleased  PodState = "Released"  // exclusive pod temporarily on all non-reserved CPUs
	StateRefused   PodState = "Refused"   // bad input or no room; nothing was changed
	StateFailed    PodState = "Failed"    // a cgroup write failed; retried
)

// Status is the JSON of the cgpilot.io/status pod annotation.
type Status struct {
	Pool               Pool     `json:"pool"`
	CPUs               string   `json:"cpus,omitempty"`
	State              PodState `json:"state"`
	Reason             string   `json:"reason,omitempty"`
	Error              string   `json:"error,omitempty"`
	ObservedGeneration int64    `json:"observedGeneration"`
}

// Encode returns the annotation value.
func (s Status) Encode() string {
	b, _ := json.Marshal(s) // plain struct of strings and ints: cannot fail
	return string(b)
}

// ParseStatus decodes a status annotation, rejecting unknown fields.
func ParseStatus(v string) (Status, error) {
	var s Status
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Status{}, &AnnotationError{AnnotationStatus, v, fmt.Errorf("%w: %v", ErrInvalidAnnotation, err)}
	}
	return s, nil
}

// NodeSummary is the JSON of the cgpilot.io/pool-summary node annotation.
type NodeSummary struct {
	CPUs           string `json:"cpus"`     // all online CPUs
	Reserved       string `json:"reserved"` // never given to pods
	SharedPool     string `json:"sharedPool"`
	Exclusive      string `json:"exclusive"`     // held by cgpilot exclusive pods
	KubeletStatic  string `json:"kubeletStatic"` // held by the kubelet's static CPU manager
	ExclusiveCap   int    `json:"exclusiveCap"`
	ExclusivePods  int    `json:"exclusivePods"`
	SharedPods     int    `json:"sharedPods"`
	NUMANodes      int    `json:"numaNodes,omitempty"`
	TopologySource string `json:"topologySource,omitempty"`
	Topology       string `json:"topology,omitempty"` // machine shape: sockets, NUMA nodes, cores, L3 groups, IO-queue CPUs
}

// Encode returns the annotation value.
func (n NodeSummary) Encode() string {
	b, _ := json.Marshal(n)
	return string(b)
}
