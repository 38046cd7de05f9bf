package policy

import (
	"k8s.io/apimachinery/pkg/api/resource"
)

// limitrange.go: a namespace's LimitRange objects as the plain values
// Clamp takes.

// The LimitRange item types Clamp honours (corev1.LimitTypeContainer and
// corev1.LimitTypePod); others (PersistentVolumeClaim) are skipped.
const (
	LimitTypeContainer = "Container"
	LimitTypePod       = "Pod"
)

// AddLimitRangeItem merges one item of a LimitRange into l, keeping the
// tightest of each bound (several LimitRanges in a namespace all apply):
// typ is the item's type, maxes, mins and ratios its max, min and
// maxLimitRequestRatio (corev1.ResourceList, or any map of quantities
// keyed by a string type). Ratios are read in whole thousandths, rounded
// up, as the LimitRanger admission plugin reads them.
func AddLimitRangeItem[K ~string, M ~map[K]resource.Quantity](l *LimitRange, typ string, maxes, mins, ratios M) {
	tighterMax := func(cur *float64, v float64) {
		if v > 0 && (*cur == 0 || v < *cur) {
			*cur = v
		}
	}
	tighterMin := func(cur *float64, v float64) { *cur = max(*cur, v) }
	mx, mn, rt := ValuesOf(maxes), ValuesOf(mins), Values{}
	if q, ok := ratios[K("cpu")]; ok {
		rt.CPU = CPUCores(q)
	}
	if q, ok := ratios[K("memory")]; ok {
		rt.Memory = CPUCores(q) // a ratio, in thousandths like CPU
	}
	switch typ {
	case LimitTypeContainer:
		tighterMax(&l.Max.CPU, mx.CPU)
		tighterMax(&l.Max.Memory, mx.Memory)
		tighterMin(&l.Min.CPU, mn.CPU)
		tighterMin(&l.Min.Memory, mn.Memory)
		tighterMax(&l.MaxLimitRequestRatio.CPU, rt.CPU)
		tighterMax(&l.MaxLimitRequestRatio.Memory, rt.Memory)
	case LimitTypePod:
		tighterMax(&l.PodMax.CPU, mx.CPU)
		tighterMax(&l.PodMax.Memory, mx.Memory)
		tighterMin(&l.PodMin.CPU, mn.CPU)
		tighterMin(&l.PodMin.Memory, mn.Memory)
	}
}
