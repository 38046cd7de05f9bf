package recommend

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// HistogramOptions fixes the bucket layout and decay of a Histogram. Two
// histograms merge only when their options are equal.
//
// Bucket 0 is [0, FirstBucketSize); bucket n ≥ 1 starts at
// FirstBucketSize·(Ratio^n − 1)/(Ratio − 1). Values past the last bucket
// start land in the last bucket.
type HistogramOptions struct {
	FirstBucketSize float64
	Ratio           float64
	NumBuckets      int
	// Epsilon is the smallest weight that keeps a bucket "non-empty".
	Epsilon float64
	// HalfLife is the age at which a sample's weight halves; 0 disables decay.
	HalfLife time.Duration
}

// maxHistogramBuckets bounds NumBuckets so that a decoded histogram cannot
// ask for an arbitrary allocation.
const maxHistogramBuckets = 4096

// VPA 1.8.1 defaults (pkg/recommender/model/aggregations_config.go): buckets
// grow 5 %, 176 of them cover up to 1000 cores / 1e12 bytes, epsilon is
// 0.001 × the minimum sample weight 0.1, half-lives are 24 h.
const (
	vpaRatio      = 1.05
	vpaNumBuckets = 176
	vpaEpsilon    = 1e-4
	vpaHalfLife   = 24 * time.Hour
)

// CPUHistogramOptions returns VPA's CPU layout: first bucket 0.01 core.
func CPUHistogramOptions() HistogramOptions {
	return HistogramOptions{FirstBucketSize: 0.01, Ratio: vpaRatio, NumBuckets: vpaNumBuckets, Epsilon: vpaEpsilon, HalfLife: vpaHalfLife}
}

// MemoryHistogramOptions returns VPA's memory layout: first bucket 1e7 bytes.
func MemoryHistogramOptions() HistogramOptions {
	return HistogramOptions{FirstBucketSize: 1e7, Ratio: vpaRatio, NumBuckets: vpaNumBuckets, Epsilon: vpaEpsilon, HalfLife: vpaHalfLife}
}

// Validate reports whether the options describe a usable layout.
func (o HistogramOptions) Validate() error {
	switch {
	case !(o.FirstBucketSize > 0) || math.IsInf(o.FirstBucketSize, 0):
		return fmt.Errorf("%w: first bucket size %v must be finite and > 0", ErrInvalidOptions, o.FirstBucketSize)
	case !(o.Ratio > 1) || math.IsInf(o.Ratio, 0):
		return fmt.Errorf("%w: ratio %v must be finite and > 1", ErrInvalidOptions, o.Ratio)
	case o.NumBuckets < 1 || o.NumBuckets > maxHistogramBuckets:
		return fmt.Errorf("%w: %d buckets, want 1..%d", ErrInvalidOptions, o.NumBuckets, maxHistogramBuckets)
	case !(o.Epsilon > 0) || math.IsInf(o.Epsilon, 0):
		return fmt.Errorf("%w: epsilon %v must be finite and > 0", ErrInvalidOptions, o.Epsilon)
	case o.HalfLife < 0:
		return fmt.Errorf("%w: half-life %v must be ≥ 0", ErrInvalidOptions, o.HalfLife)
	}
	return nil
}

// BucketStart returns the lower bound of bucket b (0 ≤ b < NumBuckets),
// computed exactly as VPA does so that percentiles compare bit for bit.
func (o HistogramOptions) BucketStart(b int) float64 {
	if b <= 0 {
		return 0
	}
	if b >= o.NumBuckets {
		b = o.NumBuckets - 1
	}
	return o.FirstBucketSize * (math.Pow(o.Ratio, float64(b)) - 1) / (o.Ratio - 1)
}

// FindBucket returns the bucket that holds v (VPA's formula, same rounding).
func (o HistogramOptions) FindBucket(v float64) int {
	if v < o.FirstBucketSize {
		return 0
	}
	b := int(math.Log(v*(o.Ratio-1)/o.FirstBucketSize+1) / math.Log(o.Ratio))
	if b >= o.NumBuckets || b < 0 {
		return o.NumBuckets - 1
	}
	return b
}

// findBucket is FindBucket through the shared threshold table when there is
// one, else with log(Ratio) cached (the same value, so the same bucket).
// v is never NaN here (AddSample and SubtractSample drop NaN first).
func (h *Histogram) findBucket(v float64) int {
	if h.layout != nil {
		return h.layout.find(v)
	}
	o := &h.opts
	if v < o.FirstBucketSize {
		return 0
	}
	b := int(math.Log(v*(o.Ratio-1)/o.FirstBucketSize+1) / h.logRatio)
	if b >= o.NumBuckets || b < 0 {
		return o.NumBuckets - 1
	}
	return b
}

// maxDecayExponent is how many half-lives a sample may lie past the
// reference time before the reference moves forward and all weights are
// renormalised (VPA uses 100, keeping weights far inside float64 range).
const maxDecayExponent = 100

// Histogram is an exponential-bucket histogram whose sample weights grow by
// 2^(age/HalfLife) relative to a reference time, which is the same as old
// samples decaying. It reproduces VPA 1.8.1's decaying histogram operation
// for operation, so the same samples give bit-identical percentiles.
//
// The zero value is not usable; call NewHistogram. A Histogram is not safe
// for concurrent use.
type Histogram struct {
	opts HistogramOptions
	// weights reach only as far as the highest bucket ever written (or
	// decoded, or the max bound): a bucket past the end weighs 0. Most
	// containers' usage stays in the low buckets, so an agent's 2,000
	// histograms hold a few dozen weights each instead of 176 (3.3 of a
	// 20 MiB heap at 1,000 containers, before).
	weights  []float64
	total    float64
	min, max int // loose bounds of the non-empty buckets, as in VPA
	ref      time.Time
	// Derived on the hot path, cached: log(Ratio) and ref + 100 half-lives.
	logRatio float64
	maxRef   time.Time
	// layout is the bucket threshold table shared by histograms with the
	// same bucket options (nil: use the formula).
	layout *bucketLayout
	// memo is the owning Recommender's decay-factor memo (nil: none). It
	// is not kept by Clone or decoding, whose results may leave the lock.
	memo *decayMemo
}

// NewHistogram returns an empty histogram with the given layout.
func NewHistogram(o HistogramOptions) (*Histogram, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	h := &Histogram{opts: o, min: o.NumBuckets - 1, layout: cachedLayout(o)}
	h.derive()
	return h, nil
}

func (h *Histogram) derive() {
	h.logRatio = math.Log(h.opts.Ratio)
	h.maxRef = h.ref.Add(time.Duration(int64(h.opts.HalfLife) * maxDecayExponent))
}

func mustHistogram(o HistogramOptions, memo *decayMemo) *Histogram {
	h, err := NewHistogram(o)
	if err != nil {
		panic(err) // only called with the package's own constant options
	}
	h.memo = memo
	return h
}

// Options returns the layout.
func (h *Histogram) Options() HistogramOptions { return h.opts }

// TotalWeight returns the sum of the (reference-scaled) weights.
func (h *Histogram) TotalWeight() float64 { return h.total }

// ReferenceTime returns the time at which a sample has its nominal weight.
func (h *Histogram) ReferenceTime() time.Time { return h.ref }

// IsEmpty reports whether no bucket holds at least Epsilon weight.
func (h *Histogram) IsEmpty() bool { return h.at(h.min) < h.opts.Epsilon }

// at is bucket b's weight: 0 past the end of weights.
func (h *Histogram) at(b int) float64 {
	if b < len(h.weights) {
		return h.weights[b]
	}
	return 0
}

// reach extends weights to hold bucket b.
func (h *Histogram) reach(b int) {
	if b >= len(h.weights) {
		w := make([]float64, b+1)
		copy(w, h.weights)
		h.weights = w
	}
}

// AddSample adds value with weight at time t. A negative, NaN or infinite
// weight and a NaN value are ignored, so that one bad sample cannot poison
// the state.
func (h *Histogram) AddSample(value, weight float64, t time.Time) {
	if !(weight >= 0) || math.IsInf(weight, 0) || math.IsNaN(value) {
		return
	}
	h.addRaw(h.findBucket(value), weight*h.decayFactor(t))
}

func (h *Histogram) addRaw(b int, w float64) {
	h.reach(b)
	h.weights[b] += w
	h.total += w
	if b < h.min && h.weights[b] >= h.opts.Epsilon {
		h.min = b
	}
	if b > h.max && h.weights[b] >= h.opts.Epsilon {
		h.max = b
	}
}

// SubtractSample removes a sample added earlier with the same value, weight
// and time. Weights falling below Epsilon become 0.
func (h *Histogram) SubtractSample(value, weight float64, t time.Time) {
	if !(weight >= 0) || math.IsInf(weight, 0) || math.IsNaN(value) {
		return
	}
	w := weight * h.decayFactor(t)
	b := h.findBucket(value)
	h.total = subtractToZero(h.total, w, h.opts.Epsilon)
	if b < len(h.weights) {
		h.weights[b] = subtractToZero(h.weights[b], w, h.opts.Epsilon)
	}
	h.shrinkBounds()
}

func subtractToZero(v, sub, eps float64) float64 {
	v -= sub
	if v < eps {
		return 0
	}
	return v
}

func (h *Histogram) shrinkBounds() {
	last := h.opts.NumBuckets - 1
	for h.at(h.min) < h.opts.Epsilon && h.min < last {
		h.min++
	}
	for h.at(h.max) < h.opts.Epsilon && h.max > 0 {
		h.max--
	}
}

// Percentile returns the upper end of the first bucket at which the
// cumulative weight reaches p·total (the last bucket returns its start), or
// 0 for an empty histogram. p is a fraction in [0, 1].
func (h *Histogram) Percentile(p float64) float64 {
	if h.IsEmpty() {
		return 0
	}
	threshold := p * h.total
	sum := 0.0
	b := h.min
	for ; b < h.max; b++ {
		sum += h.weights[b]
		if sum >= threshold {
			break
		}
	}
	if b < h.opts.NumBuckets-1 {
		return h.opts.BucketStart(b + 1)
	}
	return h.opts.BucketStart(b)
}

// Merge adds other's weights into h. Both are first brought to the later
// reference time by a power-of-two scaling, which is exact in float64, so
// histograms of different nodes add up without loss. other is not modified.
func (h *Histogram) Merge(other *Histogram) error {
	if h.opts != other.opts {
		return fmt.Errorf("%w: merging %+v into %+v", ErrOptionsMismatch, other.opts, h.opts)
	}
	o := other
	if h.ref.Before(other.ref) {
		h.shiftReference(other.ref)
	} else if other.ref.Before(h.ref) {
		o = other.Clone()
		o.shiftReference(h.ref)
	}
	if o.min <= o.max {
		h.reach(o.max)
	}
	for b := o.min; b <= o.max; b++ {
		h.weights[b] += o.at(b)
	}
	h.total += o.total
	if o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	return nil
}

// Clone returns an independent copy.
func (h *Histogram) Clone() *Histogram {
	c := *h
	c.weights = append([]float64(nil), h.weights...)
	c.memo = nil
	return &c
}

// Equal reports whether both histograms have the same options, reference,
// bounds and bucket weights.
func (h *Histogram) Equal(o *Histogram) bool {
	if h.opts != o.opts || !h.ref.Equal(o.ref) || h.min != o.min || h.max != o.max || h.total != o.total {
		return false
	}
	for b := range max(len(h.weights), len(o.weights)) {
		if h.at(b) != o.at(b) {
			return false
		}
	}
	return true
}

// decayFactor returns 2^((t − ref)/HalfLife), first moving the reference
// when t is more than maxDecayExponent half-lives past it (VPA does the same,
// including the initial move from the zero time).
func (h *Histogram) decayFactor(t time.Time) float64 {
	if h.opts.HalfLife == 0 {
		return 1
	}
	if t.After(h.maxRef) {
		h.shiftReference(t)
	}
	x := float64(t.Sub(h.ref)) / float64(h.opts.HalfLife)
	if h.memo != nil {
		return h.memo.exp2(x)
	}
	return math.Exp2(x)
}

// decayMemo remembers recent math.Exp2 results by their exact argument, for
// the histograms of one Recommender (used under its lock). Every container
// sampled in a collection round at the round's time, with the same
// half-life and reference time, asks for the same decay factor: the memo
// computes it once per round instead of once per sample. A remembered value
// is math.Exp2's own result for the same argument bits, so only the cost
// changes. Direct-mapped; an empty slot has val 0, which Exp2 returns only
// on underflow (then it is simply recomputed).
type decayMemo [64]struct{ arg, val uint64 }

func (m *decayMemo) exp2(x float64) float64 {
	xb := math.Float64bits(x)
	s := &m[(xb*0x9E3779B97F4A7C15)>>58]
	if s.arg == xb && s.val != 0 {
		return math.Float64frombits(s.val)
	}
	v := math.Exp2(x)
	s.arg, s.val = xb, math.Float64bits(v)
	return v
}

func (h *Histogram) shiftReference(t time.Time) {
	if h.opts.HalfLife == 0 {
		h.ref = t
		h.derive()
		return
	}
	t = t.Round(h.opts.HalfLife)
	exp := int(math.Floor(float64(h.ref.Sub(t))/float64(h.opts.HalfLife) + 0.5))
	h.scale(math.Ldexp(1, exp))
	h.ref = t
	h.derive()
}

func (h *Histogram) scale(f float64) {
	for b := h.min; b <= min(h.max, len(h.weights)-1); b++ {
		h.weights[b] *= f
	}
	h.total *= f
	h.shrinkBounds()
}

// Encoded histogram (all integers little-endian or varint):
//
//	byte     format version (1)
//	float64  FirstBucketSize, Ratio, Epsilon
//	uvarint  NumBuckets
//	varint   HalfLife (ns)
//	varint   reference unix seconds; uvarint nanoseconds
//	uvarint  min, max bucket bounds
//	float64  total weight
//	uvarint  count of non-zero buckets, then per bucket:
//	         uvarint gap to the previous index (+1), float64 weight
//
// Weights are stored exactly, so a round trip is lossless. The worst case
// (all 176 VPA buckets set) is under 1.7 KiB.
const histogramEncodingV1 = 1

// MarshalBinary encodes h in the sparse form above.
func (h *Histogram) MarshalBinary() ([]byte, error) {
	return h.appendBinary(make([]byte, 0, 64+10*h.nonZero())), nil
}

func (h *Histogram) nonZero() int {
	n := 0
	for _, w := range h.weights {
		if w != 0 {
			n++
		}
	}
	return n
}

func (h *Histogram) appendBinary(buf []byte) []byte {
	buf = append(buf, histogramEncodingV1)
	buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(h.opts.FirstBucketSize))
	buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(h.opts.Ratio))
	buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(h.opts.Epsilon))
	buf = binary.AppendUvarint(buf, uint64(h.opts.NumBuckets))
	buf = binary.AppendVarint(buf, int64(h.opts.HalfLife))
	buf = binary.AppendVarint(buf, h.ref.Unix())
	buf = binary.AppendUvarint(buf, uint64(h.ref.Nanosecond()))
	buf = binary.AppendUvarint(buf, uint64(h.min))
	buf = binary.AppendUvarint(buf, uint64(h.max))
	buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(h.total))
	buf = binary.AppendUvarint(buf, uint64(h.nonZero()))
	prev := -1
	for b, w := range h.weights {
		if w == 0 {
			continue
		}
		buf = binary.AppendUvarint(buf, uint64(b-prev))
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(w))
		prev = b
	}
	return buf
}

// UnmarshalBinary replaces h with the decoded histogram. On error h is left
// unchanged.
func (h *Histogram) UnmarshalBinary(data []byte) error {
	d := decoder{buf: data}
	dec, err := d.histogram()
	if err != nil {
		return err
	}
	if len(d.buf) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorruptHistogram, len(d.buf))
	}
	*h = *dec
	return nil
}

// decoder reads the histogram encoding; every read checks bounds.
type decoder struct {
	buf []byte
	err error
	// kind is the sentinel failures wrap (default ErrCorruptHistogram).
	kind error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		kind := d.kind
		if kind == nil {
			kind = ErrCorruptHistogram
		}
		d.err = fmt.Errorf("%w: "+format, append([]any{kind}, args...)...)
	}
}

func (d *decoder) byte() byte {
	if len(d.buf) < 1 {
		d.fail("truncated")
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

func (d *decoder) float() float64 {
	if len(d.buf) < 8 {
		d.fail("truncated")
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.buf))
	d.buf = d.buf[8:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.buf)
	return took(d, v, n, "uvarint")
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.buf)
	return took(d, v, n, "varint")
}

// took drops the n bytes binary.Uvarint or binary.Varint read v from and
// returns v; n ≤ 0 (no valid varint there) fails as a bad one.
func took[T uint64 | int64](d *decoder, v T, n int, what string) T {
	if n <= 0 {
		d.fail("bad %s", what)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// histogram decodes one histogram; its weights reach the max bound or the
// last bucket decoded, whichever is higher.
func (d *decoder) histogram() (*Histogram, error) {
	if v := d.byte(); d.err == nil && v != histogramEncodingV1 {
		d.fail("encoding version %d, want %d", v, histogramEncodingV1)
	}
	var o HistogramOptions
	o.FirstBucketSize = d.float()
	o.Ratio = d.float()
	o.Epsilon = d.float()
	nb := d.uvarint()
	hl := d.varint()
	sec := d.varint()
	nsec := d.uvarint()
	lo, hi := d.uvarint(), d.uvarint()
	total := d.float()
	count := d.uvarint()
	if d.err != nil {
		return nil, d.err
	}
	if nb > maxHistogramBuckets {
		return nil, fmt.Errorf("%w: %d buckets", ErrCorruptHistogram, nb)
	}
	o.NumBuckets = int(nb)
	o.HalfLife = time.Duration(hl)
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptHistogram, err)
	}
	if nsec >= 1e9 || lo >= nb || hi >= nb || count > nb {
		return nil, fmt.Errorf("%w: nanoseconds %d, bounds %d..%d or %d buckets out of range for %d buckets", ErrCorruptHistogram, nsec, lo, hi, count, nb)
	}
	if !(total >= 0) || math.IsInf(total, 0) {
		return nil, fmt.Errorf("%w: total weight %v", ErrCorruptHistogram, total)
	}
	h := &Histogram{opts: o, weights: make([]float64, hi+1), total: total, min: int(lo), max: int(hi), layout: knownLayout(o)}
	h.ref = time.Unix(sec, int64(nsec))
	if sec == (time.Time{}).Unix() && nsec == 0 {
		h.ref = time.Time{} // keep IsZero and the exact VPA starting reference
	}
	h.derive()
	prev := -1
	for range count {
		gap := d.uvarint()
		w := d.float()
		if d.err != nil {
			return nil, d.err
		}
		if gap == 0 || gap > nb || prev+int(gap) >= int(nb) {
			return nil, fmt.Errorf("%w: bucket index gap %d after %d", ErrCorruptHistogram, gap, prev)
		}
		prev += int(gap)
		if !(w > 0) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("%w: bucket %d weight %v", ErrCorruptHistogram, prev, w)
		}
		h.reach(prev)
		h.weights[prev] = w
	}
	return h, nil
}

// costOptimum returns the bucket end x minimising
// E[(x − u)⁺] + cost·P(u > x) under the histogram's weights, with u taken at
// its bucket's midpoint; 0 for an empty histogram.
func (h *Histogram) costOptimum(cost float64) float64 {
	if h.IsEmpty() || !(h.total > 0) {
		return 0
	}
	best, bestCost := 0.0, math.Inf(1)
	h.bucketEnds(func(_ int, x, below, moment float64) {
		c := (x*below-moment)/h.total + cost*max(h.total-below, 0)/h.total
		if c < bestCost {
			best, bestCost = x, c
		}
	})
	return best
}

// bucketEnds calls f for every bucket b from the lowest non-empty one up
// with its end x (the candidate target it stands for; the last bucket's
// start), the weight at or below x and that weight's first moment Σ w·mid,
// u taken at its bucket's midpoint. Then E[(x − u)⁺] = (x·below −
// moment)/total and P(u > x) = (total − below)/total.
func (h *Histogram) bucketEnds(f func(b int, x, below, moment float64)) {
	var below, moment float64
	lo := h.opts.BucketStart(h.min)
	for b := h.min; b <= h.max; b++ {
		hi := h.opts.BucketStart(b + 1)
		if b == h.opts.NumBuckets-1 {
			hi = lo
		}
		below += h.weights[b]
		moment += h.weights[b] * (lo + hi) / 2
		f(b, hi, below, moment)
		lo = hi
	}
}

// cdf returns the share of the weight in buckets that end at or below x
// (the percentile a bucket end stands for); 0 for an empty histogram.
func (h *Histogram) cdf(x float64) float64 {
	if h.IsEmpty() || !(h.total > 0) {
		return 0
	}
	below := 0.0
	for b := h.min; b <= h.max && h.opts.BucketStart(b+1) <= x; b++ {
		below += h.weights[b]
	}
	return min(below/h.total, 1)
}

// mean returns the weighted mean of the bucket midpoints; 0 when empty.
func (h *Histogram) mean() float64 {
	if h.IsEmpty() || !(h.total > 0) {
		return 0
	}
	var m float64
	for b := h.min; b <= h.max; b++ {
		hi := h.opts.BucketStart(b + 1)
		if b == h.opts.NumBuckets-1 {
			hi = h.opts.BucketStart(b)
		}
		m += h.weights[b] * (h.opts.BucketStart(b) + hi) / 2
	}
	return m / h.total
}
