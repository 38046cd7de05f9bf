package policy

import (
	"math"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/cgpilot/cgpilot/internal/millicpu"
)

// quantity.go: the one conversion between Kubernetes quantities and the
// cores and bytes every decision works in, both ways.

// Ceilings of every value this package returns: far above any node, and
// low enough that millicores and bytes fit an int64 with room to add.
const (
	MaxCPU    = millicpu.MaxCores // cores (1,048,576)
	MaxMemory = 1 << 60           // bytes (1 EiB)
)

// Values are a CPU amount in cores and a memory amount in bytes; 0 is
// unset (no request, no limit).
type Values struct{ CPU, Memory float64 }

// Requirements are a container's requests and limits.
type Requirements struct{ Requests, Limits Values }

var (
	maxCPUQuantity    = resource.MustParse("1Mi") // 1 << 20 cores
	maxMemoryQuantity = *resource.NewQuantity(MaxMemory, resource.BinarySI)
)

// CPUCores is a CPU quantity in cores: whole millicores rounded up (the
// unit requests are applied in; the API server keeps no finer CPU), exact
// up to MaxCPU and MaxCPU above it (Quantity.MilliValue wraps past int64,
// so "1e20" would read as 0, and AsApproximateFloat64 reads "300m" as
// 0.30000000000000004). Negative quantities give their negative.
func CPUCores(q resource.Quantity) float64 {
	return saturated(q, maxCPUQuantity, MaxCPU, func(q resource.Quantity) float64 { return float64(q.MilliValue()) / 1000 })
}

// MemoryBytes is a memory quantity in bytes, rounded up, exact up to
// MaxMemory and MaxMemory above it (Quantity.Value wraps past int64).
// Negative quantities give their negative.
func MemoryBytes(q resource.Quantity) float64 {
	return saturated(q, maxMemoryQuantity, MaxMemory, func(q resource.Quantity) float64 { return float64(q.Value()) })
}

// saturated reads q with read, which is exact up to limitQ: above limitQ
// it is limit, and a negative q is the negative of its magnitude's reading
// (the one rule of CPUCores and MemoryBytes).
func saturated(q, limitQ resource.Quantity, limit float64, read func(resource.Quantity) float64) float64 {
	switch {
	case q.Cmp(limitQ) > 0:
		return limit
	case q.Sign() < 0:
		n := q.DeepCopy()
		n.Neg()
		return -saturated(n, limitQ, limit, read)
	}
	return read(q)
}

// Bytes is a memory amount in whole bytes, rounded up; NaN and values ≤ 0
// give 0, values above MaxMemory give MaxMemory.
func Bytes(memory float64) int64 {
	if !(memory > 0) {
		return 0
	}
	return int64(math.Ceil(min(memory, MaxMemory)))
}

// CPUQuantity is cores as a quantity of whole millicores, rounded up by
// internal/millicpu (NaN and values ≤ 0 give 0, values above MaxCPU give
// MaxCPU).
func CPUQuantity(cores float64) resource.Quantity {
	return *resource.NewMilliQuantity(millicpu.Ceil(cores), resource.DecimalSI)
}

// MemoryQuantity is bytes as a quantity of whole bytes (Bytes).
func MemoryQuantity(memory float64) resource.Quantity {
	return *resource.NewQuantity(Bytes(memory), resource.BinarySI)
}

// ValuesOf reads the cpu and memory entries of a resource list (a
// corev1.ResourceList, or any map of quantities keyed by a string type):
// absent entries are 0.
func ValuesOf[K ~string, M ~map[K]resource.Quantity](l M) Values {
	var v Values
	if q, ok := l[K("cpu")]; ok {
		v.CPU = CPUCores(q)
	}
	if q, ok := l[K("memory")]; ok {
		v.Memory = MemoryBytes(q)
	}
	return v
}
