package recommend

import (
	"math"
	"sync"
)

// bucketLayout finds a value's bucket without a logarithm. thresholds[b]
// (b ≥ 1) is the smallest float64 that FindBucket's log formula puts in
// bucket b or above. The formula is monotone in v, so "the last threshold
// ≤ v" is exactly its bucket for every v; TestBucketLayoutMatchesFormula
// checks every float64 around every boundary of the VPA layouts.
//
// The hot path guesses the bucket from the float's exponent and mantissa
// and then corrects the guess against the thresholds, so the guess's error
// only costs a comparison or two, never a different bucket.
type bucketLayout struct {
	first      float64 // FirstBucketSize: below it, bucket 0
	top        float64 // thresholds[last]: at or above it, the last bucket
	scale      float64 // (Ratio − 1) / FirstBucketSize, for the guess only
	perOctave  float64 // 1 / log2(Ratio), for the guess only
	thresholds []float64
}

func newBucketLayout(o HistogramOptions) *bucketLayout {
	n := o.NumBuckets
	l := &bucketLayout{
		first:      o.FirstBucketSize,
		scale:      (o.Ratio - 1) / o.FirstBucketSize,
		perOctave:  1 / math.Log2(o.Ratio),
		thresholds: make([]float64, n),
	}
	// Positive float64s order like their bit patterns, so a binary search
	// over the bits finds each smallest value; thresholds never decrease,
	// so each search starts at the previous one.
	lo := math.Float64bits(o.FirstBucketSize)
	for b := 1; b < n; b++ {
		hi := math.Float64bits(math.Inf(1))
		for lo < hi {
			mid := lo + (hi-lo)/2
			if o.FindBucket(math.Float64frombits(mid)) >= b {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		l.thresholds[b] = math.Float64frombits(lo)
	}
	l.top = l.thresholds[n-1]
	if n == 1 {
		l.top = l.first
	}
	return l
}

// find returns FindBucket(v) for any v that is not NaN.
func (l *bucketLayout) find(v float64) int {
	last := len(l.thresholds) - 1
	switch {
	case v < l.first:
		return 0
	case !(v < l.top):
		return last
	}
	// log2(x) ≈ exponent + m + 0.346·m·(1 − m) for the mantissa m ∈ [0, 1)
	// (error < 0.01), then buckets = log2 / log2(Ratio).
	x := v*l.scale + 1
	bits := math.Float64bits(x)
	m := math.Float64frombits(bits&(1<<52-1)|1023<<52) - 1
	g := int((float64(int(bits>>52)-1023) + m + 0.346*m*(1-m)) * l.perOctave)
	g = min(max(g, 0), last)
	th := l.thresholds
	for g > 0 && v < th[g] {
		g--
	}
	for g < last && v >= th[g+1] {
		g++
	}
	return g
}

// Layouts are shared by every histogram with the same bucket options. Only
// NewHistogram adds to the cache (decoding only looks up, so that input
// cannot fill it), and the cache is bounded; a histogram without a layout
// uses the formula itself.
const maxCachedLayouts = 16

type layoutKey struct {
	first, ratio float64
	n            int
}

var layoutCache struct {
	sync.Mutex
	m map[layoutKey]*bucketLayout
}

// knownLayout returns the cached layout of o, or nil.
func knownLayout(o HistogramOptions) *bucketLayout {
	layoutCache.Lock()
	defer layoutCache.Unlock()
	return layoutCache.m[layoutKey{o.FirstBucketSize, o.Ratio, o.NumBuckets}]
}

// cachedLayout returns the cached layout of o, building it on first use
// while the cache has room, else nil.
func cachedLayout(o HistogramOptions) *bucketLayout {
	k := layoutKey{o.FirstBucketSize, o.Ratio, o.NumBuckets}
	layoutCache.Lock()
	defer layoutCache.Unlock()
	if l, ok := layoutCache.m[k]; ok {
		return l
	}
	if len(layoutCache.m) >= maxCachedLayouts {
		return nil
	}
	if layoutCache.m == nil {
		layoutCache.m = map[layoutKey]*bucketLayout{}
	}
	l := newBucketLayout(o)
	layoutCache.m[k] = l
	return l
}
