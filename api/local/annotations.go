package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/cgpilot/cgpilot/internal/cpulist"
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

// AnnotationPrefix starts every cgpilot annotation.
const AnnotationPrefix = "cgpilot.io/"

// MaxAnnotationBytes bounds one cgpilot annotation value the agent reads;
// the API server allows 256 KiB for all of a pod's annotations together,
// and no valid cgpilot value comes near this.
const MaxAnnotationBytes = cpulist.MaxLen

// Sentinels of the annotation protocol. Every parse error wraps exactly one of
// the specific ones, and each of those wraps ErrInvalidAnnotation.
var (
	ErrInvalidAnnotation = errors.New("invalid cgpilot annotation")
	ErrUnknownPool       = fmt.Errorf("%w: unknown cpu pool", ErrInvalidAnnotation)
	ErrBadCPUCount       = fmt.Errorf("%w: cpu count must be a positive integer", ErrInvalidAnnotation)
	ErrBadCPUList        = fmt.Errorf("%w: malformed cpu list", ErrInvalidAnnotation)
	ErrBadOption         = fmt.Errorf("%w: unknown option", ErrInvalidAnnotation)
	ErrConflict          = fmt.Errorf("%w: conflicting annotations", ErrInvalidAnnotation)
	ErrTooLong           = fmt.Errorf("%w: value too long", ErrInvalidAnnotation)
)

// AnnotationError names the annotation and value that failed to parse. The
// value is cut short in messages: a hostile annotation must not make every
// log line and Event carry it.
type AnnotationError struct {
	Key   string
	Value string
	Err   error // wraps one of the sentinels above
}

func (e *AnnotationError) Error() string {
	v := e.Value
	if len(v) > 64 {
		v = v[:64] + fmt.Sprintf("… (%d bytes)", len(e.Value))
	}
	return fmt.Sprintf("annotation %s=%q: %v", e.Key, v, e.Err)
}

func (e *AnnotationError) Unwrap() error { return e.Err }

// Pool is the CPU pool a pod asks for.
type Pool string

const (
	PoolShared    Pool = "shared"
	PoolExclusive Pool = "exclusive"
	PoolNone      Pool = "none" // never touched by the agent
)

// The values of the allocator options, passed through to package topology
// (a test keeps these lists equal to what topology accepts).
var (
	CPUPolicies = []string{"full-cores", "spread", "bind-all"}
	NUMAModes   = []string{"single", "prefer-single", "spread"}
	IOModes     = []string{"avoid", "spread", "any"}
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
// space, no unknown values, exclusive-only options only on exclusive pods,
// no value longer than MaxAnnotationBytes. Annotations outside the
// cgpilot.io/ user set are ignored. The cost is linear in the length of
// the cgpilot values and bounded in memory, whatever they hold.
func ParseAnnotations(ann map[string]string) (PodRequest, error) {
	req := PodRequest{Pool: PoolShared}
	for _, k := range userKeys {
		if v, ok := ann[k]; ok && len(v) > MaxAnnotationBytes {
			return PodRequest{}, &AnnotationError{k, v, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLong, len(v), MaxAnnotationBytes)}
		}
	}
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
		set, err := cpulist.Parse(v)
		if err != nil {
			return PodRequest{}, &AnnotationError{AnnotationCPUSet, v, fmt.Errorf("%w: %s", ErrBadCPUList, strings.TrimPrefix(err.Error(), cpulist.ErrSyntax.Error()+": "))}
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
		{AnnotationCPUPolicy, CPUPolicies, &req.CPUPolicy},
		{AnnotationNUMA, NUMAModes, &req.NUMA},
		{AnnotationIOQueues, IOModes, &req.IOQueues},
	} {
		v, ok := ann[o.key]
		if !ok {
			continue
		}
		if !slices.Contains(o.allowed, v) {
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
		for _, k := range exclusiveOnly {
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

// userKeys are the annotations users set; exclusiveOnly those that only an
// exclusive pod may set.
var (
	exclusiveOnly = []string{AnnotationCPUs, AnnotationCPUSet, AnnotationCPUPolicy, AnnotationNUMA, AnnotationIOQueues, AnnotationReleaseIsolation}
	userKeys      = append([]string{AnnotationCPUPool}, exclusiveOnly...)
)

// parseCPUCount accepts only plain decimal digits: no sign, no space, no
// leading zero, at most cpulist.MaxCPUs.
func parseCPUCount(v string) (int, error) {
	if v == "" || len(v) > 5 || (len(v) > 1 && v[0] == '0') || strings.TrimLeft(v, "0123456789") != "" {
		return 0, ErrBadCPUCount
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > cpulist.MaxCPUs {
		return 0, ErrBadCPUCount
	}
	return n, nil
}

// PodState is the state of a pod as reported in its status annotation.
type PodState string

const (
	StateShared    PodState = "Shared"    // runs on the shared pool
	StateAllocated PodState = "Allocated" // has exclusive CPUs
	StateReleased  PodState = "Released"  // exclusive pod temporarily on the shared pool and its own CPUs
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
	if len(v) > MaxAnnotationBytes {
		return Status{}, &AnnotationError{AnnotationStatus, v, fmt.Errorf("%w: %d bytes", ErrTooLong, len(v))}
	}
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
